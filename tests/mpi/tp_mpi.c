/*
 * tp_mpi.c — the tensor-parallel tester, run under `mpirun -np R` (tests/tp.cmake, through
 * tests/mpi/run_mpi.sh which exports one QMM_SEED to every rank). Every rank builds the same
 * random full weights and inputs from the seed, runs the split layer and the single-process
 * layer with the SAME engine, and checks the bytes are identical:
 *   - the collectives of the MPI qmm_comm;
 *   - column-parallel (1, 2 or 3 parts) and row-parallel layers, random shapes, uneven and
 *     explicit splits, convrot, swiglu/gelu, full or local x, every dtype;
 *   - the MLP pair (fc1 [gate; up] → swiglu → fc2) and the attention pair (qkv → core →
 *     out_proj);
 *   - errors: a misaligned convrot split, a row-parallel K too deep for int32 partial sums, a
 *     mismatched shape or shard on one rank, a different M
 *     on one rank, a local failure on one rank — every rank gets the error, nobody hangs, and the
 *     communicator still works afterwards;
 *   - W4A8 / W6A8 layers (qmm_tp_layer; random bits, s_rel group 4..64, e4m3 or f32 s_rel,
 *     codebook, bias, convrot) against qmm_weight_borrow_w4a8 in one process: column (1-3 parts)
 *     and row-parallel (automatic unit, an explicit coarser unit, explicit uneven splits), every
 *     act and dtype, M in the rows regime and past 64 tokens; the local slice decodes to the full
 *     layer's int8 values and owns its bytes (the full layer is poisoned and freed before the run);
 *     MLP and attention pairs with W4A8 and int8 layers mixed;
 *   - W4A8 errors: explicit splits or units that cut an s_rel group, a convrot group or the 16/32-k
 *     storage step (UNSUPPORTED naming the rank); ranks that disagree on the format (int8 vs W4A8,
 *     4 vs 6 bits, the s_rel group; also in a pair); a NaN s_rel inside one rank's slice only; bad
 *     fields on one or every rank; full_precision; the fingerprint over s_channel, codebook, bias
 *     and sampled codes / s_rel bytes (and no_fingerprint);
 *   - a W4A8 checkpoint (asym_w4a8_int8) through qmm_tp_layer_from_model, column and row, against
 *     qmm_model_create_weight; qmm_tp_desc_from_model and the full_precision layer refused;
 *     per-rank checkpoints whose s_rel differ refused.
 * Engines: the reference (by name) always; each int8 engine that admits the layers; AUTO for
 * column-parallel layers (compared with AUTO in one process). A failure prints M×N×K, engine and
 * the first differing byte.
 */
#include "numerics.h"
#include "qmm_dist.h"
#include "qmm_io.h"
#include "testutil.h"

#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int g_rank, g_size, g_quick;
static qmm_comm *g_comm;
static qmm_context *g_ctx;

static const qmm_dtype k_float[] = {QMM_F32, QMM_F16, QMM_BF16};
static qmm_dtype rand_float_dtype(void) { return k_float[tu_rand_int(0, 2)]; }

/* A random full int8 layer; buffers owned by the caller through free_layer. */
typedef struct layer {
    qmm_weight_desc d;
    int8_t *w;
    float *scale;
    void *bias;
} layer;

static void make_layer(layer *L, const char *name, int64_t N, int64_t K, int gs) {
    memset(L, 0, sizeof *L);
    int64_t ld = K + tu_rand_int(0, 1) * tu_rand_int(1, 9); /* sometimes a wider row stride */
    L->w = malloc((size_t)(N * ld));
    tu_fill_i8(L->w, N * ld, -127, 127);
    int per_channel = (int)tu_rand_int(0, 1);
    L->scale = malloc((size_t)N * sizeof(float));
    for (int64_t n = 0; n < N; n++) L->scale[n] = 0.001f + 0.01f * (float)tu_rand_int(1, 100) / 100.0f;
    qmm_dtype bt = rand_float_dtype();
    if (tu_rand_int(0, 1)) {
        L->bias = malloc((size_t)N * qmm_dtype_size(bt));
        tu_fill_float(L->bias, bt, N, 1.0f);
    }
    L->d = qmm_weight_desc_default();
    L->d.name = name;
    L->d.N = N;
    L->d.K = K;
    L->d.data = L->w;
    L->d.ld = ld;
    L->d.scale = L->scale;
    L->d.n_scale = per_channel ? N : 1;
    L->d.bias = L->bias;
    L->d.bias_dtype = bt;
    L->d.convrot_gs = gs;
}

static void free_layer(layer *L) {
    free(L->w);
    free(L->scale);
    free(L->bias);
}

static int pick_gs(int64_t width_units_max) {
    (void)width_units_max;
    static const int g[] = {0, 0, 16, 64};
    return g[tu_rand_int(0, 3)];
}

/* ---------------------------------------------------------------- collectives */
static void test_comm(void) {
    float f[3] = {(float)g_rank, -(float)g_rank, 1.5f};
    TU_CHECK_OK(g_comm->allreduce_max_f32(g_comm, f, 3));
    TU_CHECK(f[0] == (float)(g_size - 1) && f[1] == 0.0f && f[2] == 1.5f, "allreduce max: %g %g %g", f[0], f[1], f[2]);
    int32_t s[2] = {g_rank + 1, -7};
    TU_CHECK_OK(g_comm->allreduce_sum_i32(g_comm, s, 2));
    TU_CHECK(s[0] == g_size * (g_size + 1) / 2 && s[1] == -7 * g_size, "allreduce sum: %d %d", s[0], s[1]);
    size_t counts[8], displs[8], at = 0;
    for (int r = 0; r < g_size; r++) { counts[r] = (size_t)r + 1; displs[r] = at; at += counts[r]; }
    unsigned char mine[8], all[64];
    memset(mine, 0x10 + g_rank, sizeof mine);
    TU_CHECK_OK(g_comm->allgather(g_comm, mine, all, counts, displs));
    int ok = 1;
    for (int r = 0; r < g_size; r++)
        for (size_t i = 0; i < counts[r]; i++) ok &= all[displs[r] + i] == 0x10 + r;
    TU_CHECK(ok, "allgather with per-rank counts");
    uint64_t v = g_rank == 0 ? 0x1234567890ull : 0;
    TU_CHECK_OK(g_comm->broadcast(g_comm, &v, sizeof v, 0));
    TU_CHECK(v == 0x1234567890ull, "broadcast");
    TU_CHECK_OK(g_comm->barrier(g_comm));
}

/* ---------------------------------------------------------------- one layer, split vs one process */
/* n elements of dtype t: the same bits, NaN matching any NaN (tu_same_elem) */
static void check_same(const char *what, qmm_engine_id e, int64_t M, int64_t N, int64_t K, const void *y,
                       const void *yref, qmm_dtype t, int64_t n) {
    int64_t i = tu_first_diff(y, yref, t, n);
    TU_CHECK(i < 0, "rank %d/%d %s: %lldx%lldx%lld engine %s: split result differs from one process at element %lld",
             g_rank, g_size, what, (long long)M, (long long)N, (long long)K, qmm_engine_name(e), (long long)i);
}

/* the columns [lo, hi) of x [M, ldx] (with swiglu, gate [lo, hi) and up [K + lo, K + hi) side
 * by side): what a caller hands a row-parallel layer as its local x */
static void *row_slice_x(const void *x, qmm_dtype xt, int64_t M, int64_t ldx, int64_t K, int64_t lo, int64_t hi,
                         int swiglu, int64_t *ld_out) {
    const int64_t kr = hi - lo, w = swiglu ? 2 * kr : kr;
    const size_t xs = qmm_dtype_size(xt);
    char *xl = malloc((size_t)(M * w) * xs);
    for (int64_t r = 0; r < M; r++) {
        const char *src = (const char *)x + (size_t)(r * ldx) * xs;
        memcpy(xl + (size_t)(r * w) * xs, src + (size_t)lo * xs, (size_t)kr * xs);
        if (swiglu) memcpy(xl + (size_t)(r * w + kr) * xs, src + (size_t)(K + lo) * xs, (size_t)kr * xs);
    }
    *ld_out = w;
    return xl;
}

/* x [M, ldx] of dtype xt, random, one time in four with an outlier channel among its first kin */
static void *random_x(qmm_dtype xt, int64_t M, int64_t ldx, int64_t kin) {
    void *x = malloc((size_t)(M * ldx) * qmm_dtype_size(xt));
    tu_fill_float(x, xt, M * ldx, 1.0f);
    if (tu_rand_int(0, 3) == 0) { /* an outlier channel */
        int64_t c = tu_rand_int(0, kin - 1);
        for (int64_t r = 0; r < M; r++) qmm_store_f(x, xt, r * ldx + c, 30.0f * qmm_load_f(x, xt, r * ldx + c));
    }
    return x;
}

/* an Inf in the last row of x and NaN biases with a payload (every other one): NaN as NaN (SPEC §7) */
static void nonfinite_row(void *x, qmm_dtype xt, int64_t M, int64_t ldx, int64_t kin, void *bias, qmm_dtype bt,
                          int64_t N) {
    qmm_store_f(x, xt, (M - 1) * ldx + tu_rand_int(0, kin - 1), INFINITY);
    if (bias)
        for (int64_t n = 0; n < N; n += 2)
            tu_store_bits(bias, bt, n, bt == QMM_F32 ? 0x7fcde000u : bt == QMM_F16 ? 0x7e6fu : 0x7fcdu);
}

/* The one-process run of wf on x [M, ldx] (the split run's reference): a gets its args (y =
 * yref [M, N] of yt, token scales sref [M], allocated here), the status returned. AUTO may find
 * no engine for a combination (then the split layer must fail too). */
static qmm_status one_process(const qmm_weight *wf, qmm_linear_args *a, int64_t M, const void *x, qmm_dtype xt,
                              int64_t ldx, qmm_dtype yt, qmm_act act, qmm_engine_id e, int64_t N, int64_t K,
                              const char *what) {
    *a = qmm_linear_args_default();
    a->M = M;
    a->x = x;
    a->x_dtype = xt;
    a->ldx = ldx;
    a->y = calloc(1, (size_t)(M * N) * qmm_dtype_size(yt));
    a->y_dtype = yt;
    a->act = act;
    a->engine = e;
    a->token_scales = calloc((size_t)M, sizeof(float));
    const qmm_status st = wf ? qmm_linear(g_ctx, wf, a) : QMM_ERR_INTERNAL;
    TU_CHECK(st == QMM_OK || e == QMM_ENGINE_AUTO, "one process %s %lldx%lldx%lld engine %s: %s", what, (long long)M,
             (long long)N, (long long)K, qmm_engine_name(e), qmm_last_error());
    if (st != QMM_OK && g_rank == 0) tu_note("one process %s with %s: %s", what, qmm_engine_name(e), qmm_last_error());
    return st;
}

static void free_args(qmm_linear_args *a) {
    free(a->y);
    free(a->token_scales);
}

/* The split run of T against the one-process result: a1 the one-process args (y = yref, token
 * scales sref) and st1 its status; the split run gets x's slice for a row-parallel layer without
 * QMM_TP_X_FULL, writes y and s, and must agree in status, bytes and token scales. */
