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
 *     communicator still works afterwards.
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
    void *x = malloc((size_t)(M * ldx) * qmm_dtype_size(xt));
    tu_fill_float(x, xt, M * ldx, 1.0f);
    if (tu_rand_int(0, 3) == 0) { /* an outlier channel */
        int64_t c = tu_rand_int(0, kin - 1);
        for (int64_t r = 0; r < M; r++) qmm_store_f(x, xt, r * ldx + c, 30.0f * qmm_load_f(x, xt, r * ldx + c));
    }
    layer L;
    make_layer(&L, kind == QMM_TP_ROW ? "test.row" : "test.col", N, K, gs);
    if (tu_rand_int(0, 3) == 0) { /* a row holding Inf and NaN biases with a payload: NaN as NaN (SPEC §7) */
        qmm_store_f(x, xt, (M - 1) * ldx + tu_rand_int(0, kin - 1), INFINITY);
        if (L.bias)
            for (int64_t n = 0; n < N; n += 2)
                tu_store_bits(L.bias, L.d.bias_dtype, n,
                              L.d.bias_dtype == QMM_F32 ? 0x7fcde000u : L.d.bias_dtype == QMM_F16 ? 0x7e6fu : 0x7fcdu);
    }
    /* one process */
    qmm_weight *wf = NULL;
    TU_CHECK_OK(qmm_weight_create_int8(g_ctx, &L.d, &wf));
    size_t ys = qmm_dtype_size(yt), ybytes = (size_t)(M * N) * ys;
    void *yref = calloc(1, ybytes), *y = calloc(1, ybytes);
    float *sref = calloc((size_t)M, sizeof(float)), *s = calloc((size_t)M, sizeof(float));
    qmm_linear_args a = qmm_linear_args_default();
    a.M = M;
    a.x = x;
    a.x_dtype = xt;
    a.ldx = ldx;
    a.y = yref;
    a.y_dtype = yt;
    a.act = act;
    a.engine = e;
    a.token_scales = sref;
    qmm_status st1 = wf ? qmm_linear(g_ctx, wf, &a) : QMM_ERR_INTERNAL;
    /* AUTO may find no engine for a combination (then the split layer must fail too) */
    TU_CHECK(st1 == QMM_OK || e == QMM_ENGINE_AUTO, "one process %lldx%lldx%lld engine %s: %s", (long long)M,
             (long long)N, (long long)K, qmm_engine_name(e), qmm_last_error());
    if (st1 != QMM_OK && g_rank == 0) tu_note("one process with %s: %s", qmm_engine_name(e), qmm_last_error());
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
        qmm_tp_linear_info info;
        qmm_tp_linear_get_info(T, &info);
        void *xl = x;
        int64_t ldxl = ldx;
        if (kind == QMM_TP_ROW && !(flags & QMM_TP_X_FULL)) { /* the caller hands my slice */
            int64_t kr = info.hi - info.lo, w = act == QMM_ACT_SWIGLU ? 2 * kr : kr;
            size_t xs = qmm_dtype_size(xt);
            xl = malloc((size_t)(M * w) * xs);
            for (int64_t r = 0; r < M; r++) {
                const char *src = (const char *)x + (size_t)(r * ldx) * xs;
                memcpy((char *)xl + (size_t)(r * w) * xs, src + (size_t)info.lo * xs, (size_t)kr * xs);
                if (act == QMM_ACT_SWIGLU)
                    memcpy((char *)xl + (size_t)(r * w + kr) * xs, src + (size_t)(K + info.lo) * xs, (size_t)kr * xs);
            }
            ldxl = w;
        }
        qmm_linear_args b = a;
        b.x = xl;
        b.ldx = ldxl;
        b.y = y;
        b.token_scales = s;
        st = qmm_tp_linear_run(T, g_ctx, &b, flags);
        TU_CHECK((st == QMM_OK) == (st1 == QMM_OK), "rank %d run %s: %s vs one process %s: %s", g_rank,
                 kind == QMM_TP_ROW ? "row" : "column",
                 qmm_status_name(st), qmm_status_name(st1), qmm_last_error());
        if (st == QMM_OK && st1 == QMM_OK) {
            char what[96];
            snprintf(what, sizeof what, "%s-parallel parts=%d gs=%d act=%s x=%s y=%s%s%s",
                     kind == QMM_TP_ROW ? "row" : "column", parts, gs, qmm_act_name(act), qmm_dtype_name(xt),
                     qmm_dtype_name(yt), explicit_split ? " explicit-split" : "",
                     flags & QMM_TP_X_FULL ? " x-full" : "");
            check_same(what, e, M, N, K, y, yref, yt, M * N);
            check_same("token scales", e, M, N, K, s, sref, QMM_F32, M);
        }
        if (xl != x) free(xl);
    }
    qmm_tp_linear_destroy(T);
    qmm_weight_destroy(wf);
    free(x);
    free(y);
    free(yref);
    free(s);
    free(sref);
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

