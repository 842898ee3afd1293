/*
 * fuzz_attention.c — libFuzzer target for qmm_attention (SPEC §10): the input bytes become a
 * small call — sizes, dtypes, each tensor's strides (dense, transposed, padded, zero, or any
 * small value), a mask of any kind and strides, a scale, a mode — over buffers allocated to the
 * exact extent the strides describe, so that ASan catches any read or write past a tensor. Every
 * engine available here (and the reference) runs what validation admits; a refusal must name
 * its argument. Checks: no crash, no out-of-bounds access; on finite inputs every engine's output
 * is finite and within a loose bound of the reference's (0.2 · max|v| + 2·10⁻³: mode int8's and
 * bf16's errors stay far below it); a row whose every key is masked is 0 on every engine. With
 * NaN or ±Inf among q, k, v and the mask: wherever the reference's out is NaN every engine's is
 * NaN (a NaN score makes its row NaN, SPEC §10), and where both are finite the loose bound holds.
 * Huge extents: k, v (and the mask) broadcast with stride 0 to Skv = 2^40 .. 2^54 or INT64_MAX
 * keys (and q to S past int64 / D): every engine, the reference and dispatch refuse, naming the
 * attention, before touching memory (the buffers are of the broadcast size).
 * Replayed on fuzz/corpus/attention/ by fuzz/replay.c in the normal tests; QMM_FUZZ_VERBOSE=1 prints
 * each call and its verdict.
 *
 * Input layout (missing bytes read as 0):
 *   h0  B = 1 + h0 % 2, Hkv = 1 + (h0 >> 1) % 3, H = Hkv · (1 + (h0 >> 3) % 3)
 *   h1  S = 1 + h1 % 70;  h2  Skv = 1 + h2 % 140;  h3  D = 1 + h3 % 80 (h3 & 128: D = 128)
 *   h4  q, kv, out dtype: h4 % 3, (h4 / 3) % 3, (h4 / 9) % 3 (f32, f16, bf16)
 *   h5  layouts of q, k, v, out: 2 bits each (dense, [B,S,H·D], padded tokens, free strides)
 *   h6  mask: h6 % 4 (none, bool, f32, bf16); its broadcast bits (h6 >> 2) & 7; key stride 1 or 2;
 *       h6 & 64 (a mask, k and v in layouts 0..2): key padding — the keys j % 3 == 1 masked for
 *       every row — and every engine's output bit for bit the same with those keys' k × 16 and
 *       v × 100 (SPEC §10: a key no row attends moves nothing); h6 & 128 (kv f32 or bf16): huge
 *       finite keys with a tiny scale — k × 2^115, the scale × 2^-115 (the same scores)
 *   h7  mode h7 % 3; scale = 0 (default) or (h7 >> 2) / 16; h7 & 128: a NaN scale
 *   h8  non-finite values: h8 & 1: a value byte 0x80 is NaN; h8 & 2: 0x81 is +Inf, 0x7f -Inf
 *       (in q, k, v and additive masks); h8 & 4: huge extents, Skv = 2^(40 + (h8 >> 3) % 16)
 *       (15: INT64_MAX), h8 & 128 also S = INT64_MAX / D + 1 with q broadcast
 *   then free strides (when asked) and the values: one byte each, c → (int8)c / 32, with 0xff
 *   giving +Inf in the masks (-Inf additive) and the values left finite (but for h8's).
 */
#include "qmm.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    const uint8_t *p;
    size_t n, i;
} rd;

static uint8_t next(rd *r) { return r->i < r->n ? r->p[r->i++] : 0; }

static float as_f32(const void *p, qmm_dtype t, int64_t i) {
    float f;
    if (t == QMM_F32) return ((const float *)p)[i];
    if (t == QMM_F16) { qmm_convert((const uint16_t *)p + i, QMM_F16, &f, QMM_F32, 1); return f; }
    qmm_convert((const uint16_t *)p + i, QMM_BF16, &f, QMM_F32, 1);
    return f;
}