static void run_compare(qmm_tp_linear *T, const qmm_linear_args *a1, qmm_status st1, unsigned flags, int64_t N,
                        int64_t K, void *y, float *s, const char *what, qmm_engine_id e) {
    qmm_tp_linear_info info;
    qmm_tp_linear_get_info(T, &info);
    qmm_linear_args b = *a1;
    if (info.kind == QMM_TP_ROW && !(flags & QMM_TP_X_FULL)) /* the caller hands my slice */
        b.x = row_slice_x(a1->x, a1->x_dtype, a1->M, a1->ldx, K, info.lo, info.hi, a1->act == QMM_ACT_SWIGLU, &b.ldx);
    b.y = y;
    b.token_scales = s;
    const qmm_status st = qmm_tp_linear_run(T, g_ctx, &b, flags);
    TU_CHECK((st == QMM_OK) == (st1 == QMM_OK), "rank %d run %s: %s vs one process %s: %s", g_rank, what,
             qmm_status_name(st), qmm_status_name(st1), qmm_last_error());
    if (st == QMM_OK && st1 == QMM_OK) {
        check_same(what, e, a1->M, N, K, y, a1->y, a1->y_dtype, a1->M * N);
        check_same("token scales", e, a1->M, N, K, s, a1->token_scales, QMM_F32, a1->M);
    }
    if (b.x != a1->x) free((void *)b.x);
}

static void test_linear(qmm_tp_kind kind, qmm_engine_id e) {
    const int R = g_size;
    int gs = pick_gs(0);
    int parts = kind == QMM_TP_COLUMN ? (int)tu_rand_int(1, 3) : 1;
    qmm_act act = (qmm_act)tu_rand_int(0, 2);
    int64_t M = tu_rand_int(1, g_quick ? 9 : 37);
    int64_t N, K;
    int64_t split[9];
    int explicit_split = 0;
    if (kind == QMM_TP_COLUMN) {
        N = parts * tu_rand_int(R, g_quick ? 40 : 90);
        K = gs ? gs * tu_rand_int(1, 3) : tu_rand_int(1, 150);
    } else {
        int64_t unit = gs ? gs : 1;
        K = unit * tu_rand_int(R, gs ? R + 3 : 150);
        N = tu_rand_int(1, g_quick ? 40 : 90);
        if (tu_rand_int(0, 2) == 0) { /* an explicit uneven split in units */
            int64_t units = K / unit;
            explicit_split = 1;
            split[0] = 0;
            for (int r = 1; r < R; r++) split[r] = split[r - 1] + unit; /* ranks 0..R-2 take one unit */
            split[R] = units * unit;
            (void)units;
        }
    }
    qmm_dtype xt = rand_float_dtype(), yt = rand_float_dtype();
    unsigned flags = kind == QMM_TP_ROW && tu_rand_int(0, 1) ? QMM_TP_X_FULL : 0;
    const int64_t kin = act == QMM_ACT_SWIGLU ? 2 * K : K;
    const int64_t ldx = kin + tu_rand_int(0, 3);
    void *x = random_x(xt, M, ldx, kin);
    layer L;
    make_layer(&L, kind == QMM_TP_ROW ? "test.row" : "test.col", N, K, gs);
    if (tu_rand_int(0, 3) == 0) nonfinite_row(x, xt, M, ldx, kin, L.bias, L.d.bias_dtype, N);
    /* one process */
    qmm_weight *wf = NULL;
    TU_CHECK_OK(qmm_weight_create_int8(g_ctx, &L.d, &wf));
    void *y = calloc(1, (size_t)(M * N) * qmm_dtype_size(yt));
    float *s = calloc((size_t)M, sizeof(float));
    qmm_linear_args a;
    const qmm_status st1 = one_process(wf, &a, M, x, xt, ldx, yt, act, e, N, K, "int8");
    /* split */
    qmm_tp_options o = qmm_tp_options_default();
    o.kind = kind;
    o.parts = parts;
    o.split = explicit_split ? split : NULL;
    qmm_tp_linear *T = NULL;
    qmm_status st = qmm_tp_linear_create(g_ctx, g_comm, &L.d, &o, &T);
    TU_CHECK(st == QMM_OK, "rank %d create %s %lldx%lld gs %d: %s", g_rank, kind == QMM_TP_ROW ? "row" : "column",
             (long long)N, (long long)K, gs, qmm_last_error());
    if (st == QMM_OK) {
        char what[96];
        snprintf(what, sizeof what, "%s-parallel parts=%d gs=%d act=%s x=%s y=%s%s%s",
                 kind == QMM_TP_ROW ? "row" : "column", parts, gs, qmm_act_name(act), qmm_dtype_name(xt),
                 qmm_dtype_name(yt), explicit_split ? " explicit-split" : "", flags & QMM_TP_X_FULL ? " x-full" : "");
        run_compare(T, &a, st1, flags, N, K, y, s, what, e);
    }
    qmm_tp_linear_destroy(T);
    qmm_weight_destroy(wf);
    free(x);
    free(y);
    free(s);
    free_args(&a);
    free_layer(&L);
}

/* ---------------------------------------------------------------- pairs */
/* A column-local stand-in for attention: out[j] = T(q[j] * k[j] + v[j]) (per head, per column). */
static qmm_status toy_core(void *user, int64_t M, const void *in, int64_t ld_in, void *out, int64_t ld_out,
                           int64_t F_r, qmm_dtype t) {
    (void)user;
    for (int64_t r = 0; r < M; r++)
        for (int64_t j = 0; j < F_r; j++) {
            float q = qmm_load_f(in, t, r * ld_in + j), k = qmm_load_f(in, t, r * ld_in + F_r + j),
                  v = qmm_load_f(in, t, r * ld_in + 2 * F_r + j);
            float qk = q * k;
            qmm_store_f(out, t, r * ld_out + j, qk + v);
        }
    return QMM_OK;
}

/* one process: first → (swiglu | core) → second, the intermediate mid [M, parts·F] (and core
 * [M, F]) of dtype mt, into yref */
static qmm_status pair_one_process(const qmm_weight *wa, const qmm_weight *wb, int attention, int64_t M, const void *x,
                                   qmm_dtype xt, int64_t F, qmm_dtype mt, qmm_dtype yt, qmm_engine_id e, void *mid,
                                   void *core, void *yref) {
    qmm_linear_args a = qmm_linear_args_default();
    a.M = M;
    a.x = x;
    a.x_dtype = xt;
    a.y = mid;
    a.y_dtype = mt;
    a.engine = e;
    qmm_status st = qmm_linear(g_ctx, wa, &a);
    if (st == QMM_OK && attention) st = toy_core(NULL, M, mid, 3 * F, core, F, F, mt);
    a.x = attention ? core : mid;
    a.x_dtype = mt;
    a.act = attention ? QMM_ACT_NONE : QMM_ACT_SWIGLU;
    a.y = yref;
    a.y_dtype = yt;
    return st == QMM_OK ? qmm_linear(g_ctx, wb, &a) : st;
}

/* ---------------------------------------------------------------- errors: everyone fails, nobody hangs */
static void expect_all(const char *what, qmm_status st, qmm_status want, const char *must_contain) {
    const char *m = qmm_last_error();
    TU_CHECK(st == want && (!must_contain || strstr(m, must_contain)),
             "rank %d: %s: got %s (want %s): %s", g_rank, what, qmm_status_name(st), qmm_status_name(want), m);
    /* every rank got the same status */
    float f[2] = {(float)st, -(float)st};
    TU_CHECK_OK(g_comm->allreduce_max_f32(g_comm, f, 2));
    TU_CHECK(f[0] == -f[1], "rank %d: %s: ranks returned different statuses", g_rank, what);
    if (g_rank == 0 && st == want) tu_note("%s -> %s%s%s", what, qmm_status_name(st), st ? ": " : "", st ? m : "");
}

static void test_errors(void) {
    const int R = g_size;
    layer L;
    make_layer(&L, "err.row", 8, 32 * R, 16);
    qmm_tp_linear *T = NULL;
    /* 1. misaligned convrot split: K-slices of 40 / 24 columns with g = 16 */
    int64_t split[9];
    for (int r = 0; r <= R; r++) split[r] = 32 * r + (r > 0 && r < R ? 8 : 0);
    qmm_tp_options o = qmm_tp_options_default();
    o.kind = QMM_TP_ROW;
    o.split = split;
    expect_all("misaligned convrot split", qmm_tp_linear_create(g_ctx, g_comm, &L.d, &o, &T), QMM_ERR_UNSUPPORTED,
               "convrot group");
    TU_CHECK(T == NULL, "no handle after a failed create");
    /* 2. a mismatched shape on the last rank */
    o.split = NULL;
    qmm_weight_desc d = L.d;
    if (g_rank == R - 1) d.K = 32 * R - 16;
    expect_all("mismatched K on one rank", qmm_tp_linear_create(g_ctx, g_comm, &d, &o, &T), QMM_ERR_DIST, "rank");
    qmm_tp_linear_destroy(T);
    T = NULL;
    /* 3. a mismatched shard (per-tensor scale on one rank, per-channel on the others) */
    d = L.d;
    d.n_scale = g_rank == R - 1 ? 1 : d.N;
    expect_all("mismatched shard on one rank", qmm_tp_linear_create(g_ctx, g_comm, &d, &o, &T), QMM_ERR_DIST,
               "rank");
    qmm_tp_linear_destroy(T);
    T = NULL;
    /* 4. a local failure on one rank (NULL data) */
    d = L.d;
    if (g_rank == 1) d.data = NULL;
    expect_all("NULL weight on rank 1", qmm_tp_linear_create(g_ctx, g_comm, &d, &o, &T), QMM_ERR_DIST,
               "rank 1");
    qmm_tp_linear_destroy(T);
    T = NULL;
    /* 4b. a K whose full int32 partial sums could overflow: refused on every rank at create, before
     *     any packing (one process would refuse it for every int8 engine and fall back to float) */
    {
        int64_t Kbig = 131072 + 16 * R;
        int8_t *wbig = calloc((size_t)Kbig, 1);
        float sc = 1.0f;
        qmm_weight_desc db = qmm_weight_desc_default();
        db.name = "err.deepk";
        db.N = 1;
        db.K = Kbig;
        db.data = wbig;
        db.scale = &sc;
        db.n_scale = 1;
        expect_all("row-parallel K > int32-safe depth", qmm_tp_linear_create(g_ctx, g_comm, &db, &o, &T),
                   QMM_ERR_UNSUPPORTED, "overflows the int32 partial sums");
        TU_CHECK(T == NULL, "no handle after a refused deep-K create");
        free(wbig);
    }
    /* 4c. shapes beyond qmm_weight_create_int8's limits, refused on every rank before anything is
     *     allocated or read (a column layer of 2 parts once malloc'd rows*K bytes, which wrapped) */
    {
        int8_t wsmall[64];
        float sc = 1.0f;
        memset(wsmall, 1, sizeof wsmall);
        qmm_weight_desc dh = qmm_weight_desc_default();
        dh.name = "err.huge";
        dh.data = wsmall;
        dh.scale = &sc;
        dh.n_scale = 1;
        qmm_tp_options oc = qmm_tp_options_default();
        oc.parts = 2;
        const struct { int64_t N, K, ld; const char *what, *msg; } huge[] = {
            {16, (int64_t)1 << 62, 0, "K = 2^62, 2 parts", "too large"},
            {64, (int64_t)1 << 31, 0, "N*K = 2^37", "2^36"},
            {(int64_t)1 << 32, 2, 0, "N = 2^32", "2^31"},
            {2, 16, INT64_MAX / 2 + 1, "row stride near 2^62", "row stride"},
        };
        for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
            dh.N = huge[i].N * R;
            dh.K = huge[i].K;
            dh.ld = huge[i].ld;
            expect_all(huge[i].what, qmm_tp_linear_create(g_ctx, g_comm, &dh, &oc, &T), QMM_ERR_DIST, huge[i].msg);
            TU_CHECK(T == NULL, "no handle after a refused huge shape (%s)", huge[i].what);
            qmm_tp_linear_destroy(T);
            T = NULL;
        }
    }
    /* 4d. ranks must agree on the values that drive collectives (qmm_comm_agree_i64) */
    {
        static const char *const nm[3] = {"iters", "M", "engine"};
        int64_t v[3] = {3, 8, 1};
        expect_all("agree: same values", qmm_comm_agree_i64(g_comm, "t", 3, nm, v), QMM_OK, NULL);
        v[1] = g_rank == R - 1 ? 9 : 8;
        char want[64];
        snprintf(want, sizeof want, "rank %d: 9", R - 1);
        expect_all("agree: M differs on the last rank", qmm_comm_agree_i64(g_comm, "t", 3, nm, v), QMM_ERR_DIST,
                   "ranks disagree on M");
        TU_CHECK(strstr(qmm_last_error(), want) && strstr(qmm_last_error(), "rank 0: 8"),
                 "agree: the message lists every rank's value: %s", qmm_last_error());
        v[1] = 8;
        expect_all("agree: a different count on rank 0", qmm_comm_agree_i64(g_comm, "t", g_rank ? 3 : 2, nm, v),
                   QMM_ERR_DIST, "values");
        expect_all("agree: invalid n on the last rank",
                   qmm_comm_agree_i64(g_comm, "t", g_rank == R - 1 ? QMM_AGREE_MAX + 1 : 3, nm, v), QMM_ERR_DIST,
                   "invalid arguments");
    }
    /* 5. run-time: a different M on rank 0, then x = NULL on the last rank */
    TU_CHECK_OK(qmm_tp_linear_create(g_ctx, g_comm, &L.d, &o, &T));
    if (T) {
        int64_t M = 5;
        float *x = malloc((size_t)(M * L.d.K) * sizeof(float)), *y = malloc((size_t)(M * L.d.N) * sizeof(float));
        tu_fill_float(x, QMM_F32, M * L.d.K, 1.0f);
        qmm_linear_args a = qmm_linear_args_default();
        a.M = g_rank == 0 ? M - 1 : M;
        a.x = x;
        a.y = y;
        a.engine = QMM_ENGINE_REF;
        expect_all("different M on rank 0", qmm_tp_linear_run(T, g_ctx, &a, QMM_TP_X_FULL), QMM_ERR_DIST, "rank");
        a.M = M;
        a.x = g_rank == R - 1 ? NULL : x;
        expect_all("x NULL on the last rank", qmm_tp_linear_run(T, g_ctx, &a, QMM_TP_X_FULL), QMM_ERR_DIST, "rank");
        a.x = x;
        a.M = (int64_t)1 << 62; /* buffer sizes would overflow: refused on every rank before any exchange */
        expect_all("M = 2^62 row-parallel", qmm_tp_linear_run(T, g_ctx, &a, QMM_TP_X_FULL), QMM_ERR_DIST,
                   "too many");
        a.M = M; /* and the communicator is still in step */
        TU_CHECK_OK(qmm_tp_linear_run(T, g_ctx, &a, QMM_TP_X_FULL));
        free(x);
        free(y);
    }
    qmm_tp_linear_destroy(T);
    free_layer(&L);
}

