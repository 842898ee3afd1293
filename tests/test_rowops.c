/*
 * test_rowops.c — the row ops (qmm_rope, rowops.h, SPEC §13) against an independent naive
 * definition written from the kitchen's eager code (one element at a time, straight from the
 * tensor's strides: rms_norm with the 16-lane sum, then pair i's 2×2 product as mul + fused
 * multiply-add in the freqs' dtype C, rounded to x's dtype T). Checked bit for bit (NaN meets NaN):
 *   - qmm_rope through the context (the AVX2 kernel where the CPU has it, else scalar);
 *   - the scalar reference kernel (qmm_rope_run, ref) — so the two kernels agree with each other;
 * swept over T, C and the norm weight's dtype (none, = T, another), interleaved / split half,
 * D (2 .. 260, vector tails), partial rot_dim, layouts [B, H, S, D] with freqs broadcast over
 * heads and [B, S, H, D] over batch and heads, strided x (a slice of a packed qkv), in place,
 * 1 and 2 threads, rows with NaN / Inf / huge / tiny values. The same for the RMSNorm +
 * modulation rows (qmm_rms_mod: adaln, gated residual; with and without a weight; D 1 .. 3072;
 * scale/shift or gate/residual broadcast over tokens). Then every bad argument of both calls: a
 * status naming it, never a crash. A failing case prints the case and the first bad (row, k).
 */
#include "rowops.h"
#include "numerics.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const qmm_dtype k_dt[3] = {QMM_F32, QMM_BF16, QMM_F16};

/* the definition, per row, from scratch (no code shared with rowops.c but numerics.h's roundings) */
static void naive_row(const qmm_rope_args *a, const void *x, const void *f, void *out) {
    const qmm_dtype t = a->x_dtype, c = a->freqs_dtype;
    const int64_t D = a->D, rot = a->rot_dim ? a->rot_dim : D, h = rot / 2;
    float v[QMM_ROPE_MAX_D];
    for (int64_t k = 0; k < D; k++) v[k] = qmm_load_f(x, t, k);
    if (a->norm_weight) {
        float lane[16] = {0};
        for (int64_t k = 0; k < D; k++) lane[k % 16] = lane[k % 16] + v[k] * v[k];
        for (int w = 8; w >= 1; w /= 2)
            for (int i = 0; i < w; i++) lane[i] = lane[i] + lane[i + w];
        const float r = 1.0f / sqrtf(lane[0] / (float)D + a->eps);
        for (int64_t k = 0; k < D; k++) {
            const float w = qmm_load_f(a->norm_weight, a->norm_weight_dtype, k);
            v[k] = qmm_round_to((v[k] * r) * w, t);
        }
    }
    float y[QMM_ROPE_MAX_D];
    for (int64_t k = 0; k < D; k++) y[k] = v[k];
    for (int64_t i = 0; i < h; i++) {
        const int64_t j0 = a->split_half ? i : 2 * i, j1 = a->split_half ? i + h : 2 * i + 1;
        const float x0 = qmm_round_to(v[j0], c), x1 = qmm_round_to(v[j1], c);
        const float f00 = qmm_load_f(f, c, 4 * i), f01 = qmm_load_f(f, c, 4 * i + 1);
        const float f10 = qmm_load_f(f, c, 4 * i + 2), f11 = qmm_load_f(f, c, 4 * i + 3);
        if (a->split_half) { /* out = t·diag, then addcmul_(partner, off-diagonal) */
            y[j0] = qmm_round_to(fmaf(x1, f01, qmm_round_to(x0 * f00, c)), c);
            y[j1] = qmm_round_to(fmaf(x0, f10, qmm_round_to(x1 * f11, c)), c);
        } else { /* out = f[..., 0]·x0, then addcmul_(f[..., 1], x1) */
            y[j0] = qmm_round_to(fmaf(f01, x1, qmm_round_to(f00 * x0, c)), c);
            y[j1] = qmm_round_to(fmaf(f11, x1, qmm_round_to(f10 * x0, c)), c);
        }
    }
    for (int64_t k = 0; k < D; k++) {
        if (!a->norm_weight && k >= rot) memcpy((char *)out + k * (int64_t)qmm_dtype_size(t),
                                               (const char *)x + k * (int64_t)qmm_dtype_size(t), qmm_dtype_size(t));
        else qmm_store_f(out, t, k, y[k]);
    }
}