static void test_pair(int attention, qmm_engine_id e) {
    const int R = g_size, parts = attention ? 3 : 2;
    int gs1 = pick_gs(0), gs2 = (int)(tu_rand_int(0, 1) ? 16 : 0);
    int64_t head = attention ? 16 : 1;
    int64_t unit = gs2 > head ? gs2 : head; /* lcm of 16 and 1 or 16 */
    int64_t F = unit * tu_rand_int(R, R + (g_quick ? 2 : 5));
    int64_t K1 = gs1 ? gs1 * tu_rand_int(1, 2) : tu_rand_int(1, 100);
    int64_t N2 = tu_rand_int(1, g_quick ? 30 : 70);
    int64_t M = tu_rand_int(1, g_quick ? 7 : 25);
    qmm_dtype xt = rand_float_dtype(), mt = rand_float_dtype(), yt = rand_float_dtype();
    void *x = malloc((size_t)(M * K1) * qmm_dtype_size(xt));
    tu_fill_float(x, xt, M * K1, 1.0f);
    layer A, B;
    make_layer(&A, attention ? "attn.qkv" : "mlp.fc1", parts * F, K1, gs1);
    make_layer(&B, attention ? "attn.out" : "mlp.fc2", N2, F, gs2);
    /* one process: first → (swiglu | core) → second */
    qmm_weight *wa = NULL, *wb = NULL;
    TU_CHECK_OK(qmm_weight_create_int8(g_ctx, &A.d, &wa));
    TU_CHECK_OK(qmm_weight_create_int8(g_ctx, &B.d, &wb));
    size_t ms = qmm_dtype_size(mt), ys = qmm_dtype_size(yt);
    void *mid = malloc((size_t)(M * parts * F) * ms), *core = malloc((size_t)(M * F) * ms);
    void *yref = calloc(1, (size_t)(M * N2) * ys), *y = calloc(1, (size_t)(M * N2) * ys);
    qmm_status st1 = QMM_ERR_INTERNAL;
    if (wa && wb) {
        qmm_linear_args a = qmm_linear_args_default();
        a.M = M;
        a.x = x;
        a.x_dtype = xt;
        a.y = mid;
        a.y_dtype = mt;
        a.engine = e;
        st1 = qmm_linear(g_ctx, wa, &a);
        if (st1 == QMM_OK && attention) st1 = toy_core(NULL, M, mid, 3 * F, core, F, F, mt);
        qmm_linear_args b = qmm_linear_args_default();
        b.M = M;
        b.x = attention ? core : mid;
        b.x_dtype = mt;
        b.act = attention ? QMM_ACT_NONE : QMM_ACT_SWIGLU;
        b.y = yref;
        b.y_dtype = yt;
        b.engine = e;
        if (st1 == QMM_OK) st1 = qmm_linear(g_ctx, wb, &b);
    }
    TU_CHECK(st1 == QMM_OK, "one process %s engine %s: %s", attention ? "attention" : "mlp", qmm_engine_name(e),
             qmm_last_error());
    qmm_tp_pair_options o;
    memset(&o, 0, sizeof o);
    o.act = attention ? QMM_ACT_NONE : QMM_ACT_SWIGLU;
    o.parts = parts;
    o.unit = head;
    o.core = attention ? toy_core : NULL;
    qmm_tp_pair *P = NULL;
    qmm_status st = qmm_tp_pair_create(g_ctx, g_comm, &A.d, &B.d, &o, &P);
    TU_CHECK(st == QMM_OK, "rank %d pair create: %s", g_rank, qmm_last_error());
    if (st == QMM_OK) {
        st = qmm_tp_pair_run(P, g_ctx, M, x, xt, 0, mt, y, yt, 0, e);
        TU_CHECK(st == QMM_OK, "rank %d pair run %s: %s", g_rank, attention ? "attention" : "mlp", qmm_last_error());
        if (st == QMM_OK && st1 == QMM_OK) {
            char what[96];
            snprintf(what, sizeof what, "%s pair F=%lld gs=%d/%d x=%s mid=%s y=%s", attention ? "attention" : "mlp",
                     (long long)F, gs1, gs2, qmm_dtype_name(xt), qmm_dtype_name(mt), qmm_dtype_name(yt));
            check_same(what, e, M, N2, F, y, yref, yt, M * N2);
        }
    }
    qmm_tp_pair_destroy(P);
    qmm_weight_destroy(wa);
    qmm_weight_destroy(wb);
    free(x);
    free(mid);
    free(core);
    free(y);
    free(yref);
    free_layer(&A);
    free_layer(&B);
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
        snprintf(path, sizeof path, "/tmp/qmm_tp_test_%d_%llu.safetensors", (int)getpid(),
                 (unsigned long long)tu_seed());
        st = write_checkpoint(path, wq, L.scale, N, K);
        TU_CHECK(st == QMM_OK, "writing %s: %s", path, qmm_last_error());
    }
    int32_t ok = st == QMM_OK;
    TU_CHECK_OK(g_comm->broadcast(g_comm, path, sizeof path, 0));
    TU_CHECK_OK(g_comm->broadcast(g_comm, &ok, sizeof ok, 0));
    if (!ok) {
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
            if (g_rank == 0) tu_note("engine %s: column, row, mlp, attention", qmm_engine_name(engines[i]));
            for (int k = 0; k < reps; k++) {
                test_linear(QMM_TP_COLUMN, engines[i]);
                test_linear(QMM_TP_ROW, engines[i]);
            }
            for (int k = 0; k < (g_quick ? 1 : 3); k++) {
                test_pair(0, engines[i]);
                test_pair(1, engines[i]);
            }
        }
        for (int k = 0; k < reps; k++) test_linear(QMM_TP_COLUMN, QMM_ENGINE_AUTO); /* same selection both ways */
        test_checkpoint(QMM_ENGINE_REF);
        test_errors();
        test_fingerprint();
    }
    int rc = tu_finish();
    qmm_context_destroy(g_ctx);
    qmm_comm_destroy(g_comm);
    MPI_Finalize();
    return rc;
}