/* ---------------------------------------------------------------- weights that differ across ranks */
/* Every rank builds the same layer from the seed; then the last rank's copy is changed in one
 * place (a scale, a sampled weight byte, the bias, the whole seed): create must fail on every
 * rank with QMM_ERR_DIST naming the layer, unless every rank turns the fingerprint off. */
static void test_fingerprint(void) {
    const int R = g_size, last = g_rank == R - 1;
    layer L;
    make_layer(&L, "fp.layer", 12 * R, 48, 16);
    if (!L.bias) { /* this test wants a bias to change */
        L.bias = malloc((size_t)L.d.N * qmm_dtype_size(L.d.bias_dtype));
        tu_fill_float(L.bias, L.d.bias_dtype, L.d.N, 1.0f);
        L.d.bias = L.bias;
    }
    const size_t bs = (size_t)L.d.N * qmm_dtype_size(L.d.bias_dtype);
    float *scale2 = malloc((size_t)L.d.N * sizeof(float));
    int8_t *w2 = malloc((size_t)(L.d.N * L.d.ld));
    unsigned char *bias2 = malloc(bs);
    for (int kind = 0; kind < 2; kind++) {
        qmm_tp_options o = qmm_tp_options_default();
        o.kind = kind ? QMM_TP_ROW : QMM_TP_COLUMN;
        qmm_tp_linear *T = NULL;
        TU_CHECK_OK(qmm_tp_linear_create(g_ctx, g_comm, &L.d, &o, &T)); /* the same weight everywhere */
        qmm_tp_linear_destroy(T);
        T = NULL;
        for (int change = 0; change < 3; change++) {
            qmm_weight_desc d = L.d;
            memcpy(scale2, L.scale, (size_t)L.d.N * sizeof(float));
            memcpy(w2, L.w, (size_t)(L.d.N * L.d.ld));
            memcpy(bias2, L.bias, bs);
            d.scale = scale2;
            d.data = w2;
            d.bias = bias2;
            const char *what = change == 0 ? "a different scale on the last rank"
                             : change == 1 ? "a different (sampled) weight byte on the last rank"
                                           : "a different bias on the last rank";
            if (last && change == 0) scale2[d.n_scale - 1] *= 2.0f;
            if (last && change == 1) w2[(d.N - 1) * d.ld + d.K - 1] ^= 0x55; /* the last row's last byte */
            if (last && change == 2) bias2[bs - 1] ^= 0x01;
            expect_all(what, qmm_tp_linear_create(g_ctx, g_comm, &d, &o, &T), QMM_ERR_DIST, "different weight");
            TU_CHECK(T == NULL && strstr(qmm_last_error(), "fp.layer"), "%s: no handle, the layer named: %s", what,
                     qmm_last_error());
            qmm_tp_linear_destroy(T);
            T = NULL;
            o.no_fingerprint = 1; /* turned off on every rank: created (the caller's choice) */
            expect_all("the same change with no_fingerprint", qmm_tp_linear_create(g_ctx, g_comm, &d, &o, &T), QMM_OK,
                       NULL);
            qmm_tp_linear_destroy(T);
            T = NULL;
            o.no_fingerprint = last; /* off on one rank only: refused */
            expect_all("no_fingerprint on one rank", qmm_tp_linear_create(g_ctx, g_comm, &L.d, &o, &T), QMM_ERR_DIST,
                       "fingerprint check");
            qmm_tp_linear_destroy(T);
            T = NULL;
            o.no_fingerprint = 0;
        }
    }
    /* a pair whose ranks were seeded differently: the first layer is already refused */
    {
        layer A, B;
        make_layer(&A, "fp.fc1", 2 * 8 * R, 32, 0);
        make_layer(&B, "fp.fc2", 24, 8 * R, 0);
        if (last) tu_fill_i8(A.w, A.d.N * A.d.ld, -127, 127), A.scale[0] += 1.0f; /* another seed's weights */
        qmm_tp_pair_options po;
        memset(&po, 0, sizeof po);
        po.act = QMM_ACT_SWIGLU;
        po.parts = 2;
        qmm_tp_pair *P = NULL;
        expect_all("pair seeded differently on the last rank", qmm_tp_pair_create(g_ctx, g_comm, &A.d, &B.d, &po, &P),
                   QMM_ERR_DIST, "layer fp.fc1");
        TU_CHECK(P == NULL, "no pair after a fingerprint mismatch");
        qmm_tp_pair_destroy(P);
        free_layer(&A);
        free_layer(&B);
    }
    free(scale2);
    free(w2);
    free(bias2);
    free_layer(&L);
}

/* ---------------------------------------------------------------- from a checkpoint */
/* A ComfyUI INT8 checkpoint with the layers "ck.col" and "ck.row", both wq [N, K] with scales. */
static qmm_status write_checkpoint(const char *path, const int8_t *wq, const float *scale, int64_t N, int64_t K) {
    char cq[128];
    size_t cql = qmm_comfy_quant_json(16, cq, sizeof cq);
    qmm_st_writer *w = NULL;
    const char *names[2] = {"ck.col", "ck.row"};
    qmm_status st = qmm_st_writer_create(path, &w);
    for (int l = 0; l < 2 && st == QMM_OK; l++) {
        char nm[64];
        int64_t sh[2] = {N, K}, shs[1] = {N}, shq[1] = {(int64_t)cql};
        snprintf(nm, sizeof nm, "%s.weight", names[l]);
        st = qmm_st_writer_declare(w, nm, QMM_ST_I8, 2, sh);
        snprintf(nm, sizeof nm, "%s.weight_scale", names[l]);
        if (st == QMM_OK) st = qmm_st_writer_declare(w, nm, QMM_ST_F32, 1, shs);
        snprintf(nm, sizeof nm, "%s.comfy_quant", names[l]);
        if (st == QMM_OK) st = qmm_st_writer_declare(w, nm, QMM_ST_U8, 1, shq);
    }
    if (st == QMM_OK) st = qmm_st_writer_begin(w);
    for (int l = 0; l < 2 && st == QMM_OK; l++) {
        st = qmm_st_writer_write(w, wq, (size_t)(N * K));
        if (st == QMM_OK) st = qmm_st_writer_write(w, scale, (size_t)N * sizeof(float));
        if (st == QMM_OK) st = qmm_st_writer_write(w, cq, cql);
    }
    if (st == QMM_OK) st = qmm_st_writer_finish(w);
    qmm_st_writer_destroy(w);
    return st;
}

/* rank 0's file for a test: /tmp/qmm_tp_<what>_<pid>_<seed>.safetensors into path[256] */
static void shared_path(char *path, const char *what) {
    snprintf(path, 256, "/tmp/qmm_tp_%s_%d_%llu.safetensors", what, (int)getpid(), (unsigned long long)tu_seed());
}

/* Collective: rank 0's path (written with status st) to every rank; whether the file is there */
static int shared_file(char *path, qmm_status st) {
    TU_CHECK(st == QMM_OK || g_rank != 0, "writing %s: %s", path, qmm_last_error());
    int32_t ok = st == QMM_OK;
    TU_CHECK_OK(g_comm->broadcast(g_comm, path, 256, 0));
    TU_CHECK_OK(g_comm->broadcast(g_comm, &ok, sizeof ok, 0));
    return ok;
}

/* Rank 0 writes a ComfyUI INT8 checkpoint with layers "ck.col" and "ck.row"; every rank opens
 * it, builds its slices from the mapped file and must match the single-process layer. */