static const void *at(const void *p, const int64_t s[3], int64_t i0, int64_t i1, int64_t i2, qmm_dtype t) {
    return (const char *)p + (i0 * s[0] + i1 * s[1] + i2 * s[2]) * (int64_t)qmm_dtype_size(t);
}

static int64_t span_elems(const int64_t n[3], const int64_t s[3], int64_t last) {
    return (n[0] - 1) * s[0] + (n[1] - 1) * s[1] + (n[2] - 1) * s[2] + last;
}

/* one case: x random (with hostile values where asked), layout 0 [B, H, S, D] freqs [B, 1, S],
 * 1 [B, S, H, D] freqs [1, S, 1], 2 as 1 with x a slice of a packed [B, S, 3H, D] qkv; in place */
static int run_case(qmm_context *ctx, qmm_dtype t, qmm_dtype c, int wmode, int split, int64_t D, int64_t rot,
                    int layout, int in_place, int hostile) {
    qmm_rope_args a = qmm_rope_args_default();
    const int64_t B = tu_rand_int(1, 2), H = tu_rand_int(1, 5), S = tu_rand_int(1, 9);
    const int64_t R = rot ? rot : D;
    a.D = D; a.rot_dim = rot; a.split_half = split; a.x_dtype = t; a.freqs_dtype = c;
    a.eps = 1e-6f;
    int64_t fn[3];
    if (layout == 0) {
        a.n[0] = B; a.n[1] = H; a.n[2] = S;
        a.x_stride[0] = H * S * D; a.x_stride[1] = S * D; a.x_stride[2] = D;
        fn[0] = B; fn[1] = 1; fn[2] = S;
        a.freqs_stride[0] = S * 2 * R; a.freqs_stride[1] = 0; a.freqs_stride[2] = 2 * R;
    } else {
        const int64_t W = layout == 2 ? 3 * H : H;
        a.n[0] = B; a.n[1] = S; a.n[2] = H;
        a.x_stride[0] = S * W * D; a.x_stride[1] = W * D; a.x_stride[2] = D;
        fn[0] = 1; fn[1] = S; fn[2] = 1;
        a.freqs_stride[0] = 0; a.freqs_stride[1] = 2 * R; a.freqs_stride[2] = 0;
    }
    const int64_t contig[3] = {a.n[1] * a.n[2] * D, a.n[2] * D, D};
    const int64_t xn = span_elems(a.n, a.x_stride, D) + (layout == 2 ? H * D : 0);
    const int64_t fnel = fn[0] * fn[1] * fn[2] * 2 * R;
    const size_t te = qmm_dtype_size(t);
    char *x = malloc((size_t)xn * te), *x0 = malloc((size_t)xn * te), *f = malloc((size_t)fnel * qmm_dtype_size(c));
    const int64_t on = a.n[0] * a.n[1] * a.n[2] * D;
    char *o = malloc((size_t)on * te), *o_ref = malloc((size_t)on * te), *o_naive = malloc((size_t)on * te);
    char *w = malloc((size_t)D * 4);
    /* a slice of the packed qkv: start at the k part */
    const int64_t off = layout == 2 ? H * D : 0;
    tu_fill_float(x, t, xn, hostile ? 1000.0f : 2.0f);
    if (hostile)
        for (int64_t i = 0; i < xn; i += tu_rand_int(1, 17)) {
            static const uint32_t f32b[] = {0x7fc00000u, 0x7f800000u, 0xff800000u, 0x00000001u, 0x80000000u, 0x7f7fffffu};
            static const uint32_t h16b[] = {0x7e00u, 0x7c00u, 0xfc00u, 0x0001u, 0x8000u, 0x7bffu};
            static const uint32_t bf16b[] = {0x7fc0u, 0x7f80u, 0xff80u, 0x0001u, 0x8000u, 0x7f7fu};
            const int r = (int)tu_rand_int(0, 5);
            tu_store_bits(x, t, i, t == QMM_F32 ? f32b[r] : t == QMM_F16 ? h16b[r] : bf16b[r]);
        }
    tu_fill_float(f, c, fnel, 1.0f);
    qmm_dtype wt = wmode == 1 ? t : k_dt[(tu_rand_int(0, 1) + 1 + (t == QMM_F32 ? 0 : t == QMM_BF16 ? 1 : 2)) % 3];
    if (wmode) {
        tu_fill_float(w, wt, D, 1.0f);
        a.norm_weight = w; a.norm_weight_dtype = wt;
    }
    memcpy(x0, x, (size_t)xn * te);
    a.x = x + off * (int64_t)te;
    a.freqs = f;
    /* the naive result, contiguous */
    for (int64_t i0 = 0; i0 < a.n[0]; i0++)
        for (int64_t i1 = 0; i1 < a.n[1]; i1++)
            for (int64_t i2 = 0; i2 < a.n[2]; i2++)
                naive_row(&a, at(a.x, a.x_stride, i0, i1, i2, t), at(f, a.freqs_stride, i0, i1, i2, c),
                          (void *)at(o_naive, contig, i0, i1, i2, t));
    /* the scalar kernel through the driver, contiguous out */
    a.out = o_ref;
    memcpy(a.out_stride, contig, sizeof contig);
    qmm_rope_call call;
    memset(&call, 0, sizeof call);
    memcpy(call.n, a.n, sizeof call.n);
    call.x = a.x; memcpy(call.xs, a.x_stride, sizeof call.xs);
    call.out = o_ref; memcpy(call.os, contig, sizeof call.os);
    call.freqs = f; memcpy(call.fs, a.freqs_stride, sizeof call.fs);
    float w32[QMM_ROPE_MAX_D];
    call.row = (qmm_rope_row){D, R, split, t, c, NULL, a.eps};
    if (wmode) {
        for (int64_t k = 0; k < D; k++) w32[k] = qmm_load_f(w, wt, k);
        call.row.w = w32;
    }
    qmm_status st_ref = qmm_rope_run(ctx, &call, 1);
    /* the public call: in place or into o */
    qmm_status st;
    if (in_place) {
        a.out = (void *)a.x;
        memcpy(a.out_stride, a.x_stride, sizeof a.out_stride);
    } else {
        a.out = o;
    }
    st = qmm_rope(ctx, &a);
    if (in_place) /* gather the result into o */
        for (int64_t i0 = 0; i0 < a.n[0]; i0++)
            for (int64_t i1 = 0; i1 < a.n[1]; i1++)
                for (int64_t i2 = 0; i2 < a.n[2]; i2++)
                    memcpy((void *)at(o, contig, i0, i1, i2, t), at(a.x, a.x_stride, i0, i1, i2, t), (size_t)D * te);
    int64_t bad_ref = tu_first_diff(o_ref, o_naive, t, on), bad = tu_first_diff(o, o_naive, t, on);
    /* in place must leave the rest of the packed buffer alone */
    int64_t bad_rest = -1;
    if (in_place && layout == 2)
        for (int64_t e = 0; e < off && bad_rest < 0; e++)
            if (!tu_same_elem(x, x0, t, e)) bad_rest = e;
    const int ok = st == QMM_OK && st_ref == QMM_OK && bad_ref < 0 && bad < 0 && bad_rest < 0;
    TU_CHECK(ok, "rope T=%s C=%s w=%s split=%d D=%lld rot=%lld layout=%d in_place=%d hostile=%d n=[%lld,%lld,%lld]: "
             "status %s/%s, ref kernel first bad %lld (row %lld k %lld: %g vs %g), qmm_rope first bad %lld "
             "(%g vs %g), outside the slice %lld",
             qmm_dtype_name(t), qmm_dtype_name(c), wmode ? qmm_dtype_name(wt) : "none", split, (long long)D,
             (long long)rot, layout, in_place, hostile, (long long)a.n[0], (long long)a.n[1], (long long)a.n[2],
             qmm_status_name(st_ref), qmm_status_name(st), (long long)bad_ref, (long long)(bad_ref / D),
             (long long)(bad_ref % D), bad_ref >= 0 ? tu_load(o_ref, t, bad_ref) : 0.0,
             bad_ref >= 0 ? tu_load(o_naive, t, bad_ref) : 0.0, (long long)bad,
             bad >= 0 ? tu_load(o, t, bad) : 0.0, bad >= 0 ? tu_load(o_naive, t, bad) : 0.0, (long long)bad_rest);
    free(x); free(x0); free(f); free(o); free(o_ref); free(o_naive); free(w);
    return ok;
}