/* strides of a [n0][n1][n2][D] tensor by layout l (free: from the input), and its extent (elements) */
static int64_t layout(rd *r, int l, int64_t n0, int64_t n1, int64_t n2, int64_t D, int64_t s[3]) {
    if (l == 0) { s[2] = D; s[1] = n2 * D; s[0] = n1 * n2 * D; }
    else if (l == 1) { s[2] = n1 * D; s[1] = D; s[0] = n2 * n1 * D; }
    else if (l == 2) { s[2] = D + 3; s[1] = n2 * (D + 3); s[0] = n1 * n2 * (D + 3); }
    else for (int i = 0; i < 3; i++) s[i] = next(r) % 8 == 0 ? 0 : (int64_t)next(r) * 3;
    return (n0 - 1) * s[0] + (n1 - 1) * s[1] + (n2 - 1) * s[2] + D;
}

static int g_nonfinite; /* h8 & 3 */

/* one value byte: (int8)c / 32, or NaN / ±Inf as h8 asks */
static float value(uint8_t c) {
    if ((g_nonfinite & 1) && c == 0x80) return NAN;
    if ((g_nonfinite & 2) && (c == 0x81 || c == 0x7f)) return c == 0x81 ? INFINITY : -INFINITY;
    return (float)(int8_t)c / 32.0f;
}

/* x[i] ×= f in dtype t (exact for powers of two; f16 and bf16 rounded once) */
static void scale_elem(void *x, qmm_dtype t, int64_t i, float f) {
    float y = as_f32(x, t, i) * f;
    if (t == QMM_F32) ((float *)x)[i] = y;
    else qmm_convert(&y, QMM_F32, (uint16_t *)x + i, t, 1);
}

/* every value of the keys j % 3 == 1 of x (k or v of a, strides s) × f */
static void scale_pad_keys(const qmm_attention_args *a, void *x, qmm_dtype t, const int64_t s[3], float f) {
    for (int64_t b = 0; b < a->B; b++)
        for (int64_t h = 0; h < a->Hkv; h++)
            for (int64_t j = 1; j < a->Skv; j += 3)
                for (int64_t d = 0; d < a->D; d++) scale_elem(x, t, b * s[0] + h * s[1] + j * s[2] + d, f);
}

static void *values(rd *r, qmm_dtype t, int64_t n) {
    void *p = malloc((size_t)n * qmm_dtype_size(t) + 1);
    for (int64_t i = 0; i < n; i++) {
        const float f = value(next(r));
        if (t == QMM_F32) ((float *)p)[i] = f;
        else qmm_convert(&f, QMM_F32, (uint16_t *)p + i, t, 1);
    }
    return p;
}

/* h8 & 4: k and v of D values broadcast to a huge Skv (and q to a huge S when h8 & 128): every
 * engine available, the reference and dispatch must refuse, naming the attention */