static void test_checkpoint(qmm_engine_id e) {
    char path[256];
    memset(path, 0, sizeof path);
    const int64_t N = 48, K = 32 * g_size, M = 7;
    layer L;
    make_layer(&L, "ck", N, K, 16);
    int8_t *wq = malloc((size_t)(N * K));
    for (int64_t n = 0; n < N; n++) memcpy(wq + n * K, L.w + n * L.d.ld, (size_t)K);
    qmm_status st = QMM_OK;
    if (g_rank == 0) {
        shared_path(path, "test");
        st = write_checkpoint(path, wq, L.scale, N, K);
    }
    if (!shared_file(path, st)) {
        tu_skip("checkpoint", "rank 0 could not write the file");
    } else {
        qmm_model *m = NULL;
        TU_CHECK_OK(qmm_model_open(path, NULL, &m));
        for (int l = 0; m && l < 2; l++) {
            const char *name = l ? "ck.row" : "ck.col";
            qmm_weight_desc d;
            void *own = NULL;
            qmm_weight *wf = NULL;
            qmm_tp_linear *T = NULL;
            float *x = malloc((size_t)(M * K) * sizeof(float));
            uint16_t *y = calloc((size_t)(M * N), 2), *yref = calloc((size_t)(M * N), 2);
            tu_fill_float(x, QMM_F32, M * K, 1.0f);
            qmm_tp_options o = qmm_tp_options_default();
            o.kind = l ? QMM_TP_ROW : QMM_TP_COLUMN;
            TU_CHECK_OK(qmm_tp_desc_from_model(m, name, &d, &own));
            TU_CHECK_OK(qmm_tp_linear_create(g_ctx, g_comm, &d, &o, &T));
            TU_CHECK_OK(qmm_model_create_weight(m, g_ctx, name, &wf));
            qmm_linear_args a = qmm_linear_args_default();
            a.M = M;
            a.x = x;
            a.y = yref;
            a.y_dtype = QMM_BF16;
            a.engine = e;
            if (wf) TU_CHECK_OK(qmm_linear(g_ctx, wf, &a));
            a.y = y;
            if (T) TU_CHECK_OK(qmm_tp_linear_run(T, g_ctx, &a, QMM_TP_X_FULL));
            check_same(l ? "checkpoint row-parallel" : "checkpoint column-parallel", e, M, N, K, y, yref, QMM_BF16,
                       M * N);
            qmm_tp_linear_destroy(T);
            qmm_weight_destroy(wf);
            qmm_tp_desc_release(own);
            free(x);
            free(y);
            free(yref);
        }
        qmm_model_close(m);
        g_comm->barrier(g_comm);
        if (g_rank == 0) unlink(path);
    }
    /* each rank its own checkpoint of the same shapes, the last rank's quantized differently (its
     * scales halved): every rank's create refuses it, naming the layer */
    {
        char mine[256];
        snprintf(mine, sizeof mine, "/tmp/qmm_tp_fp_%d_%d_%llu.safetensors", (int)getpid(), g_rank,
                 (unsigned long long)tu_seed());
        float *sc = malloc((size_t)N * sizeof(float));
        for (int64_t n = 0; n < N; n++) sc[n] = g_rank == g_size - 1 ? L.scale[n] * 0.5f : L.scale[n];
        qmm_status wst = write_checkpoint(mine, wq, sc, N, K);
        TU_CHECK(wst == QMM_OK, "writing %s: %s", mine, qmm_last_error());
        qmm_model *m = NULL;
        qmm_weight_desc d = qmm_weight_desc_default();
        void *own = NULL;
        qmm_status st2 = wst == QMM_OK ? qmm_model_open(mine, NULL, &m) : wst;
        if (st2 == QMM_OK) st2 = qmm_tp_desc_from_model(m, "ck.col", &d, &own);
        qmm_tp_linear *T = NULL;
        qmm_tp_options o = qmm_tp_options_default();
        if (st2 != QMM_OK) d.data = NULL; /* take part in the create anyway: it fails on every rank */
        expect_all("checkpoints that differ across ranks", qmm_tp_linear_create(g_ctx, g_comm, &d, &o, &T),
                   QMM_ERR_DIST, st2 == QMM_OK ? "layer ck.col: column-parallel create: rank" : NULL);
        if (st2 == QMM_OK && g_size > 1)
            TU_CHECK(strstr(qmm_last_error(), "different weight"), "the checkpoint mismatch is named: %s",
                     qmm_last_error());
        qmm_tp_linear_destroy(T);
        qmm_tp_desc_release(own);
        qmm_model_close(m);
        unlink(mine);
        free(sc);
    }
    free(wq);
    free_layer(&L);
}

/* ---------------------------------------------------------------- W4A8 layers */
/* A random full W4A8 / W6A8 layer (qmm_w4a8_desc, SPEC §11) as qmm_tp_layer; buffers owned by
 * the caller through free_w4. */
typedef struct w4layer {
    qmm_tp_layer l;   /* format QMM_TP_W4A8 */
    uint8_t *codes;   /* [N][K*bits/8] */
    void *s_rel;      /* [N][K/group] e4m3 bytes or floats */
    float *s_channel, *codebook;
    void *bias;
} w4layer;

static int64_t gcd64(int64_t a, int64_t b) { return b ? gcd64(b, a % b) : a; }
static int64_t lcm64(int64_t a, int64_t b) { return a / gcd64(a, b) * b; }

/* What a row-parallel K-slice of a W4A8 layer must be a multiple of (qmm_dist.h): whole s_rel
 * groups, whole convrot groups, whole 16-k (6 bits: 32-k) storage steps. Also the smallest K. */
static int64_t w4_unit(int bits, int gsz, int gs) { return lcm64(lcm64(gs ? gs : 1, gsz), bits == 6 ? 32 : 16); }

/* bits 4 or 6; s_rel group 16/32/64, sometimes 4 or 8 at 4 bits; convrot group 0/16/64 */
static void pick_w4(int *bits, int *gsz, int *gs) {
    static const int g[] = {16, 32, 64};
    *bits = tu_rand_int(0, 1) ? 6 : 4;
    *gsz = g[tu_rand_int(0, 2)];
    if (*bits == 4 && tu_rand_int(0, 3) == 0) *gsz = tu_rand_int(0, 1) ? 4 : 8;
    *gs = pick_gs(0);
}

/* srel_f32, with_cb, with_bias: 1 / 0, or -1 for a random choice (a codebook only at 4 bits) */
static void make_w4(w4layer *W, const char *name, int64_t N, int64_t K, int bits, int gsz, int gs, int srel_f32,
                    int with_cb, int with_bias) {
    memset(W, 0, sizeof *W);
    if (srel_f32 < 0) srel_f32 = tu_rand_int(0, 3) == 0;
    if (with_cb < 0) with_cb = tu_rand_int(0, 2) == 0;
    if (with_bias < 0) with_bias = (int)tu_rand_int(0, 1);
    with_cb = with_cb && bits == 4;
    const int64_t nc = N * K / 8 * bits, ns = N * (K / gsz);
    W->codes = malloc((size_t)nc);
    for (int64_t i = 0; i < nc; i++) W->codes[i] = (uint8_t)tu_rand_int(0, 255);
    W->s_rel = malloc((size_t)ns * (srel_f32 ? sizeof(float) : 1));
    for (int64_t i = 0; i < ns; i++) {
        if (srel_f32) {
            ((float *)W->s_rel)[i] = 0.25f * (float)tu_rand_int(1, 60);
        } else { /* e4m3 1 .. 15: exponent field 7..10, any mantissa (never 0x7f/0xff, NaN); sometimes 0 */
            const int r = (int)tu_rand_int(0, 31);
            ((uint8_t *)W->s_rel)[i] = tu_rand_int(0, 63) ? (uint8_t)(((7 + (r & 3)) << 3) | (r >> 2)) : 0;
        }
    }
    W->s_channel = malloc((size_t)N * sizeof(float));
    for (int64_t n = 0; n < N; n++) W->s_channel[n] = 0.0005f + 0.001f * (float)tu_rand_int(1, 100) / 100.0f;
    if (with_cb) {
        W->codebook = malloc(16 * sizeof(float));
        for (int i = 0; i < 16; i++) W->codebook[i] = 0.5f * (float)tu_rand_int(-16, 14); /* -8 .. 7 in halves */
    }
    qmm_dtype bt = rand_float_dtype();
    if (with_bias) {
        W->bias = malloc((size_t)N * qmm_dtype_size(bt));
        tu_fill_float(W->bias, bt, N, 1.0f);
    }
    memset(&W->l, 0, sizeof W->l);
    W->l.format = QMM_TP_W4A8;
    qmm_w4a8_desc *d = &W->l.w4a8;
    *d = qmm_w4a8_desc_default();
    d->name = name;
    d->N = N;
    d->K = K;
    d->bits = bits;
    d->codes = W->codes;
    d->codes_bytes = nc;
    d->s_rel = W->s_rel;
    d->s_rel_dtype = srel_f32 ? QMM_F32 : QMM_F8_E4M3;
    d->n_s_rel = ns;
    d->group_size = gsz;
    d->codebook = W->codebook;
    d->n_codebook = W->codebook ? 16 : 0;
    d->s_channel = W->s_channel;
    d->bias = W->bias;
    d->bias_dtype = bt;
    d->convrot_gs = gs;
}

static void free_w4(w4layer *W) {
    free(W->codes);
    free(W->s_rel);
    free(W->s_channel);
    free(W->codebook);
    free(W->bias);
    memset(W, 0, sizeof *W);
}

/* the full layer's buffers overwritten (a NaN scale everywhere, zero codes) and freed: a split
 * layer must own its slice (qmm_dist.h: "the caller may free the full layer after create") */
static void poison_free_w4(w4layer *W) {
    const qmm_w4a8_desc *d = &W->l.w4a8;
    memset(W->codes, 0, (size_t)d->codes_bytes);
    memset(W->s_rel, 0x7f, (size_t)d->n_s_rel * (d->s_rel_dtype == QMM_F32 ? sizeof(float) : 1));
    for (int64_t n = 0; n < d->N; n++) W->s_channel[n] = NAN;
    if (W->codebook) memset(W->codebook, 0xff, 16 * sizeof(float));
    free_w4(W);
}

static qmm_tp_layer tp_int8(const layer *L) {
    qmm_tp_layer t;
    memset(&t, 0, sizeof t);
    t.format = QMM_TP_INT8;
    t.int8 = L->d;
    return t;
}

/* A random explicit split of width = units * u over the ranks, in units of u, each rank >= 1 unit */
static void random_split(int64_t *split, int64_t units, int64_t u) {
    const int R = g_size;
    split[0] = 0;
    for (int r = 1; r < R; r++) {
        const int64_t used = split[r - 1] / u;
        split[r] = split[r - 1] + u * tu_rand_int(1, units - used - (R - r));
    }
    split[R] = units * u;
}

/* The local slice's decoded int8 values are the full layer's (rows of its parts, or columns
 * [lo, hi)); wq is the full weight's [N][K] decoded by one process. */
static void check_local_values(const qmm_tp_linear_info *info, const int8_t *wq, int64_t N, int64_t K, int bits,
                               int gsz, const char *what) {
    qmm_weight_info wi;
    qmm_weight_get_info(info->local, &wi);
    const int row = info->kind == QMM_TP_ROW;
    const int64_t nr = info->hi - info->lo, nl = row ? N : info->parts * nr, kl = row ? nr : K;
    const size_t codes = (size_t)(nl * kl / 8 * bits), srel = (size_t)(nl * kl / gsz); /* s_rel >= 1 byte each */
    TU_CHECK(wi.code_bits == bits && wi.group_size == gsz && wi.is_int8 && wi.packed_bytes >= codes + srel &&
                 wi.packed_bytes < codes + 4 * srel + (size_t)nl * 12 + 4096,
             "rank %d %s: the local slice is a W%dA8 weight with group %d holding its share of the codes (got bits "
             "%d, group %d, %zu packed bytes for %zu code bytes)", g_rank, what, bits, gsz, wi.code_bits,
             wi.group_size, wi.packed_bytes, codes);
    TU_CHECK(wi.N == nl && wi.K == kl, "rank %d %s: local shape [%lld, %lld], want [%lld, %lld]", g_rank, what,
             (long long)wi.N, (long long)wi.K, (long long)nl, (long long)kl);
    if (wi.N != nl || wi.K != kl) return;
    int8_t *loc = malloc((size_t)(nl * kl));
    TU_CHECK_OK(qmm_weight_int8_rows(info->local, 0, nl, loc, kl));
    int64_t bad = -1;
    for (int64_t j = 0; j < nl && bad < 0; j++) {
        const int64_t n = row ? j : (j / nr) * (N / info->parts) + info->lo + j % nr;
        const int8_t *src = wq + n * K + (row ? info->lo : 0);
        for (int64_t k = 0; k < kl && bad < 0; k++)
            if (loc[j * kl + k] != src[k]) bad = j * kl + k;
    }
    TU_CHECK(bad < 0, "rank %d %s: local slice [%lld, %lld) decodes differently from the full layer at local row %lld "
             "col %lld", g_rank, what, (long long)info->lo, (long long)info->hi, (long long)(bad < 0 ? 0 : bad / kl),
             (long long)(bad < 0 ? 0 : bad % kl));
    free(loc);
}