static void sweep(qmm_context *ctx, int quick) {
    static const int64_t Ds[] = {2, 6, 16, 18, 32, 64, 96, 128, 130, 256, 260};
    int n = 0, fails = 0;
    for (int ti = 0; ti < 3; ti++)
        for (int ci = 0; ci < 3; ci++)
            for (int wmode = 0; wmode < 3; wmode++)
                for (int split = 0; split < 2; split++)
                    for (size_t di = 0; di < sizeof Ds / sizeof Ds[0]; di++) {
                        if (quick && (di + ti + ci) % 3) continue;
                        const int64_t D = Ds[di];
                        int64_t rot = 0;
                        if (D >= 6 && tu_rand_int(0, 3) == 0) rot = 2 * tu_rand_int(1, D / 2 - 1);
                        const int layout = (int)tu_rand_int(0, 2);
                        const int in_place = (int)tu_rand_int(0, 1);
                        const int hostile = tu_rand_int(0, 4) == 0;
                        fails += !run_case(ctx, k_dt[ti], k_dt[ci], wmode, split, D, rot, layout, in_place, hostile);
                        n++;
                    }
    tu_note("%d cases at %d thread(s), %d failed", n, qmm_context_threads(ctx), fails);
}

#define EXPECT_ERR(expr, word)                                                                             \
    do {                                                                                                   \
        qmm_status st__ = (expr);                                                                          \
        TU_CHECK(st__ != QMM_OK && strstr(qmm_last_error(), word) != NULL, "%s -> %s (%s), expected an error naming %s", \
                 #expr, qmm_status_name(st__), qmm_last_error(), word);                                   \
    } while (0)

static void bad_arguments(qmm_context *ctx) {
    float x[64], o[64], f[64], w[16];
    memset(x, 0, sizeof x); memset(f, 0, sizeof f); memset(w, 0, sizeof w);
    qmm_rope_args a = qmm_rope_args_default(), b;
    a.D = 8; a.n[0] = 2; a.x = x; a.out = o; a.freqs = f;
    a.x_stride[0] = 8; a.out_stride[0] = 8; a.freqs_stride[0] = 16;
    TU_CHECK_OK(qmm_rope(ctx, &a));
    EXPECT_ERR(qmm_rope(NULL, &a), "ctx");
    EXPECT_ERR(qmm_rope(ctx, NULL), "args");
    b = a; b.x = NULL; EXPECT_ERR(qmm_rope(ctx, &b), "x");
    b = a; b.out = NULL; EXPECT_ERR(qmm_rope(ctx, &b), "out");
    b = a; b.freqs = NULL; EXPECT_ERR(qmm_rope(ctx, &b), "freqs");
    b = a; b.n[1] = 0; EXPECT_ERR(qmm_rope(ctx, &b), "n[1]");
    b = a; b.D = 7; EXPECT_ERR(qmm_rope(ctx, &b), "D = 7");
    b = a; b.D = 0; EXPECT_ERR(qmm_rope(ctx, &b), "D = 0");
    b = a; b.D = QMM_ROPE_MAX_D + 2; EXPECT_ERR(qmm_rope(ctx, &b), "D =");
    b = a; b.rot_dim = 3; EXPECT_ERR(qmm_rope(ctx, &b), "rot_dim");
    b = a; b.rot_dim = 10; EXPECT_ERR(qmm_rope(ctx, &b), "rot_dim");
    b = a; b.x_dtype = QMM_I8; EXPECT_ERR(qmm_rope(ctx, &b), "x_dtype");
    b = a; b.freqs_dtype = QMM_I32; EXPECT_ERR(qmm_rope(ctx, &b), "freqs_dtype");
    b = a; b.norm_weight = w; b.norm_weight_dtype = QMM_U8; EXPECT_ERR(qmm_rope(ctx, &b), "norm_weight_dtype");
    b = a; b.norm_weight = w; b.eps = NAN; EXPECT_ERR(qmm_rope(ctx, &b), "eps");
    b = a; b.split_half = 2; EXPECT_ERR(qmm_rope(ctx, &b), "split_half");
    b = a; b.x_stride[0] = -8; EXPECT_ERR(qmm_rope(ctx, &b), "x_stride[0]");
    b = a; b.out_stride[0] = -8; EXPECT_ERR(qmm_rope(ctx, &b), "out_stride[0]");
    b = a; b.freqs_stride[0] = -1; EXPECT_ERR(qmm_rope(ctx, &b), "freqs_stride[0]");
    b = a; b.out_stride[0] = 4; EXPECT_ERR(qmm_rope(ctx, &b), "share memory");
    b = a; b.out = x + 4; EXPECT_ERR(qmm_rope(ctx, &b), "overlaps x");
    b = a; b.out = x; b.out_stride[0] = 16; b.n[0] = 2; EXPECT_ERR(qmm_rope(ctx, &b), "overlaps x");
    b = a; b.out = f; EXPECT_ERR(qmm_rope(ctx, &b), "overlaps freqs");
    b = a; b.norm_weight = o + 2; EXPECT_ERR(qmm_rope(ctx, &b), "overlaps norm_weight");
    b = a; b.n[0] = INT64_MAX / 2; b.n[1] = 4; EXPECT_ERR(qmm_rope(ctx, &b), "n =");
    b = a; b.n[0] = INT64_MAX / 4; EXPECT_ERR(qmm_rope(ctx, &b), "overflows");
    /* in place: out = x with x's strides */
    b = a; b.out = x; b.out_stride[0] = 8; TU_CHECK_OK(qmm_rope(ctx, &b));
}

/* ---------------------------------------------------------------- RMSNorm + modulation */
static void naive_mod_row(const qmm_rms_mod_args *a, const void *x, const void *av, const void *bv, void *out) {
    const qmm_dtype t = a->dtype;
    const int64_t D = a->D;
    float lane[16] = {0};
    for (int64_t k = 0; k < D; k++) {
        const float v = qmm_load_f(x, t, k);
        lane[k % 16] = lane[k % 16] + v * v;
    }
    for (int w = 8; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) lane[i] = lane[i] + lane[i + w];
    const float r = 1.0f / sqrtf(lane[0] / (float)D + a->eps);
    for (int64_t k = 0; k < D; k++) {
        /* torch: rms_norm (one rounding), then each elementwise op rounded to T */
        const float n = qmm_round_to(a->norm_weight ? (qmm_load_f(x, t, k) * r) * qmm_load_f(a->norm_weight, t, k)
                                                    : qmm_load_f(x, t, k) * r, t);
        const float s = qmm_load_f(av, t, k), h = qmm_load_f(bv, t, k);
        const float y = a->kind == QMM_RMS_ADALN ? qmm_round_to(qmm_round_to(n * qmm_round_to(1.0f + s, t), t) + h, t)
                                                 : qmm_round_to(h + qmm_round_to(s * n, t), t);
        qmm_store_f(out, t, k, y);
    }
}

/* x [B, S, D] (n = {1, B, S}), a and b [B, 1, D] (broadcast over tokens) or [B, S, D] */
static int run_mod_case(qmm_context *ctx, qmm_dtype t, int kind, int weight, int64_t D, int bcast, int hostile) {
    qmm_rms_mod_args a = qmm_rms_mod_args_default();
    const int64_t B = tu_rand_int(1, 3), S = tu_rand_int(1, 7);
    const size_t te = qmm_dtype_size(t);
    a.n[1] = B; a.n[2] = S; a.D = D; a.dtype = t; a.kind = (qmm_rms_mod_kind)kind; a.eps = 1e-6f;
    const int64_t xs[3] = {0, S * D, D}, ms[3] = {0, bcast ? D : S * D, bcast ? 0 : D};
    const int64_t xn = B * S * D, mn = bcast ? B * D : xn;
    char *x = malloc((size_t)xn * te), *o = malloc((size_t)xn * te), *o_ref = malloc((size_t)xn * te);
    char *o_naive = malloc((size_t)xn * te), *av = malloc((size_t)mn * te), *bv = malloc((size_t)mn * te);
    char *w = malloc((size_t)D * te);
    tu_fill_float(x, t, xn, hostile ? 1000.0f : 2.0f);
    if (hostile)
        for (int64_t i = 0; i < xn; i += tu_rand_int(1, 40))
            tu_store_bits(x, t, i, t == QMM_F32 ? 0x7f800000u : t == QMM_F16 ? 0x7c00u : 0x7f80u);
    tu_fill_float(av, t, mn, 0.3f);
    tu_fill_float(bv, t, mn, 1.0f);
    tu_fill_float(w, t, D, 1.0f);
    a.x = x; memcpy(a.x_stride, xs, sizeof xs);
    a.out = o; memcpy(a.out_stride, xs, sizeof xs);
    a.a = av; memcpy(a.a_stride, ms, sizeof ms);
    a.b = bv; memcpy(a.b_stride, ms, sizeof ms);
    a.norm_weight = weight ? w : NULL;
    for (int64_t i = 0; i < B; i++)
        for (int64_t j = 0; j < S; j++)
            naive_mod_row(&a, at(x, xs, 0, i, j, t), at(av, ms, 0, i, j, t), at(bv, ms, 0, i, j, t),
                          (void *)at(o_naive, xs, 0, i, j, t));
    qmm_rms_mod_call c;
    memset(&c, 0, sizeof c);
    memcpy(c.n, a.n, sizeof c.n);
    c.x = x; memcpy(c.xs, xs, sizeof xs);
    c.out = o_ref; memcpy(c.os, xs, sizeof xs);
    c.a = av; memcpy(c.as, ms, sizeof ms);
    c.b = bv; memcpy(c.bs, ms, sizeof ms);
    c.row = (qmm_rms_mod_row){D, t, a.norm_weight, kind, a.eps};
    const qmm_status st_ref = qmm_rms_mod_run(ctx, &c, 1), st = qmm_rms_mod(ctx, &a);
    const int64_t bad_ref = tu_first_diff(o_ref, o_naive, t, xn), bad = tu_first_diff(o, o_naive, t, xn);
    const int ok = st == QMM_OK && st_ref == QMM_OK && bad_ref < 0 && bad < 0;
    TU_CHECK(ok, "rms_mod %s T=%s weight=%d D=%lld bcast=%d hostile=%d B=%lld S=%lld: status %s/%s, ref kernel "
             "first bad %lld (%g vs %g), qmm_rms_mod first bad %lld (%g vs %g)",
             kind == QMM_RMS_ADALN ? "adaln" : "gated_residual", qmm_dtype_name(t), weight, (long long)D, bcast,
             hostile, (long long)B, (long long)S, qmm_status_name(st_ref), qmm_status_name(st), (long long)bad_ref,
             bad_ref >= 0 ? tu_load(o_ref, t, bad_ref) : 0.0, bad_ref >= 0 ? tu_load(o_naive, t, bad_ref) : 0.0,
             (long long)bad, bad >= 0 ? tu_load(o, t, bad) : 0.0, bad >= 0 ? tu_load(o_naive, t, bad) : 0.0);
    free(x); free(o); free(o_ref); free(o_naive); free(av); free(bv); free(w);
    return ok;
}

static void sweep_mod(qmm_context *ctx) {
    static const int64_t Ds[] = {1, 7, 8, 16, 17, 64, 130, 1000, 3072};
    int n = 0, fails = 0;
    for (int ti = 0; ti < 3; ti++)
        for (int kind = 0; kind < 2; kind++)
            for (int weight = 0; weight < 2; weight++)
                for (size_t di = 0; di < sizeof Ds / sizeof Ds[0]; di++) {
                    fails += !run_mod_case(ctx, k_dt[ti], kind, weight, Ds[di], (int)tu_rand_int(0, 1),
                                           tu_rand_int(0, 4) == 0);
                    n++;
                }
    tu_note("%d rms_mod cases at %d thread(s), %d failed", n, qmm_context_threads(ctx), fails);
}

static void bad_mod_arguments(qmm_context *ctx) {
    float x[64], o[64], av[64], bv[64];
    memset(x, 0, sizeof x); memset(av, 0, sizeof av); memset(bv, 0, sizeof bv);
    qmm_rms_mod_args a = qmm_rms_mod_args_default(), b;
    a.D = 8; a.n[0] = 2; a.x = x; a.out = o; a.a = av; a.b = bv;
    a.x_stride[0] = a.out_stride[0] = a.a_stride[0] = a.b_stride[0] = 8;
    TU_CHECK_OK(qmm_rms_mod(ctx, &a));
    EXPECT_ERR(qmm_rms_mod(NULL, &a), "ctx");
    EXPECT_ERR(qmm_rms_mod(ctx, NULL), "args");
    b = a; b.x = NULL; EXPECT_ERR(qmm_rms_mod(ctx, &b), "x is NULL");
    b = a; b.a = NULL; EXPECT_ERR(qmm_rms_mod(ctx, &b), "a is NULL");
    b = a; b.b = NULL; EXPECT_ERR(qmm_rms_mod(ctx, &b), "b is NULL");
    b = a; b.out = NULL; EXPECT_ERR(qmm_rms_mod(ctx, &b), "out is NULL");
    b = a; b.D = 0; EXPECT_ERR(qmm_rms_mod(ctx, &b), "D = 0");
    b = a; b.n[2] = -1; EXPECT_ERR(qmm_rms_mod(ctx, &b), "n[2]");
    b = a; b.dtype = QMM_I8; EXPECT_ERR(qmm_rms_mod(ctx, &b), "dtype");
    b = a; b.kind = (qmm_rms_mod_kind)7; EXPECT_ERR(qmm_rms_mod(ctx, &b), "kind");
    b = a; b.eps = INFINITY; EXPECT_ERR(qmm_rms_mod(ctx, &b), "eps");
    b = a; b.a_stride[0] = -1; EXPECT_ERR(qmm_rms_mod(ctx, &b), "a_stride[0]");
    b = a; b.out_stride[0] = 0; EXPECT_ERR(qmm_rms_mod(ctx, &b), "share memory");
    b = a; b.out = x; EXPECT_ERR(qmm_rms_mod(ctx, &b), "overlaps x");
    b = a; b.out = bv + 4; EXPECT_ERR(qmm_rms_mod(ctx, &b), "overlaps b");
    b = a; b.norm_weight = o + 1; EXPECT_ERR(qmm_rms_mod(ctx, &b), "overlaps norm_weight");
    b = a; b.n[0] = INT64_MAX / 4; EXPECT_ERR(qmm_rms_mod(ctx, &b), "overflows");
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_rowops");
    const int quick = getenv("QMM_QUICK") != NULL;
    for (int th = 1; th <= 2; th++) {
        qmm_context_options opt = qmm_context_options_default();
        opt.n_threads = th;
        qmm_context *ctx;
        TU_CHECK_OK(qmm_context_create(&opt, &ctx));
        if (!ctx) break;
        if (th == 1) tu_note("core SIMD level: %s", qmm_isa_name((qmm_isa)qmm_core_simd(ctx)));
        sweep(ctx, quick);
        sweep_mod(ctx);
        if (th == 1) bad_arguments(ctx);
        if (th == 1) bad_mod_arguments(ctx);
        qmm_context_destroy(ctx);
    }
    return tu_finish();
}