static int huge(qmm_context *ctx, uint8_t h3, uint8_t h6, uint8_t h8) {
    qmm_attention_args a = qmm_attention_args_default();
    a.B = 1; a.H = 2; a.Hkv = 1; a.S = 3; a.D = h3 & 128 ? 128 : 1 + h3 % 80;
    a.Skv = (h8 >> 3) % 16 == 15 ? INT64_MAX : (int64_t)1 << (40 + (h8 >> 3) % 16);
    float *kv = calloc((size_t)a.D, 4), *q = calloc((size_t)(2 * 3 * a.D), 4), *out = calloc((size_t)(2 * 3 * a.D), 4);
    const float madd = 0.0f;
    const uint8_t mbool = 1;
    a.q = q; a.k = kv; a.v = kv; a.out = out; /* k, v strides 0 */
    a.q_stride[2] = a.D; a.q_stride[1] = 3 * a.D;
    if (h8 & 128) { a.S = INT64_MAX / a.D + (a.D > 1); a.q_stride[2] = a.q_stride[1] = 0; } /* S·D past int64 */
    memcpy(a.out_stride, a.q_stride, sizeof a.out_stride);
    if (h8 & 128) { a.out_stride[2] = a.D; a.out_stride[1] = 3 * a.D; } /* out 2 × S rows: past int64 */
    if (h6 % 4) { a.mask = h6 % 4 == 1 ? (const void *)&mbool : (const void *)&madd; a.mask_dtype = h6 % 4 == 1 ? QMM_U8 : QMM_F32; }
    for (int e = -1; e < qmm_engine_count(); e++) {
        qmm_engine_info info = {.id = QMM_ENGINE_AUTO, .name = "dispatch"};
        if (e >= 0 && (qmm_engine_get_info(e, &info) != QMM_OK || !qmm_engine_available(info.id, NULL, 0))) continue;
        a.engine = info.id;
        for (int m = 0; m < 3; m++) {
            a.mode = (qmm_attn_mode)m;
            const qmm_status st = qmm_attention(ctx, &a);
            if (getenv("QMM_FUZZ_VERBOSE"))
                fprintf(stderr, "huge: %s S=%lld Skv=%lld D=%lld mode %d: %s\n", info.name, (long long)a.S, (long long)a.Skv,
                        (long long)a.D, m, st == QMM_OK ? "runs" : qmm_last_error());
            if (st == QMM_OK || !strstr(qmm_last_error(), "attention")) {
                fprintf(stderr, "fuzz_attention: %s, mode %d: S=%lld Skv=%lld D=%lld broadcast: %s\n", info.name, m,
                        (long long)a.S, (long long)a.Skv, (long long)a.D, st == QMM_OK ? "ran" : qmm_last_error());
                abort();
            }
        }
    }
    free(kv); free(q); free(out);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static qmm_context *ctx;
    if (!ctx && qmm_context_create(NULL, &ctx) != QMM_OK) return 0;
    rd r = {data, size, 0};
    const uint8_t h0 = next(&r), h1 = next(&r), h2 = next(&r), h3 = next(&r), h4 = next(&r), h5 = next(&r),
                  h6 = next(&r), h7 = next(&r), h8 = next(&r);
    g_nonfinite = h8 & 3;
    if (h8 & 4) return huge(ctx, h3, h6, h8);
    qmm_attention_args a = qmm_attention_args_default();
    a.B = 1 + h0 % 2; a.Hkv = 1 + (h0 >> 1) % 3; a.H = a.Hkv * (1 + (h0 >> 3) % 3);
    a.S = 1 + h1 % 70; a.Skv = 1 + h2 % 140; a.D = h3 & 128 ? 128 : 1 + h3 % 80;
    static const qmm_dtype dt[3] = {QMM_F32, QMM_F16, QMM_BF16};
    a.q_dtype = dt[h4 % 3]; a.kv_dtype = dt[(h4 / 3) % 3]; a.out_dtype = dt[(h4 / 9) % 3];
    const int64_t nq = layout(&r, h5 & 3, a.B, a.H, a.S, a.D, a.q_stride);
    const int64_t nk = layout(&r, (h5 >> 2) & 3, a.B, a.Hkv, a.Skv, a.D, a.k_stride);
    const int64_t nv = layout(&r, (h5 >> 4) & 3, a.B, a.Hkv, a.Skv, a.D, a.v_stride);
    const int64_t no = layout(&r, (h5 >> 6) & 3, a.B, a.H, a.S, a.D, a.out_stride);
    void *q = values(&r, a.q_dtype, nq), *k = values(&r, a.kv_dtype, nk), *v = values(&r, a.kv_dtype, nv);
    const size_t ob = (size_t)no * qmm_dtype_size(a.out_dtype), rb = (size_t)(a.B * a.H * a.S * a.D) * 4;
    void *out = malloc(ob + 1), *ref = malloc(rb + 1);
    void *mask = NULL;
    const int mk = h6 % 4, bc = (h6 >> 2) & 7, ks = 1 + ((h6 >> 5) & 1);
    if (mk) {
        a.mask_dtype = mk == 1 ? QMM_U8 : mk == 2 ? QMM_F32 : QMM_BF16;
        a.mask_stride[3] = ks;
        a.mask_stride[2] = bc & 4 ? 0 : a.Skv * ks;
        a.mask_stride[1] = bc & 2 ? 0 : (bc & 4 ? 1 : a.S) * a.Skv * ks;
        a.mask_stride[0] = bc & 1 ? 0 : (bc & 2 ? 1 : a.H) * (bc & 4 ? 1 : a.S) * a.Skv * ks;
        const int64_t nm = (a.B - 1) * a.mask_stride[0] + (a.H - 1) * a.mask_stride[1] + (a.S - 1) * a.mask_stride[2] +
                           (a.Skv - 1) * ks + 1;
        mask = malloc((size_t)nm * qmm_dtype_size(a.mask_dtype) + 1);
        for (int64_t i = 0; i < nm; i++) {
            const uint8_t c = next(&r);
            if (mk == 1) ((uint8_t *)mask)[i] = c & 1;
            else {
                const float f = c == 0xff ? -INFINITY : g_nonfinite ? value(c) : (float)(int8_t)c / 16.0f;
                if (mk == 2) ((float *)mask)[i] = f;
                else qmm_convert(&f, QMM_F32, (uint16_t *)mask + i, QMM_BF16, 1);
            }
        }
        a.mask = mask;
    }
    /* h6 & 64: key padding (every row masks the keys j % 3 == 1); k, v without shared memory */
    const int pad = (h6 & 64) && mk && ((h5 >> 2) & 3) < 3 && ((h5 >> 4) & 3) < 3;
    if (pad)
        for (int64_t b = 0; b < a.B; b++)
            for (int64_t h = 0; h < a.H; h++)
                for (int64_t s = 0; s < a.S; s++)
                    for (int64_t j = 1; j < a.Skv; j += 3) {
                        const int64_t i = b * a.mask_stride[0] + h * a.mask_stride[1] + s * a.mask_stride[2] + j * ks;
                        const float ninf = -INFINITY;
                        if (mk == 1) ((uint8_t *)mask)[i] = 0;
                        else if (mk == 2) ((float *)mask)[i] = ninf;
                        else qmm_convert(&ninf, QMM_F32, (uint16_t *)mask + i, QMM_BF16, 1);
                    }
    a.mode = (qmm_attn_mode)(h7 % 3);
    a.scale = h7 & 128 ? NAN : (float)((h7 >> 2) & 31) / 16.0f;
    a.q = q; a.k = k; a.v = v;
    /* h6 & 128: huge finite keys, a tiny scale (k × 2^115, the scale × 2^-115: the same scores) */
    const int hugek = (h6 & 128) && a.kv_dtype != QMM_F16;
    if (hugek) {
        for (int64_t i = 0; i < nk; i++) scale_elem(k, a.kv_dtype, i, 0x1p115f);
        a.scale = (a.scale == 0.0f ? 1.0f / sqrtf((float)a.D) : a.scale) * 0x1p-115f;
    }
    /* the reference, dense f32 [B, H, S, D] */
    qmm_attention_args ra = a;
    ra.out = ref; ra.out_dtype = QMM_F32;
    ra.out_stride[2] = a.D; ra.out_stride[1] = a.S * a.D; ra.out_stride[0] = a.H * a.S * a.D;
    ra.engine = QMM_ENGINE_REF;
    const qmm_status rs = qmm_attention(ctx, &ra);
    if (rs != QMM_OK && !strstr(qmm_last_error(), "attention")) {
        fprintf(stderr, "fuzz_attention: a refusal that names nothing: %s\n", qmm_last_error());
        abort();
    }
    if (getenv("QMM_FUZZ_VERBOSE"))
        fprintf(stderr, "B=%lld H=%lld Hkv=%lld S=%lld Skv=%lld D=%lld mode %d mask %d: %s\n", (long long)a.B, (long long)a.H,
                (long long)a.Hkv, (long long)a.S, (long long)a.Skv, (long long)a.D, (int)a.mode, mk,
                rs == QMM_OK ? "runs" : qmm_last_error());
    double vmax = 0;
    for (int64_t i = 0; i < nv; i++) vmax = fmax(vmax, fabs(as_f32(v, a.kv_dtype, i)));
    for (int e = 0; rs == QMM_OK && e < qmm_engine_count(); e++) {
        qmm_engine_info info;
        if (qmm_engine_get_info(e, &info) != QMM_OK || info.kind == QMM_KIND_REF ||
            !qmm_engine_available(info.id, NULL, 0))
            continue;
        a.out = out;
        a.engine = info.id;
        memset(out, 0, ob);
        if (qmm_attention(ctx, &a) != QMM_OK) continue; /* refused: this engine does not offer it */
        if (pad) { /* the padded keys' k and v scaled: not one output bit moves */
            void *first = malloc(ob + 1);
            memcpy(first, out, ob);
            scale_pad_keys(&a, k, a.kv_dtype, a.k_stride, 16.0f);
            scale_pad_keys(&a, v, a.kv_dtype, a.v_stride, 100.0f);
            memset(out, 0, ob);
            const qmm_status st = qmm_attention(ctx, &a);
            scale_pad_keys(&a, k, a.kv_dtype, a.k_stride, 1.0f / 16.0f);
            scale_pad_keys(&a, v, a.kv_dtype, a.v_stride, 1.0f / 100.0f);
            if (st != QMM_OK || memcmp(first, out, ob) != 0) {
                fprintf(stderr, "fuzz_attention: %s, mode %d: keys every row masks moved the output (%s)\n", info.name,
                        (int)a.mode, st == QMM_OK ? "other bits" : qmm_last_error());
                abort();
            }
            memcpy(out, first, ob);
            free(first);
        }
        for (int64_t b = 0; b < a.B; b++)
            for (int64_t h = 0; h < a.H; h++)
                for (int64_t s = 0; s < a.S; s++)
                    for (int64_t d = 0; d < a.D; d++) {
                        const double x = ((const float *)ref)[((b * a.H + h) * a.S + s) * a.D + d];
                        const double y = as_f32(out, a.out_dtype, b * a.out_stride[0] + h * a.out_stride[1] + s * a.out_stride[2] + d);
                        if (g_nonfinite && !(isnan(x) ? isnan(y) : !isfinite(x) || !isfinite(y) ||
                                                                     fabs(y - x) <= 0.2 * vmax + 2e-3 + 1e-2 * fabs(x))) {
                            fprintf(stderr, "fuzz_attention: %s: non-finite input, mode %d: out[%lld][%lld][%lld][%lld] = %g, "
                                            "ref %g\n", info.name, (int)a.mode, (long long)b, (long long)h, (long long)s,
                                    (long long)d, y, x);
                            abort();
                        }
                        if (!g_nonfinite && !(fabs(y - x) <= 0.2 * vmax + 2e-3 + 1e-2 * fabs(x))) {
                            fprintf(stderr, "fuzz_attention: %s: B=%lld H=%lld Hkv=%lld S=%lld Skv=%lld D=%lld mode %d: "
                                            "out[%lld][%lld][%lld][%lld] = %g, ref %g\n", info.name, (long long)a.B,
                                    (long long)a.H, (long long)a.Hkv, (long long)a.S, (long long)a.Skv, (long long)a.D,
                                    (int)a.mode, (long long)b, (long long)h, (long long)s, (long long)d, y, x);
                            abort();
                        }
                    }
    }
    free(q); free(k); free(v); free(out); free(ref); free(mask);
    return 0;
}