static void test_w4a8_linear(qmm_tp_kind kind, qmm_engine_id e) {
    const int R = g_size;
    int bits, gsz, gs;
    pick_w4(&bits, &gsz, &gs);
    const int64_t u = w4_unit(bits, gsz, gs);
    const int parts = kind == QMM_TP_COLUMN ? (int)tu_rand_int(1, 3) : 1;
    const qmm_act act = (qmm_act)tu_rand_int(0, 2);
    /* mostly the rows regime; sometimes past 64 tokens (the int8 engines' panels) */
    const int64_t M = tu_rand_int(0, 4) == 0 ? tu_rand_int(65, 72) : tu_rand_int(1, g_quick ? 9 : 37);
    int64_t N, K, split[9], unit = 0;
    int explicit_split = 0;
    if (kind == QMM_TP_COLUMN) {
        N = parts * tu_rand_int(R, g_quick ? 40 : 90);
        K = u * tu_rand_int(1, 3);
    } else {
        K = u * tu_rand_int(R, R + 3);
        N = tu_rand_int(1, g_quick ? 40 : 90);
        const int64_t units = K / u;
        const int how = (int)tu_rand_int(0, 3);
        if (how == 0) { /* an explicit uneven split in row units */
            explicit_split = 1;
            random_split(split, units, u);
        } else if (how == 1 && units % 2 == 0 && units / 2 >= R) {
            unit = 2 * u; /* a coarser explicit unit */
        }
    }
    const qmm_dtype xt = rand_float_dtype(), yt = rand_float_dtype();
    const unsigned flags = kind == QMM_TP_ROW && tu_rand_int(0, 1) ? QMM_TP_X_FULL : 0;
    const int64_t kin = act == QMM_ACT_SWIGLU ? 2 * K : K, ldx = kin + tu_rand_int(0, 3);
    void *x = random_x(xt, M, ldx, kin);
    w4layer W;
    make_w4(&W, kind == QMM_TP_ROW ? "w4.row" : "w4.col", N, K, bits, gsz, gs, -1, -1, -1);
    const int srel_f32 = W.l.w4a8.s_rel_dtype == QMM_F32, cb = W.codebook != NULL;
    if (tu_rand_int(0, 5) == 0) nonfinite_row(x, xt, M, ldx, kin, W.bias, W.l.w4a8.bias_dtype, N);
    /* one process over the full desc */
    qmm_weight *wf = NULL;
    TU_CHECK_OK(qmm_weight_borrow_w4a8(g_ctx, &W.l.w4a8, &wf));
    int8_t *wq = malloc((size_t)(N * K));
    if (wf) TU_CHECK_OK(qmm_weight_int8_rows(wf, 0, N, wq, K));
    void *y = calloc(1, (size_t)(M * N) * qmm_dtype_size(yt));
    float *s = calloc((size_t)M, sizeof(float));
    qmm_linear_args a;
    const qmm_status st1 = one_process(wf, &a, M, x, xt, ldx, yt, act, e, N, K, bits == 6 ? "W6A8" : "W4A8");
    qmm_weight_destroy(wf);
    /* split */
    qmm_tp_options o = qmm_tp_options_default();
    o.kind = kind;
    o.parts = parts;
    o.unit = unit;
    o.split = explicit_split ? split : NULL;
    qmm_tp_linear *T = NULL;
    char what[160];
    snprintf(what, sizeof what, "W%dA8 %s-parallel parts=%d group=%d gs=%d%s%s act=%s x=%s y=%s%s%s%s", bits,
             kind == QMM_TP_ROW ? "row" : "column", parts, gsz, gs, srel_f32 ? " s_rel=f32" : "", cb ? " codebook" : "",
             qmm_act_name(act), qmm_dtype_name(xt), qmm_dtype_name(yt), explicit_split ? " explicit-split" : "",
             unit ? " unit=2u" : "", flags & QMM_TP_X_FULL ? " x-full" : "");
    qmm_status st = qmm_tp_linear_create_layer(g_ctx, g_comm, &W.l, &o, &T);
    TU_CHECK(st == QMM_OK, "rank %d create %s %lldx%lld: %s", g_rank, what, (long long)N, (long long)K,
             qmm_last_error());
    if (st == QMM_OK) {
        qmm_tp_linear_info info;
        qmm_tp_linear_get_info(T, &info);
        if (kind == QMM_TP_ROW) {
            TU_CHECK(info.lo % u == 0 && info.hi % u == 0 && (!unit || (info.lo % unit == 0 && info.hi % unit == 0)),
                     "rank %d %s: K-slice [%lld, %lld) not in units of %lld", g_rank, what, (long long)info.lo,
                     (long long)info.hi, (long long)(unit ? unit : u));
            if (explicit_split)
                TU_CHECK(info.lo == split[g_rank] && info.hi == split[g_rank + 1], "rank %d %s: slice [%lld, %lld)",
                         g_rank, what, (long long)info.lo, (long long)info.hi);
        }
        check_local_values(&info, wq, N, K, bits, gsz, what);
        if (tu_rand_int(0, 1)) poison_free_w4(&W); /* the split layer owns its slice */
        run_compare(T, &a, st1, flags, N, K, y, s, what, e);
    }
    qmm_tp_linear_destroy(T);
    free(x);
    free(y);
    free(s);
    free_args(&a);
    free(wq);
    free_w4(&W);
}

/* A pair, MLP fc1 → swiglu → fc2 or attention qkv → toy_core → out_proj, compared with one
 * process: int8 layers through qmm_tp_pair_create (w4 = 0), or each layer int8 or W4A8, at least
 * one W4A8, through qmm_tp_pair_create_layers (w4 = 1). */
static void test_pair(int attention, qmm_engine_id e, int w4) {
    const int R = g_size, parts = attention ? 3 : 2;
    const int w1 = w4 && tu_rand_int(0, 3) != 0, w2 = w4 && (!w1 || tu_rand_int(0, 1));
    int b1, g1, c1, b2, g2, c2;
    pick_w4(&b1, &g1, &c1);
    pick_w4(&b2, &g2, &c2);
    const int64_t head = attention ? 16 : 1;
    const int64_t u1 = w1 ? w4_unit(b1, g1, c1) : (c1 ? c1 : 1), u2 = w2 ? w4_unit(b2, g2, c2) : (c2 ? c2 : 1);
    const int64_t fu = lcm64(head, u2); /* the split unit of F */
    const int64_t F = fu * tu_rand_int(R, R + (g_quick ? 1 : 3));
    const int64_t K1 = w1 || c1 ? u1 * tu_rand_int(1, 2) : tu_rand_int(1, 100);
    const int64_t N2 = tu_rand_int(1, g_quick ? 30 : 70);
    const int64_t M = tu_rand_int(0, 5) == 0 ? tu_rand_int(65, 70) : tu_rand_int(1, g_quick ? 7 : 25);
    int64_t split[9];
    const int explicit_split = tu_rand_int(0, 2) == 0;
    if (explicit_split) random_split(split, F / fu, fu);
    qmm_dtype xt = rand_float_dtype(), mt = rand_float_dtype(), yt = rand_float_dtype();
    void *x = malloc((size_t)(M * K1) * qmm_dtype_size(xt));
    tu_fill_float(x, xt, M * K1, 1.0f);
    const char *n1 = attention ? "w4.qkv" : "w4.fc1", *n2 = attention ? "w4.out" : "w4.fc2";
    layer A, B;
    w4layer WA, WB;
    memset(&A, 0, sizeof A);
    memset(&B, 0, sizeof B);
    memset(&WA, 0, sizeof WA);
    memset(&WB, 0, sizeof WB);
    if (w1) make_w4(&WA, n1, parts * F, K1, b1, g1, c1, -1, -1, -1);
    else make_layer(&A, n1, parts * F, K1, c1);
    if (w2) make_w4(&WB, n2, N2, F, b2, g2, c2, -1, -1, -1);
    else make_layer(&B, n2, N2, F, c2);
    const qmm_tp_layer la = w1 ? WA.l : tp_int8(&A), lb = w2 ? WB.l : tp_int8(&B);
    /* one process */
    qmm_weight *wa = NULL, *wb = NULL;
    TU_CHECK_OK(w1 ? qmm_weight_borrow_w4a8(g_ctx, &la.w4a8, &wa) : qmm_weight_create_int8(g_ctx, &la.int8, &wa));
    TU_CHECK_OK(w2 ? qmm_weight_borrow_w4a8(g_ctx, &lb.w4a8, &wb) : qmm_weight_create_int8(g_ctx, &lb.int8, &wb));
    size_t ms = qmm_dtype_size(mt), ys = qmm_dtype_size(yt);
    void *mid = malloc((size_t)(M * parts * F) * ms), *core = malloc((size_t)(M * F) * ms);
    void *yref = calloc(1, (size_t)(M * N2) * ys), *y = calloc(1, (size_t)(M * N2) * ys);
    const qmm_status st1 = wa && wb ? pair_one_process(wa, wb, attention, M, x, xt, F, mt, yt, e, mid, core, yref)
                                    : QMM_ERR_INTERNAL;
    char what[160];
    snprintf(what, sizeof what, "%s pair %s %s F=%lld K1=%lld x=%s mid=%s y=%s%s", attention ? "attention" : "mlp",
             w1 ? (b1 == 6 ? "W6A8" : "W4A8") : "int8", w2 ? (b2 == 6 ? "W6A8" : "W4A8") : "int8", (long long)F,
             (long long)K1, qmm_dtype_name(xt), qmm_dtype_name(mt), qmm_dtype_name(yt),
             explicit_split ? " explicit-split" : "");
    TU_CHECK(st1 == QMM_OK, "one process %s engine %s: %s", what, qmm_engine_name(e), qmm_last_error());
    qmm_tp_pair_options o;
    memset(&o, 0, sizeof o);
    o.act = attention ? QMM_ACT_NONE : QMM_ACT_SWIGLU;
    o.parts = parts;
    o.unit = head;
    o.split = explicit_split ? split : NULL;
    o.core = attention ? toy_core : NULL;
    qmm_tp_pair *P = NULL;
    qmm_status st = w4 ? qmm_tp_pair_create_layers(g_ctx, g_comm, &la, &lb, &o, &P)
                       : qmm_tp_pair_create(g_ctx, g_comm, &la.int8, &lb.int8, &o, &P); /* the int8 entry */
    TU_CHECK(st == QMM_OK, "rank %d create %s: %s", g_rank, what, qmm_last_error());
    if (st == QMM_OK) {
        st = qmm_tp_pair_run(P, g_ctx, M, x, xt, 0, mt, y, yt, 0, e);
        TU_CHECK(st == QMM_OK, "rank %d run %s: %s", g_rank, what, qmm_last_error());
        if (st == QMM_OK && st1 == QMM_OK) check_same(what, e, M, N2, F, y, yref, yt, M * N2);
    }
    qmm_tp_pair_destroy(P);
    qmm_weight_destroy(wa);
    qmm_weight_destroy(wb);
    free(x);
    free(mid);
    free(core);
    free(y);
    free(yref);
    if (w1) free_w4(&WA);
    else free_layer(&A);
    if (w2) free_w4(&WB);
    else free_layer(&B);
}

/* A small row-parallel W4A8 layer run both ways with the reference: the communicator still in step */
static void w4a8_still_works(const char *after) {
    w4layer W;
    const int64_t N = 10, K = 32 * g_size, M = 3;
    make_w4(&W, "w4.after", N, K, 4, 16, 16, -1, -1, -1);
    float *x = malloc((size_t)(M * K) * sizeof(float)), *y = calloc((size_t)(M * N), sizeof(float)),
          *yref = calloc((size_t)(M * N), sizeof(float));
    tu_fill_float(x, QMM_F32, M * K, 1.0f);
    qmm_weight *wf = NULL;
    qmm_tp_linear *T = NULL;
    qmm_tp_options o = qmm_tp_options_default();
    o.kind = QMM_TP_ROW;
    TU_CHECK_OK(qmm_weight_borrow_w4a8(g_ctx, &W.l.w4a8, &wf));
    qmm_status st = qmm_tp_linear_create_layer(g_ctx, g_comm, &W.l, &o, &T);
    TU_CHECK(st == QMM_OK, "rank %d: a W4A8 create after %s: %s", g_rank, after, qmm_last_error());
    qmm_linear_args a = qmm_linear_args_default();
    a.M = M;
    a.x = x;
    a.y = yref;
    a.engine = QMM_ENGINE_REF;
    if (wf) TU_CHECK_OK(qmm_linear(g_ctx, wf, &a));
    a.y = y;
    if (T) {
        st = qmm_tp_linear_run(T, g_ctx, &a, QMM_TP_X_FULL);
        TU_CHECK(st == QMM_OK, "rank %d: a W4A8 run after %s: %s", g_rank, after, qmm_last_error());
        if (st == QMM_OK)
            check_same("W4A8 row-parallel after errors", QMM_ENGINE_REF, M, N, K, y, yref, QMM_F32, M * N);
    }
    qmm_tp_linear_destroy(T);
    qmm_weight_destroy(wf);
    free(x);
    free(y);
    free(yref);
    free_w4(&W);
}

/* every rank creates `l` with o; the same status `want` everywhere, the message holding each
 * of must[] (NULL-terminated), no handle after a failure */
static void expect_create(const char *what, const qmm_tp_layer *l, const qmm_tp_options *o, qmm_status want,
                          const char *const *must) {
    qmm_tp_linear *T = NULL;
    qmm_status st = qmm_tp_linear_create_layer(g_ctx, g_comm, l, o, &T);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", qmm_last_error());
    expect_all(what, st, want, must ? must[0] : NULL);
    for (int i = 1; must && must[i]; i++)
        TU_CHECK(st != want || strstr(msg, must[i]), "rank %d: %s: the message names \"%s\": %s", g_rank, what,
                 must[i], msg);
    TU_CHECK(st == QMM_OK || T == NULL, "rank %d: %s: no handle after a failed create", g_rank, what);
    qmm_tp_linear_destroy(T);
}

static void test_w4a8_errors(void) {
    const int R = g_size, last = g_rank == R - 1;
    char want[96];
    /* 1. explicit row splits that cut a unit: UNSUPPORTED on every rank, naming the rank */
    {
        static const struct { int bits, gsz, gs; int64_t cut; const char *what, *names; } cuts[] = {
            {4, 32, 0, 16, "an explicit split that cuts an s_rel group of 32", "the s_rel group 32"},
            {4, 4, 0, 8, "an explicit split that cuts the 16-k storage step (group 4)", "the 16 k of a W4A8"},
            {6, 16, 0, 16, "an explicit split that cuts the 32-k storage step of 6 bits", "the 32 k of a W6A8"},
            {4, 16, 64, 32, "an explicit split that cuts a convrot group of 64", "the convrot group 64"},
        };
        for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
            const int64_t u = w4_unit(cuts[c].bits, cuts[c].gsz, cuts[c].gs), K = 2 * u * R;
            w4layer W;
            make_w4(&W, "w4.err", 8, K, cuts[c].bits, cuts[c].gsz, cuts[c].gs, -1, -1, -1);
            int64_t split[9];
            for (int r = 0; r <= R; r++) split[r] = 2 * u * r + (r > 0 && r < R ? cuts[c].cut : 0);
            qmm_tp_options o = qmm_tp_options_default();
            o.kind = QMM_TP_ROW;
            o.split = split;
            snprintf(want, sizeof want, "rank 0 K-slice [0, %lld)", (long long)split[1]);
            const char *must[] = {"not a multiple of", want, cuts[c].names, NULL};
            expect_create(cuts[c].what, &W.l, &o, QMM_ERR_UNSUPPORTED, must);
            /* the same through an explicit unit that cuts: half a row unit */
            if (c == 0) {
                W.l.w4a8.K = u * (R + 1); /* units of u/2: 2R+2, so some rank starts at a half unit */
                W.l.w4a8.codes_bytes = W.l.w4a8.N * W.l.w4a8.K / 8 * cuts[c].bits;
                W.l.w4a8.n_s_rel = W.l.w4a8.N * (W.l.w4a8.K / cuts[c].gsz);
                o.split = NULL;
                o.unit = u / 2;
                const char *must2[] = {"not a multiple of", "the s_rel group 32", NULL};
                expect_create("an explicit unit of half an s_rel group", &W.l, &o, QMM_ERR_UNSUPPORTED, must2);
            }
            free_w4(&W);
        }
    }
    /* 2. ranks that disagree on the layer's format (no fingerprint: the agreement record alone) */
    if (R > 1) {
        const int64_t N = 8, K = 64;
        w4layer W, W6, Wg, Wf, Wc;
        layer L;
        make_w4(&W, "w4.fmt", N, K, 4, 16, 16, 0, 0, 0);
        make_w4(&W6, "w4.fmt", N, K, 6, 16, 16, 0, 0, 0);
        make_w4(&Wg, "w4.fmt", N, K, 4, 32, 16, 0, 0, 0);
        make_w4(&Wf, "w4.fmt", N, K, 4, 16, 16, 1, 0, 0);
        make_w4(&Wc, "w4.fmt", N, K, 4, 16, 16, 0, 1, 0);
        make_layer(&L, "w4.fmt", N, K, 16);
        L.d.n_scale = N; /* per channel and no bias, as the W4A8 layer: only the format differs */
        L.d.bias = NULL;
        const qmm_tp_layer li = tp_int8(&L);
        qmm_tp_options o = qmm_tp_options_default();
        o.no_fingerprint = 1;
        for (int kind = 0; kind < 2; kind++) {
            o.kind = kind ? QMM_TP_ROW : QMM_TP_COLUMN;
            const char *m1[] = {"rank", "format", NULL}, *m2[] = {"rank", "group", NULL};
            expect_create(kind ? "int8 on the last rank, W4A8 elsewhere (row)"
                               : "int8 on the last rank, W4A8 elsewhere",
                          last ? &li : &W.l, &o, QMM_ERR_DIST, m1);
            expect_create("W6A8 on the last rank, W4A8 elsewhere", last ? &W6.l : &W.l, &o, QMM_ERR_DIST, m1);
            expect_create("s_rel group 32 on the last rank, 16 elsewhere", last ? &Wg.l : &W.l, &o, QMM_ERR_DIST, m2);
            expect_create("F32 s_rel on the last rank, e4m3 elsewhere", last ? &Wf.l : &W.l, &o, QMM_ERR_DIST, m1);
            expect_create("a codebook on the last rank only", last ? &Wc.l : &W.l, &o, QMM_ERR_DIST, m1);
        }
        /* a pair whose second layer is int8 on the last rank and W4A8 elsewhere */
        {
            layer A;
            make_layer(&A, "w4.pfc1", 2 * K, 32, 0);
            const qmm_tp_layer la = tp_int8(&A);
            qmm_tp_pair_options po;
            memset(&po, 0, sizeof po);
            po.act = QMM_ACT_SWIGLU;
            po.parts = 2;
            po.no_fingerprint = 1;
            /* fc2 [N2 = 8, K = 64]: the W4A8 and int8 layers above have F = K = 64 */
            qmm_tp_pair *P = NULL;
            expect_all("pair: fc2 int8 on the last rank, W4A8 elsewhere",
                       qmm_tp_pair_create_layers(g_ctx, g_comm, &la, last ? &li : &W.l, &po, &P), QMM_ERR_DIST,
                       "format");
            TU_CHECK(P == NULL, "no pair after a format mismatch");
            qmm_tp_pair_destroy(P);
            free_layer(&A);
        }
        free_w4(&W);
        free_w4(&W6);
        free_w4(&Wg);
        free_w4(&Wf);
        free_w4(&Wc);
        free_layer(&L);
    }
    /* 3. a NaN s_rel (0x7f) inside rank 1's row-parallel slice only: rank 1 fails to pack it, every
     *    rank returns QMM_ERR_DIST naming rank 1; 0xff in the last row's first group: column-parallel
     *    the last rank fails, row-parallel rank 0 */
    if (R > 1) {
        const int64_t N = 8, K = 32 * R, G = K / 16;
        w4layer W;
        make_w4(&W, "w4.nan", N, K, 4, 16, 0, 0, -1, -1);
        int64_t split[9];
        for (int r = 0; r <= R; r++) split[r] = 32 * r;
        ((uint8_t *)W.s_rel)[3 * G + (32 + 16) / 16] = 0x7f; /* row 3, group 3: k 48..63, rank 1's [32, 64) */
        qmm_weight *wf = NULL;
        TU_CHECK(qmm_weight_borrow_w4a8(g_ctx, &W.l.w4a8, &wf) == QMM_ERR_INVALID_ARGUMENT,
                 "one process refuses the NaN s_rel too");
        qmm_weight_destroy(wf);
        qmm_tp_options o = qmm_tp_options_default();
        o.kind = QMM_TP_ROW;
        o.split = split;
        const char *m1[] = {"rank 1 of", "s_rel", "NaN", NULL};
        expect_create("a NaN s_rel (0x7f) in rank 1's K-slice", &W.l, &o, QMM_ERR_DIST, m1);
        o.split = NULL;
        o.kind = QMM_TP_COLUMN;
        expect_create("the same layer column-parallel (row 3 is one rank's)", &W.l, &o, QMM_ERR_DIST, m1 + 1);
        ((uint8_t *)W.s_rel)[3 * G + 3] = 0x38; /* 1.0 again */
        ((uint8_t *)W.s_rel)[(N - 1) * G] = 0xff;
        snprintf(want, sizeof want, "rank %d of", R - 1);
        const char *m2[] = {want, "s_rel", NULL}, *m3[] = {"rank 0 of", "s_rel", NULL};
        expect_create("a NaN s_rel (0xff) in the last row, column-parallel", &W.l, &o, QMM_ERR_DIST, m2);
        o.kind = QMM_TP_ROW;
        expect_create("a NaN s_rel (0xff) in the last row's first group, row-parallel", &W.l, &o, QMM_ERR_DIST, m3);
        free_w4(&W);
    }
    /* 4. bad fields: every rank returns an error naming the field (and the rank when only one has it) */
    {
        w4layer W;
        make_w4(&W, "w4.bad", 6 * R, 64, 4, 16, 16, -1, -1, -1);
        qmm_tp_options o = qmm_tp_options_default();
        for (int kind = 0; kind < 2; kind++) {
            o.kind = kind ? QMM_TP_ROW : QMM_TP_COLUMN;
            qmm_tp_layer l = W.l;
            if (last) l.w4a8.codes_bytes -= 1;
            snprintf(want, sizeof want, "rank %d of", R - 1);
            const char *m1[] = {"codes_bytes", want, NULL};
            expect_create("codes_bytes wrong on the last rank", &l, &o, QMM_ERR_DIST, m1);
            l = W.l;
            l.w4a8.codes_bytes *= 2;
            const char *m2[] = {"codes_bytes", "rank 0 of", NULL};
            expect_create("codes_bytes wrong on every rank", &l, &o, QMM_ERR_DIST, m2);
            l = W.l;
            l.w4a8.n_s_rel += 1;
            const char *m3[] = {"s_rel values", NULL};
            expect_create("n_s_rel wrong", &l, &o, QMM_ERR_DIST, m3);
            l = W.l;
            l.w4a8.bits = 5;
            const char *m4[] = {"bits 5", NULL};
            expect_create("bits 5", &l, &o, QMM_ERR_DIST, m4);
            l = W.l;
            l.w4a8.group_size = 12;
            const char *m5[] = {"group_size 12", NULL};
            expect_create("group_size 12", &l, &o, QMM_ERR_DIST, m5);
            l = W.l;
            l.w4a8.s_rel = last ? NULL : l.w4a8.s_rel;
            const char *m6[] = {"s_rel is NULL", want, NULL};
            expect_create("s_rel NULL on the last rank", &l, &o, QMM_ERR_DIST, m6);
            l = W.l;
            l.format = (qmm_tp_format)7;
            const char *m7[] = {"format 7", NULL};
            expect_create("an unknown layer format", &l, &o, QMM_ERR_DIST, m7);
            /* a W4A8 full_precision layer runs on float engines: refused */
            l = W.l;
            l.w4a8.full_precision = 1;
            const char *m8[] = {"full_precision", NULL};
            expect_create("a W4A8 full_precision layer", &l, &o, QMM_ERR_DIST, m8);
        }
        free_w4(&W);
    }
    /* 5. a pair whose explicit split cuts the W4A8 fc2's s_rel group */
    {
        const int64_t F = 64 * R;
        layer A;
        w4layer B;
        make_layer(&A, "w4.cfc1", 2 * F, 32, 0);
        make_w4(&B, "w4.cfc2", 12, F, 4, 64, 0, -1, -1, -1);
        const qmm_tp_layer la = tp_int8(&A);
        int64_t split[9];
        for (int r = 0; r <= R; r++) split[r] = 64 * r + (r > 0 && r < R ? 16 : 0);
        qmm_tp_pair_options po;
        memset(&po, 0, sizeof po);
        po.act = QMM_ACT_SWIGLU;
        po.parts = 2;
        po.split = split;
        qmm_tp_pair *P = NULL;
        expect_all("pair: an explicit split of F that cuts fc2's s_rel group of 64",
                   qmm_tp_pair_create_layers(g_ctx, g_comm, &la, &B.l, &po, &P), QMM_ERR_UNSUPPORTED,
                   "not a multiple of");
        TU_CHECK(P == NULL, "no pair after a refused split");
        qmm_tp_pair_destroy(P);
        free_layer(&A);
        free_w4(&B);
    }
    w4a8_still_works("the W4A8 errors");
}

/* Every rank builds the same W4A8 layer from the seed; the last rank's copy is changed in one
 * sampled place (an s_channel, the codebook, the bias, a code byte, an s_rel byte; the whole
 * seed for a pair): create fails with QMM_ERR_DIST "different weight" on every rank, unless every
 * rank turns the fingerprint off. */
static void test_w4a8_fingerprint(void) {
    const int R = g_size, last = g_rank == R - 1;
    if (R < 2) return; /* nothing can differ */
    /* 100 rows (64 sampled), K = 256: 128 code bytes a row (three spans of 32 sampled), 16 s_rel */
    const int64_t N = 100, K = 256;
    w4layer W;
    make_w4(&W, "w4.fp", N, K, 4, 16, 16, 0, 1, 1);
    const qmm_w4a8_desc *d = &W.l.w4a8;
    const int64_t rb = K / 2, G = K / 16;
    const size_t bs = (size_t)N * qmm_dtype_size(d->bias_dtype);
    uint8_t *codes2 = malloc((size_t)d->codes_bytes), *srel2 = malloc((size_t)d->n_s_rel), *bias2 = malloc(bs);
    float *sch2 = malloc((size_t)N * sizeof(float)), cb2[16];
    static const char *const whats[] = {
        "a different s_channel on the last rank",          "a different codebook entry on the last rank",
        "a different bias on the last rank",               "a different (sampled) last code byte on the last rank",
        "a different (sampled) middle code byte of row 0", "a different (sampled) last s_rel byte on the last rank",
        "a different first s_rel byte on the last rank",
    };
    const int n_changes = (int)(sizeof whats / sizeof whats[0]);
    for (int kind = 0; kind < 2; kind++) {
        qmm_tp_options o = qmm_tp_options_default();
        o.kind = kind ? QMM_TP_ROW : QMM_TP_COLUMN;
        expect_create("the same W4A8 weight everywhere", &W.l, &o, QMM_OK, NULL);
        for (int change = 0; change < n_changes; change++) {
            qmm_tp_layer l = W.l;
            memcpy(codes2, W.codes, (size_t)d->codes_bytes);
            memcpy(srel2, W.s_rel, (size_t)d->n_s_rel);
            memcpy(bias2, W.bias, bs);
            memcpy(sch2, W.s_channel, (size_t)N * sizeof(float));
            memcpy(cb2, W.codebook, sizeof cb2);
            l.w4a8.codes = codes2;
            l.w4a8.s_rel = srel2;
            l.w4a8.bias = bias2;
            l.w4a8.s_channel = sch2;
            l.w4a8.codebook = cb2;
            if (last) {
                switch (change) {
                case 0: sch2[N - 1] *= 2.0f; break;
                case 1: cb2[15] += 0.5f; break;
                case 2: bias2[bs - 1] ^= 0x01; break;
                case 3: codes2[N * rb - 1] ^= 0x55; break;
                case 4: codes2[(rb - 32) / 2] ^= 0x10; break; /* the middle span of row 0 */
                case 5: srel2[N * G - 1] ^= 0x01; break;
                default: srel2[0] ^= 0x01; break;
                }
            }
            const char *must[] = {"different weight", "w4.fp", NULL};
            expect_create(whats[change], &l, &o, QMM_ERR_DIST, must);
            o.no_fingerprint = 1; /* turned off on every rank: created (the caller's choice) */
            expect_create("the same W4A8 change with no_fingerprint", &l, &o, QMM_OK, NULL);
            o.no_fingerprint = 0;
        }
    }
    /* a pair whose last rank was seeded differently: its W4A8 fc1 is refused */
    if (R > 1) {
        w4layer A;
        layer B;
        make_w4(&A, "w4.fpfc1", 2 * 16 * R, 64, 6, 32, 0, -1, -1, -1);
        make_layer(&B, "w4.fpfc2", 24, 16 * R, 0);
        if (last) /* another seed's codes (no random draw here: every rank's generator stays in step) */
            for (int64_t i = 0; i < A.l.w4a8.codes_bytes; i++) A.codes[i] ^= (uint8_t)(i * 37 + 11);
        const qmm_tp_layer lb = tp_int8(&B);
        qmm_tp_pair_options po;
        memset(&po, 0, sizeof po);
        po.act = QMM_ACT_SWIGLU;
        po.parts = 2;
        qmm_tp_pair *P = NULL;
        expect_all("W4A8 pair seeded differently on the last rank",
                   qmm_tp_pair_create_layers(g_ctx, g_comm, &A.l, &lb, &po, &P), QMM_ERR_DIST, "layer w4.fpfc1");
        TU_CHECK(P == NULL && strstr(qmm_last_error(), "different weight"), "no pair after a W4A8 fingerprint "
                 "mismatch: %s", qmm_last_error());
        qmm_tp_pair_destroy(P);
        free_w4(&A);
        free_layer(&B);
    }
    free(codes2);
    free(srel2);
    free(bias2);
    free(sch2);
    free_w4(&W);
}

/* A ComfyUI W4A8 checkpoint (asym_w4a8_int8, SPEC §3): the layers "w4.ck" and "w4.ckfp" (the same
 * tensors, full_precision_matrix_mult) with W's codes, s_rel, s_channel, codebook and bias. */
static qmm_status write_w4_checkpoint(const char *path, const w4layer *W) {
    const qmm_w4a8_desc *d = &W->l.w4a8;
    char cq[2][192], names[2][6][64];
    qmm_st_tensor t[12];
    size_t n = 0;
    for (int l = 0; l < 2; l++) {
        const char *L = l ? "w4.ckfp" : "w4.ck";
        snprintf(cq[l], sizeof cq[l],
                 "{\"format\": \"asym_w4a8_int8\", \"group_size\": %d, \"convrot_groupsize\": %d%s}", d->group_size,
                 d->convrot_gs, l ? ", \"full_precision_matrix_mult\": true" : "");
        const size_t ss = d->s_rel_dtype == QMM_F32 ? 4 : 1;
        const size_t bb = (size_t)d->N * qmm_dtype_size(d->bias_dtype);
        struct {
            const char *suffix;
            qmm_st_dtype dt;
            int ndim;
            int64_t s0, s1;
            const void *data;
            size_t bytes;
        } p[6] = {
            {"weight", QMM_ST_U8, 2, d->N, d->K / 8 * d->bits, d->codes, (size_t)d->codes_bytes},
            {"weight_s_rel", ss == 4 ? QMM_ST_F32 : QMM_ST_F8_E4M3, 2, d->N, d->K / d->group_size, d->s_rel,
             (size_t)d->n_s_rel * ss},
            {"weight_s_channel", QMM_ST_F32, 1, d->N, 0, d->s_channel, (size_t)d->N * 4},
            {"weight_codebook", QMM_ST_F32, 1, 16, 0, d->codebook, 64},
            {"bias", qmm_st_dtype_from_qmm(d->bias_dtype), 1, d->N, 0, d->bias, bb},
            {"comfy_quant", QMM_ST_U8, 1, (int64_t)strlen(cq[l]), 0, cq[l], strlen(cq[l])},
        };
        for (int i = 0; i < 6; i++) {
            if (!p[i].data) continue; /* no codebook / no bias */
            snprintf(names[l][i], sizeof names[l][i], "%s.%s", L, p[i].suffix);
            memset(&t[n], 0, sizeof t[n]);
            t[n].name = names[l][i];
            t[n].dtype = p[i].dt;
            t[n].ndim = p[i].ndim;
            t[n].shape[0] = p[i].s0;
            t[n].shape[1] = p[i].s1;
            t[n].numel = p[i].ndim == 2 ? p[i].s0 * p[i].s1 : p[i].s0;
            t[n].data = p[i].data;
            t[n].nbytes = p[i].bytes;
            n++;
        }
    }
    return qmm_st_save(path, t, n, NULL);
}

/* Rank 0 writes a W4A8 checkpoint; every rank opens it, qmm_tp_layer_from_model gives the layer
 * (codes in the mapping), column- and row-parallel layers match qmm_model_create_weight's weight
 * in one process; qmm_tp_desc_from_model and the full_precision layer are refused; and ranks
 * holding checkpoints with different s_rel are refused at create. */
static void test_w4a8_checkpoint(qmm_engine_id e) {
    const int R = g_size;
    int bits, gsz, gs;
    pick_w4(&bits, &gsz, &gs);
    if (!gs) gs = 16; /* the kitchen always rotates */
    const int64_t u = w4_unit(bits, gsz, gs), N = 40, K = u * R * tu_rand_int(1, 2), M = tu_rand_int(1, 9);
    w4layer W;
    make_w4(&W, "w4.ck", N, K, bits, gsz, gs, -1, -1, -1);
    char path[256];
    memset(path, 0, sizeof path);
    qmm_status st = QMM_OK;
    if (g_rank == 0) {
        shared_path(path, "w4");
        st = write_w4_checkpoint(path, &W);
    }
    if (!shared_file(path, st)) {
        tu_skip("W4A8 checkpoint", "rank 0 could not write the file");
    } else {
        qmm_model *m = NULL;
        TU_CHECK_OK(qmm_model_open(path, NULL, &m));
        qmm_tp_layer l;
        memset(&l, 0, sizeof l);
        void *own = NULL;
        st = m ? qmm_tp_layer_from_model(m, "w4.ck", &l, &own) : QMM_ERR_INTERNAL;
        TU_CHECK(st == QMM_OK && l.format == QMM_TP_W4A8 && l.w4a8.bits == bits && l.w4a8.group_size == gsz &&
                     l.w4a8.convrot_gs == gs && l.w4a8.K == K && (l.w4a8.codebook != NULL) == (W.codebook != NULL),
                 "rank %d: qmm_tp_layer_from_model: %s (format %d bits %d group %d gs %d K %lld)", g_rank,
                 st ? qmm_last_error() : "fields", (int)l.format, l.w4a8.bits, l.w4a8.group_size, l.w4a8.convrot_gs,
                 (long long)l.w4a8.K);
        if (st != QMM_OK) memset(&l, 0, sizeof l); /* take part in the creates anyway: they fail everywhere */
        if (st == QMM_OK) { /* the codes stay in the mapping */
            const qmm_layer_info *li = NULL;
            TU_CHECK_OK(qmm_model_find(m, "w4.ck", &li));
            TU_CHECK(li && li->weight && l.w4a8.codes == li->weight->data, "rank %d: the desc's codes are the file's",
                     g_rank);
        }
        qmm_weight *wf = NULL;
        if (m) TU_CHECK_OK(qmm_model_create_weight(m, g_ctx, "w4.ck", &wf));
        float *x = malloc((size_t)(M * K) * sizeof(float));
        uint16_t *y = calloc((size_t)(M * N), 2), *yref = calloc((size_t)(M * N), 2);
        tu_fill_float(x, QMM_F32, M * K, 1.0f);
        qmm_linear_args a = qmm_linear_args_default();
        a.M = M;
        a.x = x;
        a.y = yref;
        a.y_dtype = QMM_BF16;
        a.engine = e;
        if (wf) TU_CHECK_OK(qmm_linear(g_ctx, wf, &a));
        for (int kind = 0; kind < 2; kind++) {
            qmm_tp_options o = qmm_tp_options_default();
            o.kind = kind ? QMM_TP_ROW : QMM_TP_COLUMN;
            qmm_tp_linear *T = NULL;
            qmm_status cst = qmm_tp_linear_create_layer(g_ctx, g_comm, &l, &o, &T);
            TU_CHECK(cst == QMM_OK, "rank %d: W4A8 checkpoint %s create: %s", g_rank, kind ? "row" : "column",
                     qmm_last_error());
            memset(y, 0, (size_t)(M * N) * 2);
            a.y = y;
            if (T) TU_CHECK_OK(qmm_tp_linear_run(T, g_ctx, &a, QMM_TP_X_FULL));
            if (T && wf)
                check_same(kind ? "W4A8 checkpoint row-parallel" : "W4A8 checkpoint column-parallel", e, M, N, K, y,
                           yref, QMM_BF16, M * N);
            qmm_tp_linear_destroy(T);
        }
        qmm_tp_desc_release(own);
        /* qmm_tp_desc_from_model gives int8 layers only; the full_precision layer is not split */
        if (m) {
            qmm_weight_desc d;
            void *own2 = NULL;
            st = qmm_tp_desc_from_model(m, "w4.ck", &d, &own2);
            TU_CHECK(st == QMM_ERR_UNSUPPORTED && own2 == NULL && strstr(qmm_last_error(), "W4A8"),
                     "qmm_tp_desc_from_model refuses the W4A8 layer: %s: %s", qmm_status_name(st), qmm_last_error());
            qmm_tp_desc_release(own2);
            own2 = NULL;
            st = qmm_tp_layer_from_model(m, "w4.ckfp", &l, &own2);
            TU_CHECK(st == QMM_ERR_UNSUPPORTED && own2 == NULL && strstr(qmm_last_error(), "full_precision"),
                     "qmm_tp_layer_from_model refuses the full_precision W4A8 layer: %s: %s", qmm_status_name(st),
                     qmm_last_error());
            qmm_tp_desc_release(own2);
        }
        qmm_weight_destroy(wf);
        qmm_model_close(m);
        free(x);
        free(y);
        free(yref);
        g_comm->barrier(g_comm);
        if (g_rank == 0) unlink(path);
    }
    /* each rank its own checkpoint, the last rank's s_rel of the last row changed: refused */
    if (R > 1) {
        char mine[256];
        snprintf(mine, sizeof mine, "/tmp/qmm_tp_w4fp_%d_%d_%llu.safetensors", (int)getpid(), g_rank,
                 (unsigned long long)tu_seed());
        const qmm_w4a8_desc *d = &W.l.w4a8;
        if (g_rank == R - 1) {
            if (d->s_rel_dtype == QMM_F32) ((float *)W.s_rel)[d->n_s_rel - 1] *= 2.0f;
            else ((uint8_t *)W.s_rel)[d->n_s_rel - 1] ^= 0x08; /* another exponent, never 0x7f */
        }
        qmm_status wst = write_w4_checkpoint(mine, &W);
        TU_CHECK(wst == QMM_OK, "writing %s: %s", mine, qmm_last_error());
        qmm_model *m = NULL;
        qmm_tp_layer l;
        memset(&l, 0, sizeof l);
        void *own = NULL;
        qmm_status st2 = wst == QMM_OK ? qmm_model_open(mine, NULL, &m) : wst;
        if (st2 == QMM_OK) st2 = qmm_tp_layer_from_model(m, "w4.ck", &l, &own);
        if (st2 != QMM_OK) l.format = QMM_TP_W4A8; /* take part anyway: NULL codes fail on every rank */
        qmm_tp_options o = qmm_tp_options_default();
        o.kind = QMM_TP_ROW;
        qmm_tp_linear *T = NULL;
        expect_all("W4A8 checkpoints that differ across ranks", qmm_tp_linear_create_layer(g_ctx, g_comm, &l, &o, &T),
                   QMM_ERR_DIST, st2 == QMM_OK ? "different weight" : NULL);
        qmm_tp_linear_destroy(T);
        qmm_tp_desc_release(own);
        qmm_model_close(m);
        unlink(mine);
    }
    free_w4(&W);
}

/* ---------------------------------------------------------------- main */
/* Does engine e admit a small int8 layer here? (identical answer on every rank) */
static int engine_runs(qmm_engine_id e, char *why, size_t n) {
    if (e == QMM_ENGINE_REF) return 1;
    if (!qmm_engine_available(e, why, n)) return 0;
    int8_t w[64 * 16];
    memset(w, 1, sizeof w);
    float sc = 1.0f;
    qmm_weight_desc d = qmm_weight_desc_default();
    d.N = 16;
    d.K = 64;
    d.data = w;
    d.scale = &sc;
    d.n_scale = 1;
    qmm_weight *wt = NULL;
    if (qmm_weight_create_int8(g_ctx, &d, &wt) != QMM_OK) return 0;
    qmm_linear_args a = qmm_linear_args_default();
    a.M = 4;
    a.y_dtype = QMM_I32;
    qmm_plan_info p;
    int ok = qmm_plan(g_ctx, wt, &a, &p) == QMM_OK && p.admitted[e];
    if (!ok) snprintf(why, n, "%s", p.reason[e]);
    qmm_weight_destroy(wt);
    return ok;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    tu_init(argc, argv, "tp_mpi");
    g_quick = getenv("QMM_TEST_QUICK") != NULL;
    qmm_context_options co = qmm_context_options_default();
    co.n_threads = 1 + (int)(tu_seed() % 2); /* thread count must not matter */
    if (qmm_comm_create_mpi(NULL, &g_comm) != QMM_OK || qmm_context_create(&co, &g_ctx) != QMM_OK) {
        printf("FAIL: setup: %s\n", qmm_last_error());
        MPI_Finalize();
        return 1;
    }
    g_rank = g_comm->rank;
    g_size = g_comm->size;
    if (g_size > 8) { /* the test's split arrays */
        tu_skip("tp", "more than 8 ranks");
    } else {
        if (g_rank == 0) tu_note("%d ranks, %d threads per rank", g_size, co.n_threads);
        test_comm();
        /* the reference, then every int8 engine of the engine table */
        qmm_engine_id engines[1 + QMM_ENGINE_COUNT] = {QMM_ENGINE_REF};
        const int n_engines = 1 + tu_engines(TU_ENGINES_INT8, engines + 1);
        const int reps = g_quick ? 3 : 8;
        for (int i = 0; i < n_engines; i++) {
            char why[QMM_REASON_MAX] = "";
            if (!engine_runs(engines[i], why, sizeof why)) {
                if (g_rank == 0) tu_skip(qmm_engine_name(engines[i]), why);
                continue;
            }
            if (g_rank == 0)
                tu_note("engine %s: column, row, mlp, attention; W4A8 column, row, pairs, checkpoint",
                        qmm_engine_name(engines[i]));
            for (int k = 0; k < reps; k++) {
                test_linear(QMM_TP_COLUMN, engines[i]);
                test_linear(QMM_TP_ROW, engines[i]);
            }
            for (int k = 0; k < (g_quick ? 1 : 3); k++) {
                test_pair(0, engines[i], 0);
                test_pair(1, engines[i], 0);
            }
            for (int k = 0; k < reps; k++) {
                test_w4a8_linear(QMM_TP_COLUMN, engines[i]);
                test_w4a8_linear(QMM_TP_ROW, engines[i]);
            }
            for (int k = 0; k < (g_quick ? 1 : 3); k++) {
                test_pair(0, engines[i], 1);
                test_pair(1, engines[i], 1);
            }
            test_w4a8_checkpoint(engines[i]);
        }
        for (int k = 0; k < reps; k++) test_linear(QMM_TP_COLUMN, QMM_ENGINE_AUTO); /* same selection both ways */
        for (int k = 0; k < reps; k++) test_w4a8_linear(QMM_TP_COLUMN, QMM_ENGINE_AUTO);
        test_checkpoint(QMM_ENGINE_REF);
        test_errors();
        test_w4a8_errors();
        test_w4a8_fingerprint();
        test_fingerprint(); /* last: it draws random numbers on the last rank only */
    }
    int rc = tu_finish();
    qmm_context_destroy(g_ctx);
    qmm_comm_destroy(g_comm);
    MPI_Finalize();
    return rc;
}
