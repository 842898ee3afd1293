/*
 * test_amx_emulated.c — the AMX engines (amx_int8, amx_bf16) run through the tile emulator:
 * the engine sources compiled a second time with -DQMM_AMX_EMULATE (tests/amx_emu.cmake),
 * every tile instruction replaced by the SDM model of src/engines/x86_amx/amx_emu.c. No
 * machine here has AMX, so this is the only execution evidence for those kernels.
 *
 *   amx_int8 (emulated; its micro-kernel under the core int8 driver) vs the reference engine:
 *     int32 accumulators and float outputs bit-exact; M = 1..100 and 4096, N odd / < 16 / several
 *     N blocks, K ∈ {1, 16, 63, 64, 65, 200, 256, 600, 1001}, every x dtype, input_act, convrot
 *     size, per-tensor/per-row scale, bias, fused or kitchen epilogue, residual, i32 output,
 *     strided x/y (padding untouched), token scales out and in, 1 vs 2 threads identical; the
 *     weight owned (n16k4) or borrowed (packed per call by the driver: ld > K, unaligned base),
 *     each regime run on both. Every call runs in a regime (decode, panel, blocked) chosen at
 *     random with small blocks (several N, M and K blocks, partial last ones) or the defaults,
 *     and the regime that ran is checked; each regime must have run for both engines.
 *   The blocking rules (QMM_AMX_BLOCKING parsing, switch points, min_m admission) and the tile
 *     traffic of each regime (C reloaded only between K chunks), counted by the emulator, owned
 *     and borrowed (K tail included); amx_int8's tile configuration loaded once per thread (the
 *     driver's begin hook) and released once (its end hook); the prefetch of a borrowed
 *     weight's next panel (inside the caller's rows, exactly the rows packed next); the micro-kernel
 *     alone against an int32 triple loop (every mr 1..32, nr 1..2, first and accumulating).
 *   amx_bf16 (emulated, under the float GEMM driver), W8A16 fallback (weight owned or borrowed)
 *     and bf16 weights: bit-exact against the engine's contract (amx_bf16.c: a rounded to bf16,
 *     one fp32 chain over k in order with TDPBF16PS's DAZ/FTZ as the SDM defines it, the float
 *     epilogue; the real engine, where present, is only told apart from it in a note), and within
 *     fp32 summation noise + 1 ulp of the output dtype of an fp64 sum of the same operands;
 *     M = 1..100 and 4096, odd N and K, every x/y dtype and act, bias or not, per-tensor or
 *     per-row scale, strided x/y; small blockings (several k and column blocks) or the defaults.
 *   The traffic audits (tile trace): amx_int8 in its regimes, amx_bf16 (W8A16 owned and borrowed,
 *     bf16 weights): contiguity and pages per tile load, C round trips per k block, even K chunks,
 *     prefetch of first touches, thread balance.
 *   Every call: zero emulated faults (shape/config rules of the SDM) and no tile config left.
 *   Admission rules (small M, f32 weights) and the real engines' visible unavailability.
 *   The finalized descriptors (amx_regime.c): amx_int8's one per regime, named as
 *     qmm_engine_regime names it; amx_bf16's one per block width, kept. Every engine call here
 *     runs as qmm_linear does: finalize, then the driver on that descriptor (run_row).
 * When the real AMX engines are available (an AMX machine), the same checks also run them.
 */
#include "testutil.h"

#include "../src/engines/x86_amx/amx_emu.h"
#include "borrow.h"
#include "float_gemm.h"
#include "int8_gemm.h"
#include "numerics.h"
#include "qmm_internal.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int g_quick;
static qmm_context *g_ctx[2]; /* 1 and 2 threads */
static long g_regime_runs[2][3]; /* [int8, -][regime]: emulated amx_int8 calls per regime */
static long g_bf16_runs[3];      /* emulated amx_bf16 calls: bf16 weight, int8 owned, int8 borrowed */
static long g_borrowed_runs[3];  /* amx_int8 on a borrowed weight (packed per call), per regime */
/* the AMX engines' table rows with the emulated operations (amx_emu.h) in place of the real ones */
static const qmm_engine g_emu_int8 = {QMM_ENGINE_AMX_INT8, "amx_int8", QMM_KIND_INT8, QMM_ISA_AMX, 0, QMM_I8, "TDPBSSD",
                                      0, &qmm_amx_int8_ops_emu};
static const qmm_engine g_emu_bf16 = {QMM_ENGINE_AMX_BF16, "amx_bf16", QMM_KIND_FLOAT, QMM_ISA_AMX, 0, QMM_BF16,
                                      "TDPBF16PS", 0, &qmm_amx_bf16_ops_emu};
static int g_borrow = -1;        /* int8_case: 1 borrowed weight, 0 owned, -1 either at random */

/* Runs call c on engine e's linear row as qmm_linear does: the row's final descriptor for the
 * call (qmm_op_finalize: for amx_int8 its regime, noted in qmm_amx_last_regime_emu), then the
 * driver (qmm_linear_drive). */
static qmm_status run_row(const qmm_engine *e, qmm_context *ctx, const qmm_call *c) {
    return qmm_linear_drive(ctx, e, qmm_op_finalize(&e->ops->op[QMM_OP_LINEAR], c, ctx->n_threads).desc, c);
}

static qmm_call make_call(const qmm_weight *w, const qmm_linear_args *a, int fallback) {
    qmm_call c;
    memset(&c, 0, sizeof c);
    c.w = w;
    c.M = a->M;
    c.N = w->N;
    c.K = w->K;
    c.K_in = a->act == QMM_ACT_SWIGLU ? 2 * w->K : w->K;
    c.x = a->x;
    c.x_dtype = a->x_dtype;
    c.ldx = a->ldx ? a->ldx : c.K_in;
    c.y = a->y;
    c.y_dtype = a->y_dtype;
    c.ldy = a->ldy ? a->ldy : w->N;
    c.act = a->act;
    c.token_scales = a->token_scales;
    c.token_scales_in = a->token_scales_in;
    c.fallback = fallback;
    c.epilogue = a->epilogue;
    c.residual = a->residual;
    c.ldr = a->residual ? (a->ldr ? a->ldr : w->N) : 0;
    c.residual_scale = a->residual_scale;
    return c;
}

/* Picks a regime the rules allow for M (decode needs M <= 32, panel and blocked M >= 2) and a
 * blocking that forces it, with small blocks (several N, M and K blocks, partial last ones) or
 * the library's defaults. Returns the regime. */
static int g_default_blocked; /* != 0: the library's blocking, blocked regime (M >= 2) */

static int force_regime(int64_t M, int64_t a_bytes) {
    qmm_amx_blocking b = qmm_amx_blocking_default();
    if (g_default_blocked && M >= 2) {
        b.panel_a = 0;
        b.small_m = 1;
        qmm_amx_blocking_emu = b;
        return QMM_AMX_BLOCKED;
    }
    int lo = M <= 32 ? QMM_AMX_DECODE : QMM_AMX_PANEL, hi = M >= 2 ? QMM_AMX_BLOCKED : QMM_AMX_DECODE;
    int r = (int)tu_rand_int(lo, hi);
    if (tu_rand_int(0, 2)) { /* small blocks: every loop of the blocked regime turns */
        static const int64_t kcs[] = {64, 128, 192, 512}, ncs[] = {32, 64, 96, 512}, mcs[] = {32, 64, 512};
        b.kc = kcs[tu_rand_int(0, 3)];
        b.nc = ncs[tu_rand_int(0, 3)];
        b.mc = mcs[tu_rand_int(0, 2)];
    }
    if (r == QMM_AMX_DECODE) {
        b.small_m = tu_rand_int(M, 32);
    } else {
        b.small_m = tu_rand_int(1, M - 1 < 32 ? M - 1 : 32);
        b.panel_a = r == QMM_AMX_PANEL ? tu_rand_int(a_bytes, a_bytes + 4096) : tu_rand_int(0, a_bytes - 1);
    }
    qmm_amx_blocking_emu = b;
    return r;
}

/* Runs engine e (an emulated one, or the real one when real != 0 and it is available). The
 * emulated engines run in a regime chosen at random (force_regime), checked after the call. */
static qmm_status run_engine(const qmm_engine *e, int real, qmm_context *ctx, const qmm_weight *w,
                             const qmm_linear_args *a, int fallback) {
    qmm_weight view; /* a borrowed weight runs on its per-call view (qmm_weight_for_call) */
    const qmm_weight *wc = w;
    if (w->borrowed) TU_CHECK_OK(qmm_weight_for_call(ctx, w, &view, &wc));
    qmm_call c = make_call(wc, a, fallback);
    if (real) return run_row(e, ctx, &c); /* on its row, not through dispatch: the small-M rule is admission's */
    const int64_t Kp = w->is_int8 ? w->i8.Kp : w->fp.Kp;
    const int want = force_regime(c.M, c.M * Kp * (e->kind == QMM_KIND_FLOAT ? 2 : 1));
    const qmm_amx_blocking b = qmm_amx_blocking_emu;
    long f0 = qmm_amx_emu_faults();
    qmm_amx_last_regime_emu = -1;
    qmm_status st = run_row(e, ctx, &c);
    TU_CHECK(qmm_amx_emu_faults() == f0, "%s: %ld emulated tile faults: %s", e->name, qmm_amx_emu_faults() - f0,
             qmm_amx_emu_first_fault());
    TU_CHECK(qmm_amx_emu_live_configs() == 0, "%s: %ld threads left with tiles configured", e->name,
             qmm_amx_emu_live_configs());
    TU_CHECK(st != QMM_OK || qmm_amx_last_regime_emu == want,
             "%s M=%lld Kp=%lld small_m=%lld panel_a=%lld: ran regime %d, the rule says %s", e->name, (long long)c.M,
             (long long)Kp, (long long)b.small_m, (long long)b.panel_a, qmm_amx_last_regime_emu,
             qmm_amx_regime_name((qmm_amx_regime)want));
    g_regime_runs[e->kind == QMM_KIND_FLOAT][want]++;
    if (w->borrowed && e->kind == QMM_KIND_INT8) g_borrowed_runs[want]++;
    return st;
}

static const char *act_name(qmm_act a) { return a == QMM_ACT_SWIGLU ? "swiglu" : a == QMM_ACT_GELU_TANH ? "gelu" : "none"; }

static int pick_gs(int64_t K) {
    int opts[4], n = 0;
    opts[n++] = 0;
    if (K % 16 == 0) opts[n++] = 16;
    if (K % 64 == 0) opts[n++] = 64;
    if (K % 256 == 0) opts[n++] = 256;
    return opts[tu_rand_int(0, n - 1)];
}

static const qmm_dtype k_fdt[3] = {QMM_F32, QMM_F16, QMM_BF16};

/* ---------------------------------------------------------------- amx_int8 */
/* ties != 0: token scales 1, weight scales powers of two, no bias — integer-valued outputs
 * with many exact halfway cases, so the round-to-nearest-even of bf16/f16 outputs is tested.
 * Half the cases borrow the weight (qmm_weight_borrow_int8: the caller's rows at an unaligned
 * base, row stride ld >= K; the driver packs them per call), the others own a packed copy; the
 * epilogue is fused or kitchen, with a residual or not (float outputs). */
static void int8_case(const qmm_engine *e, int real, int64_t M, int64_t N, int64_t K, int ties) {
    const qmm_dtype xt = k_fdt[tu_rand_int(0, 2)];
    const qmm_dtype yt = ties ? k_fdt[tu_rand_int(1, 2)] : tu_rand_int(0, 3) == 3 ? QMM_I32 : k_fdt[tu_rand_int(0, 2)];
    const qmm_act act = (qmm_act)tu_rand_int(0, 2);
    const int gs = pick_gs(K), per_tensor = (int)tu_rand_int(0, 1), has_bias = !ties && tu_rand_int(0, 1);
    const int strided = (int)tu_rand_int(0, 1), scales_in = ties || tu_rand_int(0, 5) == 0;
    const int64_t K_in = act == QMM_ACT_SWIGLU ? 2 * K : K;
    const int64_t ldx = K_in + (strided ? tu_rand_int(1, 9) : 0), ldy = N + (strided ? tu_rand_int(1, 7) : 0);
    const size_t xs = qmm_dtype_size(xt), ys = qmm_dtype_size(yt);

    const int borrowed = g_borrow >= 0 ? g_borrow : (int)tu_rand_int(0, 1), kitchen = (int)tu_rand_int(0, 1);
    const int residual = yt != QMM_I32 && tu_rand_int(0, 2) == 0;
    const int64_t ld = K + (borrowed && tu_rand_int(0, 1) ? tu_rand_int(1, 70) : 0), woff = borrowed ? tu_rand_int(0, 63) : 0;
    int8_t *wbuf = malloc((size_t)(N * ld + woff)), *wq = wbuf + woff;
    float *sc = malloc((size_t)N * sizeof(float));
    float *bias = malloc((size_t)N * sizeof(float));
    tu_fill_i8(wbuf, N * ld + woff, tu_rand_int(0, 3) == 0 ? -128 : -127, 127);
    for (int64_t n = 0; n < N; n++)
        sc[n] = ties ? ldexpf(1.0f, (int)tu_rand_int(-2, 0)) : 1e-3f * (1.0f + (float)tu_rand_int(0, 1000) / 100.0f);
    for (int64_t n = 0; n < N; n++) bias[n] = tu_rand_normal();
    qmm_weight_desc d = qmm_weight_desc_default();
    d.name = "amx.test";
    d.N = N;
    d.K = K;
    d.data = wq;
    d.ld = ld;
    d.scale = sc;
    d.n_scale = per_tensor ? 1 : N;
    d.bias = has_bias ? bias : NULL;
    d.bias_dtype = QMM_F32;
    d.convrot_gs = gs;
    qmm_weight *w = NULL, *wown = NULL; /* wown: the reference runs on an owned copy */
    TU_CHECK_OK(qmm_weight_create_int8(g_ctx[0], &d, &wown));
    if (borrowed) TU_CHECK_OK(qmm_weight_borrow_int8(g_ctx[0], &d, &w));
    else w = wown;
    void *x = malloc((size_t)(M * ldx) * xs);
    tu_fill_float(x, xt, M * ldx, 2.0f);
    if (M > 2 && tu_rand_int(0, 3) == 0) qmm_store_f(x, xt, ldx + tu_rand_int(0, K_in - 1), 300.0f); /* outlier */
    if (!ties && !scales_in && M > 3 && tu_rand_int(0, 5) == 0) /* a NaN row: all-NaN output, same bits */
        qmm_store_f(x, xt, 2 * ldx + tu_rand_int(0, K_in - 1), NAN);
    const size_t ybytes = (size_t)(M * ldy) * ys;
    unsigned char *yref = malloc(ybytes), *y[2];
    float *sref = malloc((size_t)M * sizeof(float)), *s[2], *sin = malloc((size_t)M * sizeof(float));
    for (int64_t r = 0; r < M; r++) sin[r] = ties ? 1.0f : 0.01f + 0.001f * (float)r;
    memset(yref, 0xA5, ybytes);
    qmm_linear_args a = qmm_linear_args_default();
    a.M = M; a.x = x; a.x_dtype = xt; a.ldx = ldx; a.y_dtype = yt; a.ldy = ldy; a.act = act;
    a.token_scales_in = scales_in ? sin : NULL;
    a.epilogue = kitchen ? QMM_EPILOGUE_KITCHEN : QMM_EPILOGUE_FUSED;
    const int64_t ldr = N + (strided ? tu_rand_int(0, 5) : 0);
    void *res = NULL, *rscale = NULL;
    if (residual) {
        res = malloc((size_t)(M * ldr) * ys);
        rscale = malloc((size_t)N * ys);
        tu_fill_float(res, yt, M * ldr, 1.0f);
        tu_fill_float(rscale, yt, N, 1.0f);
        a.residual = res; a.ldr = ldr; a.residual_scale = rscale;
    }
    a.y = yref; a.token_scales = sref; a.engine = QMM_ENGINE_REF;
    TU_CHECK_OK(qmm_linear(g_ctx[0], wown, &a));
    a.engine = QMM_ENGINE_AUTO;
    for (int t = 0; t < 2; t++) {
        y[t] = malloc(ybytes);
        s[t] = malloc((size_t)M * sizeof(float));
        memset(y[t], 0xA5, ybytes);
        a.y = y[t];
        a.token_scales = s[t];
        qmm_status st = run_engine(e, real, g_ctx[t], w, &a, 0);
        TU_CHECK(st == QMM_OK, "%s M=%lld N=%lld K=%lld: %s %s", e->name, (long long)M, (long long)N, (long long)K,
                 qmm_status_name(st), qmm_last_error());
        int64_t bad = -1;
        for (int64_t i = 0; i < M * ldy && bad < 0; i++)
            if (!tu_same_elem(yref, y[t], yt, i)) bad = i; /* bits, NaN as NaN (SPEC §7) */
        TU_CHECK(bad < 0,
                 "%s %d thr M×N×K=%lld×%lld×%lld %s ld=%lld base%%64=%d x=%s y=%s act=%s gs=%d %s bias=%d %s "
                 "residual=%d ldx=%lld ldy=%lld: first bad index %lld (row %lld col %lld): %g vs ref %g",
                 e->name, t + 1, (long long)M, (long long)N, (long long)K, borrowed ? "borrowed" : "owned",
                 (long long)ld, (int)((uintptr_t)wq % 64), qmm_dtype_name(xt), qmm_dtype_name(yt), act_name(act), gs,
                 per_tensor ? "per-tensor" : "per-row", has_bias, kitchen ? "kitchen" : "fused", residual,
                 (long long)ldx, (long long)ldy,
                 (long long)bad, (long long)(bad / ldy), (long long)(bad % ldy),
                 bad >= 0 ? tu_load(y[t], yt, bad) : 0.0, bad >= 0 ? tu_load(yref, yt, bad) : 0.0);
        TU_CHECK(tu_first_diff(sref, s[t], QMM_F32, M) < 0, "%s %d thr M×N×K=%lld×%lld×%lld: token scales differ",
                 e->name, t + 1, (long long)M, (long long)N, (long long)K);
    }
    TU_CHECK(memcmp(y[0], y[1], ybytes) == 0, "%s M×N×K=%lld×%lld×%lld: 1 and 2 threads differ", e->name,
             (long long)M, (long long)N, (long long)K);
    for (int t = 0; t < 2; t++) { free(y[t]); free(s[t]); }
    free(yref); free(sref); free(sin); free(x); free(wbuf); free(sc); free(bias); free(res); free(rscale);
    if (w != wown) qmm_weight_destroy(w);
    qmm_weight_destroy(wown);
}

/* ---------------------------------------------------------------- amx_bf16 */
/* Runs amx_bf16 (emulated, or the real one when real != 0) on the call; the emulated engine
 * with small blocks (QMM_AMX_BLOCKING's kc and nc: several k blocks and column blocks, partial
 * last ones) or the defaults, with zero tile faults and no tile configuration left. */
static qmm_status run_bf16(const qmm_engine *e, int real, qmm_context *ctx, const qmm_weight *w,
                           const qmm_linear_args *a) {
    qmm_weight view; /* a borrowed weight runs on its per-call view (qmm_weight_for_call) */
    const qmm_weight *wc = w;
    if (w->borrowed) TU_CHECK_OK(qmm_weight_for_call(ctx, w, &view, &wc));
    qmm_call c = make_call(wc, a, w->is_int8);
    if (real) return run_row(e, ctx, &c);
    qmm_amx_blocking b = qmm_amx_blocking_default();
    if (tu_rand_int(0, 2)) {
        static const int64_t kcs[] = {64, 128, 192, 512}, ncs[] = {32, 64, 96, 512};
        b.kc = kcs[tu_rand_int(0, 3)];
        b.nc = ncs[tu_rand_int(0, 3)];
    }
    qmm_amx_blocking_emu = b;
    const long f0 = qmm_amx_emu_faults(), c0 = qmm_amx_emu_configs(), r0 = qmm_amx_emu_releases();
    const qmm_status st = run_row(e, ctx, &c);
    TU_CHECK(qmm_amx_emu_faults() == f0, "%s: %ld emulated tile faults: %s", e->name, qmm_amx_emu_faults() - f0,
             qmm_amx_emu_first_fault());
    /* one LDTILECFG and one TILERELEASE per thread and pool run (one run per M chunk of <= 384 rows) */
    const long cfgs = qmm_amx_emu_configs() - c0, rels = qmm_amx_emu_releases() - r0;
    TU_CHECK(st != QMM_OK || (cfgs == rels && cfgs >= 1 && (a->M > 384 || cfgs <= ctx->n_threads)),
             "%s M=%lld: %ld LDTILECFG, %ld TILERELEASE with %d threads", e->name, (long long)a->M, cfgs, rels,
             ctx->n_threads);
    TU_CHECK(qmm_amx_emu_live_configs() == 0, "%s: %ld threads left with tiles configured", e->name,
             qmm_amx_emu_live_configs());
    qmm_amx_blocking_emu = qmm_amx_blocking_default();
    g_bf16_runs[w->is_int8 ? 1 + w->borrowed : 0]++;
    return st;
}

/* bf16 → fp32 as TDPBF16PS reads it: denormals are zero (DAZ) */
static float bf16_daz(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
    memcpy(&v, &u, 4);
    return v;
}

/* W8A16 (int8 weight, owned or borrowed: the caller's rows at an unaligned base, ld >= K) or a
 * bf16 float weight. Expected bits: amx_bf16's contract (amx_bf16.c) — a = bf16(act-rotate(x)),
 * acc = FTZ(acc + DAZ(a)·DAZ(w)) in k order over K rounded up to 32, then the float epilogue
 * (qmm_float_epilogue_ref: · w_scale, + bias, one RNE cast); also within fp32 summation noise
 * of an fp64 sum of the same operands. 1 and 2 threads give the same bits. */
static void bf16_case(const qmm_engine *e, int real, int64_t M, int64_t N, int64_t K, int int8_weight) {
    const qmm_dtype xt = k_fdt[tu_rand_int(0, 2)], yt = k_fdt[tu_rand_int(0, 2)];
    const qmm_act act = (qmm_act)tu_rand_int(0, 2);
    const int gs = int8_weight ? pick_gs(K) : 0, has_bias = (int)tu_rand_int(0, 1);
    const int per_tensor = (int)tu_rand_int(0, 1), strided = (int)tu_rand_int(0, 1);
    const int borrowed = int8_weight && tu_rand_int(0, 1);
    const int64_t K_in = act == QMM_ACT_SWIGLU ? 2 * K : K;
    const int64_t ldx = K_in + (strided ? tu_rand_int(1, 9) : 0), ldy = N + (strided ? tu_rand_int(1, 7) : 0);
    const int64_t ld = K + (borrowed && tu_rand_int(0, 1) ? tu_rand_int(1, 70) : 0), woff = borrowed ? tu_rand_int(0, 63) : 0;
    const size_t xs = qmm_dtype_size(xt), ys = qmm_dtype_size(yt);
    int8_t *wbuf = malloc((size_t)(N * ld + woff)), *wq = wbuf + woff;
    uint16_t *wb = malloc((size_t)(N * K) * 2);
    float *sc = malloc((size_t)N * sizeof(float)), *bias = malloc((size_t)N * sizeof(float));
    tu_fill_i8(wbuf, N * ld + woff, -128, 127);
    tu_fill_float(wb, QMM_BF16, N * K, 0.5f);
    if (!int8_weight && tu_rand_int(0, 3) == 0) wb[tu_rand_int(0, N * K - 1)] = 0x0005; /* a denormal weight */
    for (int64_t n = 0; n < N; n++) sc[n] = 1e-2f * (1.0f + (float)tu_rand_int(0, 100) / 10.0f);
    for (int64_t n = 0; n < N; n++) bias[n] = tu_rand_normal();
    qmm_weight *w = NULL, *wown = NULL; /* wown: the expected values' scales and bias */
    if (int8_weight) {
        qmm_weight_desc d = qmm_weight_desc_default();
        d.name = "amx.bf16.w8";
        d.N = N; d.K = K; d.data = wq; d.ld = ld; d.scale = sc; d.n_scale = per_tensor ? 1 : N;
        d.bias = has_bias ? bias : NULL; d.convrot_gs = gs;
        TU_CHECK_OK(qmm_weight_create_int8(g_ctx[0], &d, &wown));
        if (borrowed) TU_CHECK_OK(qmm_weight_borrow_int8(g_ctx[0], &d, &w));
        else w = wown;
    } else {
        TU_CHECK_OK(qmm_weight_create_float(g_ctx[0], "amx.bf16.wf", wb, QMM_BF16, N, K, 0, has_bias ? bias : NULL,
                                            QMM_F32, &wown));
        w = wown;
    }
    void *x = malloc((size_t)(M * ldx) * xs);
    tu_fill_float(x, xt, M * ldx, 1.0f);
    if (xt == QMM_F32 && M > 1 && tu_rand_int(0, 2) == 0) /* bf16 denormals in a: read as zero */
        for (int64_t k = 0; k < K_in; k += 3) qmm_store_f(x, xt, ldx + k, 3e-39f * (float)(k % 5 - 2));
    const size_t ybytes = (size_t)(M * ldy) * ys;
    unsigned char *y[2], *yexp = malloc(ybytes);
    qmm_linear_args a = qmm_linear_args_default();
    a.M = M; a.x = x; a.x_dtype = xt; a.ldx = ldx; a.y_dtype = yt; a.ldy = ldy; a.act = act;
    for (int t = 0; t < 2; t++) {
        y[t] = malloc(ybytes);
        memset(y[t], 0xA5, ybytes);
        a.y = y[t];
        qmm_status st = run_bf16(e, real, g_ctx[t], w, &a);
        TU_CHECK(st == QMM_OK, "%s M=%lld N=%lld K=%lld: %s %s", e->name, (long long)M, (long long)N, (long long)K,
                 qmm_status_name(st), qmm_last_error());
    }
    TU_CHECK(memcmp(y[0], y[1], ybytes) == 0, "%s M×N×K=%lld×%lld×%lld: 1 and 2 threads differ", e->name,
             (long long)M, (long long)N, (long long)K);
    /* the expected bits: the chain, then the scalar float epilogue into yexp */
    const int64_t Ka = (K + 31) / 32 * 32;
    float *arow = malloc((size_t)Ka * sizeof(float)), *acc = malloc((size_t)(M * N) * sizeof(float));
    double worst = 0.0;
    int64_t bad = -1;
    double badv = 0, bade = 0;
    for (int64_t r = 0; r < M; r++) {
        qmm_ref_act_rotate_row((const char *)x + (size_t)(r * ldx) * xs, xt, K, act, gs, arow);
        for (int64_t k = 0; k < Ka; k++) arow[k] = k < K ? qmm_round_to(arow[k], QMM_BF16) : 0.0f;
        for (int64_t n = 0; n < N; n++) {
            float c = 0.0f;
            double sum = 0, sabs = 0;
            for (int64_t k = 0; k < Ka; k++) {
                const float wv = k >= K ? 0.0f : int8_weight ? (float)wq[n * ld + k] : qmm_bf16_to_f32(wb[n * K + k]);
                c = bf16_daz(fmaf(bf16_daz(arow[k]), bf16_daz(wv), c)); /* FTZ of the sum: the same test */
                sum += (double)bf16_daz(arow[k]) * bf16_daz(wv);
                sabs += fabs((double)arow[k] * wv);
            }
            acc[r * N + n] = c;
            if (bad >= 0) continue;
            /* and the contract against the exact sum: fp32 summation noise + 1 ulp of the output */
            double ws = int8_weight ? (double)sc[per_tensor ? 0 : n] : 1.0, b = has_bias ? (double)bias[n] : 0.0;
            double ref = sum * ws + b;
            double got = tu_load(y[0], yt, r * ldy + n);
            double tol = (double)(K + 2) * ldexp(1.0, -24) * sabs * ws + ldexp(1.0, -22) * (fabs(ref) + fabs(b)) +
                         tu_ulp(fabs(ref) + (double)(K + 2) * ldexp(1.0, -24) * sabs * ws, yt) +
                         (double)(Ka + 2) * ldexp(1.0, -125) * ws; /* FTZ of the partial sums */
            double err = fabs(got - ref);
            if (!(err <= tol)) { bad = r * ldy + n; badv = got; bade = ref; }
            if (fabs(ref) > 1e-3 && err / fabs(ref) > worst) worst = err / fabs(ref);
        }
    }
    TU_CHECK(bad < 0, "%s M×N×K=%lld×%lld×%lld %s x=%s y=%s act=%s gs=%d: first bad index %lld: %.9g vs fp64 %.9g",
             e->name, (long long)M, (long long)N, (long long)K, int8_weight ? "W8A16" : "bf16 weight",
             qmm_dtype_name(xt), qmm_dtype_name(yt), act_name(act), gs, (long long)bad, badv, bade);
    memcpy(yexp, y[0], ybytes); /* the padding of strided outputs as the engine left it (checked below) */
    a.y = yexp;
    qmm_call ce = make_call(wown, &a, int8_weight);
    qmm_float_epilogue_ref(&ce, acc, N, M, 0, 0, N);
    int64_t diff = -1;
    for (int64_t i = 0; i < M * ldy && diff < 0; i++)
        if (!tu_same_elem(yexp, y[0], yt, i)) diff = i;
    /* the emulator follows the SDM's definition of TDPBF16PS; the hardware's own rounding of the
     * pair sums is not documented beyond it, so there only the tolerance above is required and
     * a difference from the chain is reported */
    if (real && diff >= 0) {
        tu_note("%s (real) M×N×K=%lld×%lld×%lld: not bit-equal to the SDM chain from index %lld (%.9g vs %.9g)",
                e->name, (long long)M, (long long)N, (long long)K, (long long)diff, tu_load(y[0], yt, diff),
                tu_load(yexp, yt, diff));
        diff = -1;
    }
    TU_CHECK(diff < 0,
             "%s M×N×K=%lld×%lld×%lld %s%s x=%s y=%s act=%s gs=%d %s bias=%d: first index not bit-exact %lld "
             "(row %lld col %lld): %.9g, the contract's chain %.9g",
             e->name, (long long)M, (long long)N, (long long)K, int8_weight ? "W8A16" : "bf16 weight",
             borrowed ? " borrowed" : "", qmm_dtype_name(xt), qmm_dtype_name(yt), act_name(act), gs,
             per_tensor ? "per-tensor" : "per-row", has_bias, (long long)diff, (long long)(diff / ldy),
             (long long)(diff % ldy), diff >= 0 ? tu_load(y[0], yt, diff) : 0.0, diff >= 0 ? tu_load(yexp, yt, diff) : 0.0);
    /* the padding of strided outputs is untouched */
    int pad_ok = 1;
    for (int64_t r = 0; r < M; r++)
        for (int64_t i = r * ldy + N; i < (r + 1) * ldy; i++)
            for (size_t b = 0; b < ys; b++) pad_ok &= y[0][i * ys + b] == 0xA5;
    TU_CHECK(pad_ok, "%s M×N×K=%lld×%lld×%lld: wrote into the padding of y", e->name, (long long)M, (long long)N,
             (long long)K);
    if (M >= 1000) tu_note("%s %s M×N×K=%lld×%lld×%lld y=%s: worst relative error %.3g", e->name,
                           int8_weight ? "W8A16" : "bf16", (long long)M, (long long)N, (long long)K,
                           qmm_dtype_name(yt), worst);
    free(arow); free(acc); free(yexp);
    for (int t = 0; t < 2; t++) free(y[t]);
    free(x); free(wbuf); free(wb); free(sc); free(bias);
    if (w != wown) qmm_weight_destroy(w);
    qmm_weight_destroy(wown);
}

/* ---------------------------------------------------------------- admission and availability */
static void admission(void) {
    int8_t wq[64 * 64];
    float sc = 0.01f;
    memset(wq, 3, sizeof wq);
    qmm_weight_desc d = qmm_weight_desc_default();
    d.N = 64; d.K = 64; d.data = wq; d.scale = &sc; d.n_scale = 1;
    qmm_weight *w = NULL, *wf = NULL, *wb = NULL;
    TU_CHECK_OK(qmm_weight_create_int8(g_ctx[0], &d, &w));
    float f[64 * 64];
    uint16_t b[64 * 64];
    for (int i = 0; i < 64 * 64; i++) { f[i] = 0.5f; b[i] = qmm_f32_to_bf16(0.5f); }
    TU_CHECK_OK(qmm_weight_create_float(g_ctx[0], "f32w", f, QMM_F32, 64, 64, 0, NULL, QMM_F32, &wf));
    TU_CHECK_OK(qmm_weight_create_float(g_ctx[0], "bf16w", b, QMM_BF16, 64, 64, 0, NULL, QMM_F32, &wb));
    if (!w || !wf || !wb) return;
    char why[QMM_REASON_MAX];
    qmm_linear_args a = qmm_linear_args_default();
    a.x_dtype = QMM_BF16; a.y_dtype = QMM_BF16;
    const qmm_engine *ei = &g_emu_int8, *eb = &g_emu_bf16;
    for (int64_t M = 1; M <= 20; M++) {
        a.M = M;
        qmm_call c = make_call(w, &a, 0);
        const char *r = ei->ops->op[QMM_OP_LINEAR].admit(&c, why, sizeof why);
        if (M < qmm_amx_int8_min_m_emu)
            TU_CHECK(r && strstr(r, "avx512_vnni is faster"), "amx_int8 M=%lld: expected the small-M refusal, got %s",
                     (long long)M, r ? r : "admitted");
        else
            TU_CHECK(!r, "amx_int8 M=%lld: refused: %s", (long long)M, r);
    }
    tu_note("amx_int8 small-M crossover: refuses M < %d", qmm_amx_int8_min_m_emu);
    /* the small-M rule for borrowed weights (amx_blocking.h QMM_AMX_INT8_BORROWED_MIN_M): below
     * it amx_int8 refuses a borrowed weight (dispatch: avx512_vnni), the owned twin is admitted */
    {
        qmm_weight *wbr = NULL;
        TU_CHECK_OK(qmm_weight_borrow_int8(g_ctx[0], &d, &wbr));
        qmm_weight view;
        const qmm_weight *wv = wbr;
        if (wbr) TU_CHECK_OK(qmm_weight_for_call(g_ctx[0], wbr, &view, &wv));
        const int64_t bm = qmm_amx_blocking_default().borrowed_min_m;
        TU_CHECK(bm == 17, "borrowed_min_m default %lld, the measurement says 17 (avx512_vnni faster at M <= 16)",
                 (long long)bm);
        for (int64_t M = 1; wbr && M <= 64; M++) {
            a.M = M;
            qmm_call cb = make_call(wv, &a, 0), co = make_call(w, &a, 0);
            const char *rb = ei->ops->op[QMM_OP_LINEAR].admit(&cb, why, sizeof why);
            const int refused = rb != NULL;
            const char *ro = ei->ops->op[QMM_OP_LINEAR].admit(&co, why, sizeof why);
            TU_CHECK(refused == (M < bm) && (M < bm ? (M < qmm_amx_int8_min_m_emu || strstr(rb, "borrowed")) : 1),
                     "amx_int8 borrowed M=%lld: %s (rule: refused below %lld)", (long long)M, refused ? rb : "admitted",
                     (long long)bm);
            TU_CHECK((ro != NULL) == (M < qmm_amx_int8_min_m_emu), "amx_int8 owned M=%lld: %s", (long long)M,
                     ro ? ro : "admitted");
        }
        qmm_amx_blocking bb = qmm_amx_blocking_default();
        TU_CHECK(qmm_amx_blocking_parse("borrowed_min_m=1", &bb) == 0 && bb.borrowed_min_m == 1,
                 "QMM_AMX_BLOCKING borrowed_min_m not parsed");
        tu_note("amx_int8 borrowed weights: refused at M < %lld (avx512_vnni's rows kernel)", (long long)bm);
        qmm_weight_destroy(wbr);
    }
    a.M = 64;
    qmm_call c = make_call(wf, &a, 0);
    const char *r = ei->ops->op[QMM_OP_LINEAR].admit(&c, why, sizeof why);
    TU_CHECK(r != NULL, "amx_int8 admitted a float weight");
    r = eb->ops->op[QMM_OP_LINEAR].admit(&c, why, sizeof why);
    TU_CHECK(r && strstr(r, "f32 weight"), "amx_bf16 on an f32 weight: expected a refusal, got %s", r ? r : "admitted");
    c = make_call(wb, &a, 0);
    r = eb->ops->op[QMM_OP_LINEAR].admit(&c, why, sizeof why);
    TU_CHECK(!r, "amx_bf16 refused a bf16 weight: %s", r);
    c = make_call(w, &a, 1);
    r = eb->ops->op[QMM_OP_LINEAR].admit(&c, why, sizeof why);
    TU_CHECK(!r, "amx_bf16 refused the W8A16 fallback: %s", r);
    a.y_dtype = QMM_I32;
    c = make_call(w, &a, 1);
    r = eb->ops->op[QMM_OP_LINEAR].admit(&c, why, sizeof why);
    TU_CHECK(r != NULL, "amx_bf16 admitted an i32 output");
    /* the real engines: unavailable without AMX, visibly */
    for (int id = QMM_ENGINE_AMX_INT8; id <= QMM_ENGINE_AMX_BF16; id += QMM_ENGINE_AMX_BF16 - QMM_ENGINE_AMX_INT8) {
        int avail = qmm_engine_available((qmm_engine_id)id, why, sizeof why);
        if (!(qmm_cpu_features() & QMM_CPU_AMX_TILE)) {
            TU_CHECK(!avail && strstr(why, "no AMX"), "%s: expected 'no AMX', got %s", qmm_engine_name((qmm_engine_id)id),
                     avail ? "available" : why);
            tu_note("real %s unavailable here: %s", qmm_engine_name((qmm_engine_id)id), why);
        }
    }
    qmm_weight_destroy(w);
    qmm_weight_destroy(wf);
    qmm_weight_destroy(wb);
}

/* The blocking rules of amx_blocking.h: parsing QMM_AMX_BLOCKING, the regime switch points,
 * and the small-M admission following min_m. */
static void blocking_rules(void) {
    qmm_amx_blocking b = qmm_amx_blocking_default(), d = b;
    TU_CHECK(b.kc == 512 && b.nc == 512 && b.mc == 512 && b.small_m == 32 && b.min_m == QMM_AMX_INT8_MIN_M,
             "defaults changed without the notes: kc %lld nc %lld mc %lld small_m %lld", (long long)b.kc,
             (long long)b.nc, (long long)b.mc, (long long)b.small_m);
    TU_CHECK(qmm_amx_blocking_parse("kc=1024,nc=256,mc=128,small_m=16,panel_a=100,min_m=1", &b) == 0 && b.kc == 1024 &&
                 b.nc == 256 && b.mc == 128 && b.small_m == 16 && b.panel_a == 100 && b.min_m == 1,
             "QMM_AMX_BLOCKING: a valid string not applied");
    static const char *bad[] = {"kc=100", "nc=48", "mc=0", "small_m=33", "min_m=0", "kc", "kc=64,", "foo=1", "kc=64x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        qmm_amx_blocking t = d;
        TU_CHECK(qmm_amx_blocking_parse(bad[i], &t) == -1 && !memcmp(&t, &d, sizeof t),
                 "QMM_AMX_BLOCKING='%s': accepted or changed the blocking", bad[i]);
    }
    TU_CHECK(qmm_amx_blocking_parse("", &d) == 0 && qmm_amx_blocking_parse(NULL, &d) == 0, "empty QMM_AMX_BLOCKING refused");
    /* the switch points on the SPEC §8 shapes (int8 A bytes = M × Kp) */
    TU_CHECK(qmm_amx_regime_of(&d, 1, 5376) == QMM_AMX_DECODE && qmm_amx_regime_of(&d, 32, 32 * 14336) == QMM_AMX_DECODE,
             "M <= 32 must be decode");
    TU_CHECK(qmm_amx_regime_of(&d, 256, 256 * 5376) == QMM_AMX_PANEL, "256 × 5376 must be panel");
    TU_CHECK(qmm_amx_regime_of(&d, 256, 256 * 14336) == QMM_AMX_BLOCKED && qmm_amx_regime_of(&d, 4096, 4096 * 5376) ==
             QMM_AMX_BLOCKED, "256 × 14336 and 4096 × 5376 must be blocked");
    /* admission follows min_m */
    int8_t wq[64 * 64];
    float sc = 0.01f;
    memset(wq, 3, sizeof wq);
    qmm_weight_desc wd = qmm_weight_desc_default();
    wd.N = 64; wd.K = 64; wd.data = wq; wd.scale = &sc; wd.n_scale = 1;
    qmm_weight *w = NULL;
    TU_CHECK_OK(qmm_weight_create_int8(g_ctx[0], &wd, &w));
    if (!w) return;
    qmm_linear_args a = qmm_linear_args_default();
    a.x_dtype = QMM_BF16; a.y_dtype = QMM_BF16;
    char why[QMM_REASON_MAX];
    qmm_amx_blocking_emu = qmm_amx_blocking_default();
    qmm_amx_blocking_emu.min_m = 3;
    for (a.M = 1; a.M <= 4; a.M++) {
        qmm_call c = make_call(w, &a, 0);
        const char *r = qmm_amx_int8_ops_emu.op[QMM_OP_LINEAR].admit(&c, why, sizeof why);
        TU_CHECK((a.M < 3) == (r != NULL), "min_m=3, M=%lld: %s", (long long)a.M, r ? r : "admitted");
    }
    qmm_amx_blocking_emu = qmm_amx_blocking_default();
    qmm_weight_destroy(w);
}

/* The tile traffic of each regime, counted by the emulator (loads + dot products) on a shape
 * with whole tiles: M=64, N=64, K=640 (2 × 2 blocks of 32 × 32, 10 k-steps of 64). Every
 * regime does 4 loads of A/B and 4 TDPBSSD per k-step; only the blocked one reloads C: 4
 * tiles per block per K chunk after the first (kc=128: 5 chunks) — the C partials stay in
 * tiles within a chunk and are never loaded for the first. The same counts for a borrowed
 * weight (its panels packed per call), also with K = 600 (9 whole k-steps and the tail: the
 * packed panel and q are zero past K, still one step). Every call: one LDTILECFG and one
 * TILERELEASE on each thread that ran tasks (the driver's begin/end hooks; all row tiles
 * here are 32 rows, so no tile reconfigures) — 1 with one thread, 1..2 with two. */
static void op_counts_k(int borrowed, int64_t K);

/* A plain call's arguments on new buffers: x [M][K] bf16 (random), y [M][N] bf16. */
static qmm_linear_args bf16_args(int64_t M, int64_t N, int64_t K, uint16_t **x, uint16_t **y) {
    *x = malloc((size_t)(M * K) * 2);
    *y = malloc((size_t)(M * N) * 2);
    tu_fill_float(*x, QMM_BF16, M * K, 1.0f);
    qmm_linear_args a = qmm_linear_args_default();
    a.M = M; a.x = *x; a.x_dtype = QMM_BF16; a.y = *y; a.y_dtype = QMM_BF16;
    return a;
}
static void op_counts(void) {
    op_counts_k(0, 640);
    op_counts_k(1, 640);
    op_counts_k(1, 600);
}

static void op_counts_k(int borrowed, int64_t K) {
    const int64_t M = 64, N = 64;
    int8_t *wq = malloc((size_t)(N * K));
    float sc = 0.01f;
    tu_fill_i8(wq, N * K, -127, 127);
    qmm_weight_desc d = qmm_weight_desc_default();
    d.N = N; d.K = K; d.data = wq; d.scale = &sc; d.n_scale = 1;
    qmm_weight *w = NULL;
    if (borrowed) TU_CHECK_OK(qmm_weight_borrow_int8(g_ctx[0], &d, &w));
    else TU_CHECK_OK(qmm_weight_create_int8(g_ctx[0], &d, &w));
    uint16_t *x, *y;
    const qmm_linear_args a = bf16_args(M, N, K, &x, &y);
    qmm_weight view;
    const qmm_weight *wc = w;
    if (w && borrowed) TU_CHECK_OK(qmm_weight_for_call(g_ctx[0], w, &view, &wc));
    qmm_call c = make_call(wc, &a, 0);
    static const struct { int64_t small_m, panel_a, kc; int regime; long ops; } cases[] = {
        {32, 1 << 20, 128, QMM_AMX_PANEL, 4 * 10 * 4 + 4 * 10 * 4},
        {32, 0, 128, QMM_AMX_BLOCKED, 4 * 10 * 4 + 4 * 10 * 4 + 4 * 4 * 4},
        {32, 0, 640, QMM_AMX_BLOCKED, 4 * 10 * 4 + 4 * 10 * 4},
        {32, 0, 256, QMM_AMX_BLOCKED, 4 * 10 * 4 + 4 * 10 * 4 + 4 * 4 * 2},
    };
    for (size_t i = 0; w && i < 2 * sizeof cases / sizeof cases[0]; i++) {
        const size_t ic = i % (sizeof cases / sizeof cases[0]);
        const int nt = i < sizeof cases / sizeof cases[0] ? 1 : 2;
        qmm_amx_blocking_emu = qmm_amx_blocking_default();
        qmm_amx_blocking_emu.small_m = cases[ic].small_m;
        qmm_amx_blocking_emu.panel_a = cases[ic].panel_a;
        qmm_amx_blocking_emu.kc = cases[ic].kc;
        qmm_amx_blocking_emu.nc = nt == 2 ? 32 : qmm_amx_blocking_emu.nc; /* two N tasks: both threads */
        const long o0 = qmm_amx_emu_ops(), c0 = qmm_amx_emu_configs(), r0 = qmm_amx_emu_releases();
        TU_CHECK_OK(run_row(&g_emu_int8, g_ctx[nt - 1], &c));
        const long ops = qmm_amx_emu_ops() - o0, cfgs = qmm_amx_emu_configs() - c0, rels = qmm_amx_emu_releases() - r0;
        TU_CHECK(qmm_amx_last_regime_emu == cases[ic].regime && ops == cases[ic].ops,
                 "amx_int8 %s 64×64×%lld %s kc=%lld %d thr: %ld tile loads + dot products, want %ld",
                 borrowed ? "borrowed" : "owned", (long long)K, qmm_amx_regime_name((qmm_amx_regime)cases[ic].regime),
                 (long long)cases[ic].kc, nt, ops, cases[ic].ops);
        TU_CHECK(cfgs == nt && rels == nt,
                 "amx_int8 %s 64×64×%lld %d thr: %ld LDTILECFG and %ld TILERELEASE, want one each per thread",
                 borrowed ? "borrowed" : "owned", (long long)K, nt, cfgs, rels);
    }
    qmm_amx_blocking_emu = qmm_amx_blocking_default();
    qmm_weight_destroy(w);
    free(wq); free(x); free(y);
}

/* The software prefetch of a borrowed weight's next panel (the driver's qmm_i8_tile.rows_pf,
 * issued by amx_int8.c's kloop): M=64 (2 row tiles), N=96 (one task of 3 panels), K=600 (10
 * k-steps, the last partial), 1 thread. Whole K (panel): the row tiles of panels 0 and 1
 * prefetch panels 1 and 2 — every line of rows 32..95, none of rows 0..31. K chunks of 128 bytes: within a chunk the next panel, after a chunk's last
 * panel the first of the next chunk — every line but panel 0's first chunk (lines 0, 1 of rows
 * 0..31). Every prefetch inside the caller's rows (the emulator faults otherwise), none past K.
 * Owned weights, whole K: the next panel's prefetch (PF_NEXT) is issued. */
static void prefetch_rows(void) {
    const int64_t M = 64, N = 96, K = 600, ld = 613, lines = (K + 63) / 64;
    int8_t *wq = malloc((size_t)(N * ld));
    float sc = 0.01f;
    tu_fill_i8(wq, N * ld, -127, 127);
    qmm_weight_desc d = qmm_weight_desc_default();
    d.N = N; d.K = K; d.ld = ld; d.data = wq; d.scale = &sc; d.n_scale = 1;
    qmm_weight *wb = NULL, *wo = NULL;
    TU_CHECK_OK(qmm_weight_borrow_int8(g_ctx[0], &d, &wb));
    TU_CHECK_OK(qmm_weight_create_int8(g_ctx[0], &d, &wo));
    uint16_t *x, *y;
    const qmm_linear_args a = bf16_args(M, N, K, &x, &y);
    qmm_weight view;
    const qmm_weight *wc = wb;
    if (wb) TU_CHECK_OK(qmm_weight_for_call(g_ctx[0], wb, &view, &wc));
    for (int chunked = 0; wb && chunked < 2; chunked++) {
        qmm_call c = make_call(wc, &a, 0);
        qmm_amx_blocking_emu = qmm_amx_blocking_default();
        qmm_amx_blocking_emu.small_m = 32;
        qmm_amx_blocking_emu.panel_a = chunked ? 0 : 1 << 20;
        qmm_amx_blocking_emu.kc = 128;
        const long f0 = qmm_amx_emu_faults();
        qmm_amx_emu_watch(wq, ld, N, K);
        TU_CHECK_OK(run_row(&g_emu_int8, g_ctx[0], &c));
        TU_CHECK(qmm_amx_emu_faults() == f0, "amx_int8 borrowed prefetch: %s", qmm_amx_emu_first_fault());
        int64_t wrong = -1;
        for (int64_t r = 0; r < N && wrong < 0; r++)
            for (int64_t l = 0; l < lines && wrong < 0; l++) {
                const int want = r >= 32 || (chunked && l >= 2);
                if (qmm_amx_emu_watched(r, l) != want) wrong = r * lines + l;
            }
        TU_CHECK(wrong < 0, "amx_int8 borrowed %s: row %lld line %lld %s", chunked ? "K chunks" : "whole K",
                 (long long)(wrong / lines), (long long)(wrong % lines),
                 wrong >= 0 && qmm_amx_emu_watched(wrong / lines, wrong % lines) ? "prefetched, not packed next"
                                                                                 : "packed next, not prefetched");
        qmm_amx_emu_watch(NULL, 0, 0, 0);
    }
    if (wo) {
        qmm_call c = make_call(wo, &a, 0);
        qmm_amx_blocking_emu = qmm_amx_blocking_default();
        const long p0 = qmm_amx_emu_prefetches();
        TU_CHECK_OK(run_row(&g_emu_int8, g_ctx[0], &c));
        TU_CHECK(qmm_amx_last_regime_emu == QMM_AMX_PANEL && qmm_amx_emu_prefetches() > p0,
                 "amx_int8 owned 64×96×600 (panel): no prefetch of the next panel");
    }
    qmm_amx_blocking_emu = qmm_amx_blocking_default();
    qmm_weight_destroy(wb);
    qmm_weight_destroy(wo);
    free(wq); free(x); free(y);
}

/* amx_int8's micro-kernel alone (qmm_qd8_qc8w_gemm_ukernel_32x32c4__amx, emulated) against an
 * int32 triple loop: mr 1..32 × nr 1..2, nq 16..64 quads (1..4 k-steps), A rows lda >= 4·nq bytes
 * apart, B blocks ldb >= 64·nq apart, C rows ldc >= 16·nr apart, -128 in A and B; a first call
 * (C zeroed), then one accumulating a second A (not first); nothing of C outside the mr × 16·nr
 * tile written; the decode prefetch on or off. */
static void ukernel_unit(void) {
    const long f0 = qmm_amx_emu_faults();
    for (int mr = 1; mr <= 32; mr++)
        for (int nr = 1; nr <= 2; nr++) {
            const int64_t nq = 16 * tu_rand_int(1, 4), lda = 4 * nq + 4 * tu_rand_int(0, 20);
            const int64_t ldb = 64 * nq + 64 * tu_rand_int(0, 2), ldc = 16 * nr + tu_rand_int(0, 9);
            int8_t *a = malloc((size_t)(2 * mr * lda)), *b = malloc((size_t)(nr * ldb));
            int32_t *c = malloc((size_t)(32 * ldc) * sizeof(int32_t));
            tu_fill_i8(a, 2 * mr * lda, -128, 127);
            tu_fill_i8(b, nr * ldb, -128, 127);
            for (int64_t i = 0; i < 32 * ldc; i++) c[i] = 0x5A5A5A5A;
            const int stream = (int)tu_rand_int(0, 1);
            qmm_qd8_qc8w_gemm_ukernel_32x32c4__amx_emu(mr, nr, nq, a, lda, b, ldb, c, ldc, 1, stream, NULL);
            qmm_qd8_qc8w_gemm_ukernel_32x32c4__amx_emu(mr, nr, nq, a + mr * lda, lda, b, ldb, c, ldc, 0, stream, NULL);
            qmm_amx_tiles_release_emu();
            int64_t bad = -1;
            int32_t want = 0;
            for (int64_t i = 0; i < 32 && bad < 0; i++)
                for (int64_t n = 0; n < ldc && bad < 0; n++) {
                    want = 0x5A5A5A5A;
                    if (i < mr && n < 16 * nr) {
                        uint32_t sum = 0;
                        for (int h = 0; h < 2; h++)
                            for (int64_t k = 0; k < 4 * nq; k++)
                                sum += (uint32_t)((int32_t)a[(h * mr + i) * lda + k] *
                                                  (int32_t)b[n / 16 * ldb + k / 4 * 64 + n % 16 * 4 + k % 4]);
                        want = (int32_t)sum;
                    }
                    if (c[i * ldc + n] != want) bad = i * ldc + n;
                }
            TU_CHECK(bad < 0, "ukernel 32x32c4__amx mr=%d nr=%d nq=%lld lda=%lld ldb=%lld ldc=%lld: C[%lld][%lld] = %d, want %d",
                     mr, nr, (long long)nq, (long long)lda, (long long)ldb, (long long)ldc, (long long)(bad / ldc),
                     (long long)(bad % ldc), bad >= 0 ? c[bad] : 0, want);
            free(a); free(b); free(c);
        }
    TU_CHECK(qmm_amx_emu_faults() == f0 && qmm_amx_emu_live_configs() == 0, "ukernel: %ld emulated faults (%s), %ld configs left",
             qmm_amx_emu_faults() - f0, qmm_amx_emu_first_fault(), qmm_amx_emu_live_configs());
}


/* ---------------------------------------------------------------- the ladder and the audits */
/* Every rung of amx_int8's ladder (amx_ladder.c), emulated on its small sizes: it runs (one
 * checked unit, one timed rep) with no tile fault, and what it computed equals the plain int32
 * loop over the same operands (bad == 0). Timings are meaningless here. */
static void ladder_rungs(void) {
    for (int i = 0; i < QMM_AMX_LADDER_RUNGS; i++) {
        const long f0 = qmm_amx_emu_faults();
        qmm_probe_result r;
        const qmm_status st = qmm_amx_ladder_probe_emu(i, 1, 1, NULL, NULL, &r);
        TU_CHECK(st == QMM_OK && r.bad == 0 && r.ops > 0 && qmm_amx_emu_faults() == f0 &&
                     qmm_amx_emu_live_configs() == 0,
                 "ladder rung %s: status %d, %lld wrong C values, %lld TDPBSSD, %ld faults (%s), %ld configs left",
                 qmm_amx_ladder_names_emu[i], (int)st, (long long)r.bad, (long long)r.ops, qmm_amx_emu_faults() - f0,
                 qmm_amx_emu_first_fault(), qmm_amx_emu_live_configs());
    }
    tu_note("ladder: %d rungs ran emulated, each C equal to the int32 loop", QMM_AMX_LADDER_RUNGS);
}

/* A small set-associative LRU cache of 64-byte lines (virtually indexed: the model cannot know
 * the physical page colours). */
typedef struct {
    int sets, ways;
    uint64_t *tag; /* [sets][ways], 0 empty; tag = line + 1 */
    uint32_t *age;
    uint32_t clock;
} lru;

static void lru_init(lru *c, int64_t bytes, int ways) {
    c->ways = ways;
    c->sets = (int)(bytes / 64 / ways);
    c->tag = calloc((size_t)(c->sets * ways), sizeof *c->tag);
    c->age = calloc((size_t)(c->sets * ways), sizeof *c->age);
    c->clock = 0;
}

static void lru_free(lru *c) { free(c->tag); free(c->age); }

/* 1 on a hit; a miss fills the line (evicting the least recently used way) */
static int lru_touch(lru *c, uint64_t line) {
    const int s = (int)(line % (uint64_t)c->sets);
    uint64_t *t = c->tag + (int64_t)s * c->ways;
    uint32_t *a = c->age + (int64_t)s * c->ways;
    int victim = 0;
    c->clock++;
    for (int w = 0; w < c->ways; w++) {
        if (t[w] == line + 1) { a[w] = c->clock; return 1; }
        if (a[w] < a[victim]) victim = w;
    }
    t[victim] = line + 1;
    a[victim] = c->clock;
    return 0;
}

/* What one traced amx_int8 call did to the tiles (amx_kernel.h's plan: tiles 0..3 C, 4..5 A,
 * 6..7 B), per operand o = 0 A, 1 B, 2 C. */
typedef struct {
    long loads[3], contiguous[3], pages[3];  /* tile loads; of them rows adjacent; 4 KiB pages touched */
    long c_stores, c_zero, tdp, calls, ksteps_min, ksteps_max, short_calls;
    long first_lines[3], first_prefetched[3];  /* lines loaded for the first time; of them prefetched >= 1 k-step before */
    long alias_rows, c_load_rows;              /* C load rows whose low 12 bits match one of the last 64 store rows */
    long l1_hit[3], l2_hit[3], refs[3];        /* per line reference of tile loads */
    long tdp_thread[8];
    int threads;
} audit_res;

static int op_of(int tile) { return tile < 4 ? 2 : tile < 6 ? 0 : 1; }

static void audit_trace(audit_res *R) {
    memset(R, 0, sizeof *R);
    const qmm_amx_emu_event *ev = qmm_amx_emu_trace_events();
    const long n = qmm_amx_emu_trace_count();
    R->ksteps_min = 1 << 30;
    /* per thread: a call runs from its first C load/zero to its C stores; the k-steps = TDP / 4
     * of a full 2 × 2 call (or TDP per C tile) */
    long call_tdp[8] = {0}, call_cz[8] = {0};
    lru l1[8], l2[8];
    for (int t = 0; t < 8; t++) { lru_init(&l1[t], 48 << 10, 12); lru_init(&l2[t], 2 << 20, 16); }
    /* lines seen, and the event index (in TDPs of the thread) of their prefetch: hash maps */
    const size_t hs = (size_t)1 << 22;
    uint64_t *seen = calloc(hs, sizeof *seen), *pf_line = calloc(hs, sizeof *pf_line);
    long *pf_at = calloc(hs, sizeof *pf_at);
    uintptr_t stores[64] = {0};
    int ns = 0;
    for (long i = 0; i < n; i++) {
        const qmm_amx_emu_event *e = &ev[i];
        const int th = e->thread & 7;
        if (e->thread + 1 > R->threads) R->threads = e->thread + 1;
        if (e->kind == QMM_AMX_EV_DP) { R->tdp++; R->tdp_thread[th]++; call_tdp[th]++; continue; }
        if (e->kind == QMM_AMX_EV_ZERO) { if (e->tile < 4) { R->c_zero++; call_cz[th]++; } continue; }
        if (e->kind == QMM_AMX_EV_PREFETCH) {
            const uint64_t line = e->addr / 64;
            size_t h = (size_t)(line * 0x9E3779B97F4A7C15ull >> 42) & (hs - 1);
            while (pf_line[h] && pf_line[h] != line + 1) h = (h + 1) & (hs - 1);
            if (!pf_line[h]) { pf_line[h] = line + 1; pf_at[h] = R->tdp_thread[th]; }
            lru_touch(&l2[th], line);
            continue;
        }
        const int o = op_of(e->tile);
        if (e->kind == QMM_AMX_EV_STORE) {
            R->c_stores++;
            for (int r = 0; r < e->rows; r++) stores[ns++ % 64] = e->addr + (uintptr_t)r * (uintptr_t)e->stride;
            for (int r = 0; r < e->rows; r++) {
                const uint64_t line = (e->addr + (uint64_t)r * (uint64_t)e->stride) / 64;
                if (!lru_touch(&l1[th], line)) lru_touch(&l2[th], line);
            }
            if (e->tile == 0) { /* a call ends at its C00 store */
                if (call_tdp[th]) {
                    R->calls++;
                    const long tiles = call_cz[th] ? call_cz[th] : 1, ks = call_tdp[th] / tiles;
                    {
                        if (ks < R->ksteps_min) R->ksteps_min = ks;
                        if (ks > R->ksteps_max) R->ksteps_max = ks;
                    }
                }
                call_tdp[th] = call_cz[th] = 0;
            }
            continue;
        }
        /* a tile load */
        R->loads[o]++;
        if (o == 2) { R->c_load_rows += e->rows; call_cz[th]++; }
        if ((int64_t)e->colsb == e->stride || e->rows == 1) R->contiguous[o]++;
        uintptr_t lastpage = (uintptr_t)-1;
        for (int r = 0; r < e->rows; r++) {
            const uintptr_t a = e->addr + (uintptr_t)r * (uintptr_t)e->stride;
            if (a / 4096 != lastpage) { R->pages[o]++; lastpage = a / 4096; }
            if (o == 2)
                for (int k = 0; k < 64 && k < ns; k++)
                    if ((stores[k] & 4095) == (a & 4095) && stores[k] != a) { R->alias_rows++; break; }
            for (uintptr_t l = a / 64; l <= (a + e->colsb - 1) / 64; l++) {
                R->refs[o]++;
                if (lru_touch(&l1[th], l)) R->l1_hit[o]++;
                else if (lru_touch(&l2[th], l)) R->l2_hit[o]++;
                size_t h = (size_t)(l * 0x9E3779B97F4A7C15ull >> 42) & (hs - 1);
                while (seen[h] && seen[h] != l + 1) h = (h + 1) & (hs - 1);
                if (!seen[h]) {
                    seen[h] = l + 1;
                    R->first_lines[o]++;
                    size_t g = (size_t)(l * 0x9E3779B97F4A7C15ull >> 42) & (hs - 1);
                    while (pf_line[g] && pf_line[g] != l + 1) g = (g + 1) & (hs - 1);
                    if (pf_line[g] && R->tdp_thread[th] - pf_at[g] >= 4) R->first_prefetched[o]++;
                }
            }
        }
    }
    for (int t = 0; t < 8; t++) { lru_free(&l1[t]); lru_free(&l2[t]); }
    free(seen); free(pf_line); free(pf_at);
}

/* The traffic audits (issue 27 item 2) on the SPEC §8 shapes scaled down (M and N; K as in SPEC
 * §8, so the chunking is the real one), owned and borrowed, 2 threads, the library's default
 * blocking (the blocked regime forced by panel_a = 0, and decode at M = 16): every tile load and
 * store recorded by the emulator, then per operand the contiguity (rows adjacent) and the 4 KiB
 * pages per load; C loads and stores per TDPBSSD; the k-steps of every full 32 × 32 call (chunk
 * evenness); first touches of A and B lines prefetched at least one k-step ahead; C load rows
 * 4 KiB-aliasing one of the last 64 stored rows; a 48 KiB 12-way L1 and 2 MiB 16-way L2 (LRU,
 * virtual index) fed the tile lines (hit rates per operand); TDPBSSD per thread. Asserted: B and
 * C tile loads contiguous (one page each), C stored once per chunk per tile, chunks even (max − min
 * <= 1 k-step, so no short last chunk paying a full C round trip), no fault, every thread busy
 * and within one task's share of the other. */
static void audits(void) {
    static const struct { const char *name; int64_t M, N, K; int borrowed; } sh[] = {
        {"1024x5376x5376, M/8", 128, 5376, 5376, 0},    {"1024x5376x5376, M/8", 128, 5376, 5376, 1},
        {"4096x5376x14336, M/64", 64, 5376, 14336, 0},  {"4096x21504x5376, M/32 N/4", 128, 5376, 5376, 1},
        {"16x28672x5376 (decode)", 16, 28672, 5376, 0}, {"16x28672x5376 (decode)", 16, 28672, 5376, 1},
        {"1088-deep K (17 k-steps)", 64, 64, 1088, 0},
    };
    const int nsh = (int)(sizeof sh / sizeof sh[0]);
    for (int i = 0; i < nsh; i++) {
        if (g_quick && i % 2) continue;
        const int64_t M = sh[i].M, N = sh[i].N, K = sh[i].K;
        int8_t *wq = malloc((size_t)(N * (K + 3)));
        float sc = 0.01f;
        tu_fill_i8(wq, N * (K + 3), -127, 127);
        qmm_weight_desc d = qmm_weight_desc_default();
        d.N = N; d.K = K; d.data = wq + 1; d.ld = sh[i].borrowed ? K + 2 : 0; d.scale = &sc; d.n_scale = 1;
        qmm_weight *w = NULL;
        if (sh[i].borrowed) TU_CHECK_OK(qmm_weight_borrow_int8(g_ctx[1], &d, &w));
        else TU_CHECK_OK(qmm_weight_create_int8(g_ctx[1], &d, &w));
        uint16_t *x, *y;
        const qmm_linear_args a = bf16_args(M, N, K, &x, &y);
        qmm_weight view;
        const qmm_weight *wc = w;
        if (w && sh[i].borrowed) TU_CHECK_OK(qmm_weight_for_call(g_ctx[1], w, &view, &wc));
        qmm_call c = make_call(wc, &a, 0);
        qmm_amx_blocking_emu = qmm_amx_blocking_default();
        if (M > 32) qmm_amx_blocking_emu.panel_a = 0;
        const long f0 = qmm_amx_emu_faults();
        qmm_amx_emu_trace(8l << 20);
        TU_CHECK_OK(run_row(&g_emu_int8, g_ctx[1], &c));
        audit_res R;
        audit_trace(&R);
        TU_CHECK(qmm_amx_emu_trace_lost() == 0, "audit: trace overflow");
        qmm_amx_emu_trace(0);
        const int64_t ksteps = (K + 63) / 64, kcs = qmm_amx_blocking_emu.kc / 64;
        const int64_t nch = qmm_amx_last_regime_emu == QMM_AMX_BLOCKED ? ((ksteps + kcs / 2) / kcs > 1 ? (ksteps + kcs / 2) / kcs : 1) : 1;
        tu_note("audit %s %s M=%lld N=%lld K=%lld (%s, %d threads): TDPBSSD %ld; loads/TDP A %.3f B %.3f C %.3f, "
                "C stores/TDP %.3f; contiguous A %.0f%% B %.0f%% C %.0f%%; pages per load A %.1f B %.1f C %.1f; "
                "k-steps per call %ld..%ld (%ld calls); first touches prefetched >= 1 k-step ahead A %.0f%% B %.0f%%; "
                "C load rows 4K-aliasing a recent store %.0f%%; L1/L2 hits A %.0f/%.0f%% B %.0f/%.0f%% C %.0f/%.0f%%; "
                "TDP per thread %ld / %ld",
                sh[i].name, sh[i].borrowed ? "borrowed" : "owned", (long long)M, (long long)N, (long long)K,
                qmm_amx_regime_name((qmm_amx_regime)qmm_amx_last_regime_emu), R.threads, R.tdp,
                (double)R.loads[0] / R.tdp, (double)R.loads[1] / R.tdp, (double)R.loads[2] / R.tdp,
                (double)R.c_stores / R.tdp, 100.0 * R.contiguous[0] / R.loads[0], 100.0 * R.contiguous[1] / R.loads[1],
                R.loads[2] ? 100.0 * R.contiguous[2] / R.loads[2] : 100.0, (double)R.pages[0] / R.loads[0],
                (double)R.pages[1] / R.loads[1], R.loads[2] ? (double)R.pages[2] / R.loads[2] : 0.0, R.ksteps_min,
                R.ksteps_max, R.calls, 100.0 * R.first_prefetched[0] / (R.first_lines[0] ? R.first_lines[0] : 1),
                100.0 * R.first_prefetched[1] / (R.first_lines[1] ? R.first_lines[1] : 1),
                100.0 * R.alias_rows / (R.c_load_rows ? R.c_load_rows : 1), 100.0 * R.l1_hit[0] / R.refs[0],
                100.0 * R.l2_hit[0] / R.refs[0], 100.0 * R.l1_hit[1] / R.refs[1], 100.0 * R.l2_hit[1] / R.refs[1],
                R.refs[2] ? 100.0 * R.l1_hit[2] / R.refs[2] : 0.0, R.refs[2] ? 100.0 * R.l2_hit[2] / R.refs[2] : 0.0,
                R.tdp_thread[0], R.tdp_thread[1]);
        const int64_t tiles = (M + 15) / 16 * ((N + 15) / 16); /* 16 × 16 C tiles (M a multiple of 16 here) */
        TU_CHECK(qmm_amx_emu_faults() == f0, "audit %s: faults: %s", sh[i].name, qmm_amx_emu_first_fault());
        TU_CHECK(R.contiguous[1] == R.loads[1] && R.pages[1] == R.loads[1], "audit %s: B tile loads not 1 KiB contiguous",
                 sh[i].name);
        TU_CHECK(R.contiguous[2] == R.loads[2] && R.pages[2] == R.loads[2],
                 "audit %s: C partials loads not tile-contiguous (%ld of %ld, %ld pages)", sh[i].name, R.contiguous[2],
                 R.loads[2], R.pages[2]);
        TU_CHECK(R.c_stores == tiles * nch && R.loads[2] == tiles * (nch - 1),
                 "audit %s: C stored %ld / loaded %ld times, want %lld / %lld (%lld tiles × %lld chunks)", sh[i].name,
                 R.c_stores, R.loads[2], (long long)(tiles * nch), (long long)(tiles * (nch - 1)), (long long)tiles,
                 (long long)nch);
        TU_CHECK(R.ksteps_max - R.ksteps_min <= 1 && R.ksteps_max * nch >= ksteps,
                 "audit %s: K chunks of %ld..%ld k-steps (uneven)", sh[i].name, R.ksteps_min, R.ksteps_max);
        TU_CHECK(R.tdp == tiles * ksteps, "audit %s: %ld TDPBSSD, want %lld", sh[i].name, R.tdp,
                 (long long)(tiles * ksteps));
        const long hi = R.tdp_thread[0] > R.tdp_thread[1] ? R.tdp_thread[0] : R.tdp_thread[1];
        const long lo = R.tdp_thread[0] + R.tdp_thread[1] - hi;
        const int64_t task_tdp = (int64_t)((M < 512 ? M : 512) + 31) / 32 * 16 * 4 * ksteps; /* one task: mc rows × nc = 512 cols */
        TU_CHECK(R.threads == 2 ? lo > 0 && hi - lo <= task_tdp : 1, "audit %s: threads %ld / %ld TDPBSSD", sh[i].name,
                 R.tdp_thread[0], R.tdp_thread[1]);
        qmm_amx_blocking_emu = qmm_amx_blocking_default();
        qmm_weight_destroy(w);
        free(wq); free(x); free(y);
    }
}

/* The same traffic audits on amx_bf16 (amx_bf16.c's plan: tiles 0..3 C, 4..5 W — the A operand
 * of TDPBF16PS — 6..7 the tokens), W8A16 owned and borrowed and a bf16 weight, 2 threads, the
 * library's blocking (kc = 256 k): W and C tile loads 1 KiB contiguous in one page (C
 * tile-contiguous), token tiles in one page; every C tile zeroed once, stored once per k block and
 * loaded once per k block after the first; k blocks even (max − min <= 1 k-step of 32 k); TDPBF16PS
 * = C tiles × k-steps; the tokens' first touches prefetched (the driver's auxinfo: the slice run
 * next) ahead, all but the first k block's of each task; both threads busy. */
static void audits_bf16(void) {
    static const struct { const char *name; int64_t M, N, K; int kind; } sh[] = {
        {"1024x5376x5376 W8A16, M/16 N/8", 64, 672, 5376, 0}, {"1024x5376x5376 W8A16 borrowed, M/16 N/8", 64, 672, 5376, 1},
        {"4096x5376x14336 bf16, M/64 N/16", 64, 336, 14336, 2}, {"1088-deep K (34 k-steps), 48 rows", 48, 96, 1088, 0},
        {"16 rows (one token group)", 16, 256, 1088, 2},
    };
    for (int i = 0; i < (int)(sizeof sh / sizeof sh[0]); i++) {
        if (g_quick && i % 2) continue;
        const int64_t M = sh[i].M, N = sh[i].N, K = sh[i].K;
        int8_t *wq = malloc((size_t)(N * (K + 3)));
        uint16_t *wb = malloc((size_t)(N * K) * 2);
        float sc = 0.01f;
        tu_fill_i8(wq, N * (K + 3), -127, 127);
        tu_fill_float(wb, QMM_BF16, N * K, 0.5f);
        qmm_weight *w = NULL;
        if (sh[i].kind == 2) {
            TU_CHECK_OK(qmm_weight_create_float(g_ctx[1], "audit.bf16", wb, QMM_BF16, N, K, 0, NULL, QMM_F32, &w));
        } else {
            qmm_weight_desc d = qmm_weight_desc_default();
            d.N = N; d.K = K; d.data = wq + 1; d.ld = sh[i].kind ? K + 2 : 0; d.scale = &sc; d.n_scale = 1;
            if (sh[i].kind) TU_CHECK_OK(qmm_weight_borrow_int8(g_ctx[1], &d, &w));
            else TU_CHECK_OK(qmm_weight_create_int8(g_ctx[1], &d, &w));
        }
        uint16_t *x, *y;
        const qmm_linear_args a = bf16_args(M, N, K, &x, &y);
        qmm_weight view;
        const qmm_weight *wc = w;
        if (w && sh[i].kind == 1) TU_CHECK_OK(qmm_weight_for_call(g_ctx[1], w, &view, &wc));
        qmm_call c = make_call(wc, &a, sh[i].kind != 2);
        qmm_amx_blocking_emu = qmm_amx_blocking_default();
        const long f0 = qmm_amx_emu_faults();
        qmm_amx_emu_trace(8l << 20);
        TU_CHECK_OK(run_row(&g_emu_bf16, g_ctx[1], &c));
        audit_res R;
        audit_trace(&R);
        TU_CHECK(qmm_amx_emu_trace_lost() == 0, "audit bf16: trace overflow");
        qmm_amx_emu_trace(0);
        const int64_t ksteps = (K + 31) / 32, kcs = qmm_amx_blocking_emu.kc / 2 / 32, nch = (ksteps + kcs - 1) / kcs;
        tu_note("audit amx_bf16 %s M=%lld N=%lld K=%lld (%d threads): TDPBF16PS %ld; loads/TDP W %.3f tokens %.3f C %.3f, "
                "C stores/TDP %.3f; contiguous W %.0f%% C %.0f%%; pages per load W %.1f tokens %.1f C %.1f; k-steps "
                "per call %ld..%ld (%ld calls); token first touches prefetched ahead %.0f%%; L1/L2 hits W %.0f/%.0f%% "
                "tokens %.0f/%.0f%% C %.0f/%.0f%%; TDP per thread %ld / %ld",
                sh[i].name, (long long)M, (long long)N, (long long)K, R.threads, R.tdp, (double)R.loads[0] / R.tdp,
                (double)R.loads[1] / R.tdp, (double)R.loads[2] / R.tdp, (double)R.c_stores / R.tdp,
                100.0 * R.contiguous[0] / R.loads[0], R.loads[2] ? 100.0 * R.contiguous[2] / R.loads[2] : 100.0,
                (double)R.pages[0] / R.loads[0], (double)R.pages[1] / R.loads[1],
                R.loads[2] ? (double)R.pages[2] / R.loads[2] : 0.0, R.ksteps_min, R.ksteps_max, R.calls,
                100.0 * R.first_prefetched[1] / (R.first_lines[1] ? R.first_lines[1] : 1),
                100.0 * R.l1_hit[0] / R.refs[0], 100.0 * R.l2_hit[0] / R.refs[0], 100.0 * R.l1_hit[1] / R.refs[1],
                100.0 * R.l2_hit[1] / R.refs[1], R.refs[2] ? 100.0 * R.l1_hit[2] / R.refs[2] : 0.0,
                R.refs[2] ? 100.0 * R.l2_hit[2] / R.refs[2] : 0.0, R.tdp_thread[0], R.tdp_thread[1]);
        TU_CHECK(qmm_amx_emu_faults() == f0, "audit bf16 %s: faults: %s", sh[i].name, qmm_amx_emu_first_fault());
        TU_CHECK(R.contiguous[0] == R.loads[0] && R.pages[0] == R.loads[0], "audit bf16 %s: W tile loads not 1 KiB contiguous",
                 sh[i].name);
        TU_CHECK(R.pages[1] == R.loads[1], "audit bf16 %s: token tile loads over %ld pages for %ld loads", sh[i].name,
                 R.pages[1], R.loads[1]);
        TU_CHECK(R.contiguous[2] == R.loads[2] && R.pages[2] == R.loads[2],
                 "audit bf16 %s: C loads not tile-contiguous (%ld of %ld, %ld pages)", sh[i].name, R.contiguous[2],
                 R.loads[2], R.pages[2]);
        TU_CHECK(R.c_zero >= (M + 15) / 16 * ((N + 15) / 16) && R.c_stores == R.c_zero * nch &&
                     R.loads[2] == R.c_zero * (nch - 1) && R.tdp == R.c_zero * ksteps,
                 "audit bf16 %s: %ld C tiles, stored %ld / loaded %ld times, %ld TDPBF16PS; want per tile %lld / %lld, %lld",
                 sh[i].name, R.c_zero, R.c_stores, R.loads[2], R.tdp, (long long)nch, (long long)(nch - 1),
                 (long long)ksteps);
        TU_CHECK(R.ksteps_max - R.ksteps_min <= 1, "audit bf16 %s: k blocks of %ld..%ld k-steps (uneven)", sh[i].name,
                 R.ksteps_min, R.ksteps_max);
        TU_CHECK(nch < 2 || 2 * R.first_prefetched[1] >= R.first_lines[1],
                 "audit bf16 %s: %ld of %ld token first touches prefetched", sh[i].name, R.first_prefetched[1],
                 R.first_lines[1]);
        TU_CHECK(R.threads == 2 && R.tdp_thread[0] > 0 && R.tdp_thread[1] > 0, "audit bf16 %s: threads %ld / %ld",
                 sh[i].name, R.tdp_thread[0], R.tdp_thread[1]);
        qmm_weight_destroy(w);
        free(wq); free(wb); free(x); free(y);
    }
}

static void sweep(const qmm_engine *ei, const qmm_engine *eb, int real) {
    static const int64_t Ks[] = {1, 16, 63, 64, 65, 256, 1001};
    const int nK = (int)(sizeof Ks / sizeof Ks[0]);
    for (int64_t M = 1; M <= 33; M++) {
        int64_t N = tu_rand_int(0, 2) == 0 ? tu_rand_int(1, 15) : tu_rand_int(1, 40) * 2 - 1;
        int64_t K = Ks[(M + tu_rand_int(0, nK - 1)) % nK];
        if (g_quick && K > 256) K = 65;
        int8_case(ei, real, M, N, K, 0);
    }
    for (int64_t M = 34; M <= 100; M += g_quick ? 11 : tu_rand_int(1, 4)) { /* several row tiles, partial last */
        int64_t K = Ks[tu_rand_int(0, nK - 1)];
        if (g_quick && K > 256) K = 65;
        int8_case(ei, real, M, tu_rand_int(1, 70), K, 0);
    }
    for (int i = 0; i < nK; i++) int8_case(ei, real, tu_rand_int(1, 40), tu_rand_int(1, 50), Ks[i], 0);
    for (int i = 0; i < 6; i++) int8_case(ei, real, tu_rand_int(8, 40), tu_rand_int(8, 50), i < 3 ? 64 : 256, 1);
    /* every regime (chosen at random per call) on shapes with several N, M and K blocks of
     * the small blockings, partial last ones, M = 1, odd M and N, K not a multiple of 64 */
    static const int64_t Ms[] = {1, 2, 17, 33, 64, 100}, Ns[] = {1, 17, 33, 130}, Kx[] = {1, 65, 200, 600};
    for (int im = 0; im < 6; im++)
        for (int in = 0; in < 4; in++)
            for (int ik = 0; ik < 4; ik++) {
                if (g_quick && (im + in + ik) % 3) continue;
                int8_case(ei, real, Ms[im], Ns[in], Kx[ik], 0);
                if ((im + in + ik) % 4 == 0) bf16_case(eb, real, Ms[im], Ns[in], Kx[ik], (im + ik) % 2);
            }
    /* the library's own blocking in the blocked regime: 2 M blocks, 3 N blocks and 3 K blocks
     * of kc=512 / nc=512 / mc=512, each last one partial */
    if (!g_quick) {
        g_default_blocked = 1;
        for (g_borrow = 0; g_borrow < 2; g_borrow++) int8_case(ei, real, 600, 1100, 1100, 0);
        g_borrow = -1;
        bf16_case(eb, real, 600, 1100, 600, 1);
        g_default_blocked = 0;
    }
    int64_t Mbig = g_quick ? 300 : 4096;
    for (g_borrow = 0; g_borrow < 2; g_borrow++) {
        int8_case(ei, real, Mbig, 17, 64, 0);
        int8_case(ei, real, Mbig, 5, 256, 0);
    }
    g_borrow = -1;
    int8_case(ei, real, 64, 96, 1001, 0);
    for (int i = 0; i < 3; i++) int8_case(ei, real, tu_rand_int(1, 70), tu_rand_int(150, 260), 64 * tu_rand_int(1, 3), 0); /* several chunks */
    for (int iw = 0; iw < 2; iw++) {
        for (int64_t M = 1; M <= 33; M += g_quick ? 8 : 2) {
            int64_t N = tu_rand_int(0, 2) == 0 ? tu_rand_int(1, 15) : tu_rand_int(1, 40) * 2 - 1;
            int64_t K = Ks[(M + tu_rand_int(0, nK - 1)) % nK];
            if (g_quick && K > 256) K = 63;
            bf16_case(eb, real, M, N, K, iw);
        }
        bf16_case(eb, real, Mbig, 17, 64, iw);
        bf16_case(eb, real, 40, 33, 1001, iw);
        for (int i = 0; i < 2; i++) bf16_case(eb, real, tu_rand_int(1, 70), tu_rand_int(150, 260), 64 * tu_rand_int(1, 3), iw);
    }
}

/* The linear rows' finalize (amx_regime.c): amx_int8 gives one const descriptor per regime —
 * the same one for every class of that regime, named by it, the driver options of the regime
 * (whole K outside blocked, PF_STREAM only in decode) and the blocking in force, the kernels'
 * fixed part otherwise (the decode regime's tile streams B ahead); qmm_engine_regime of the real engine names the same regime. amx_bf16
 * gives one const descriptor per block width and kc — the same pointer for a class asked again,
 * another for more threads where block_cols splits N finer — with the kernels' fixed part. */
static void finalized(void) {
    const qmm_op_row *ri = &qmm_amx_int8_ops_emu.op[QMM_OP_LINEAR], *rb = &qmm_amx_bf16_ops_emu.op[QMM_OP_LINEAR];
    if (!TU_CHECK(ri->finalize && rb->finalize && !ri->run && !rb->run && !ri->desc && !rb->desc,
                  "AMX linear rows: a finalize, no run, no fixed descriptor"))
        return;
    qmm_weight w;
    memset(&w, 0, sizeof w);
    w.is_int8 = 1;
    w.N = 4096;
    w.K = 1000;
    w.i8.Kp = 1024;
    qmm_amx_blocking_emu = qmm_amx_blocking_default();
    const qmm_amx_blocking b = qmm_amx_blocking_emu;
    const int64_t Ms[] = {1, 8, 32, 33, 100, 1536, 1537, 4096};
    const qmm_i8_engine *seen[3] = {NULL, NULL, NULL};
    for (size_t i = 0; i < sizeof Ms / sizeof Ms[0]; i++) {
        const qmm_call c = {.w = &w, .M = Ms[i], .N = w.N, .K = w.K};
        const int want = qmm_amx_regime_of(&b, c.M, c.M * w.i8.Kp);
        const qmm_final f = ri->finalize(&c, 1 + (int)i % 3);
        const qmm_i8_engine *e = f.desc;
        if (!TU_CHECK(e != NULL && qmm_amx_last_regime_emu == want, "amx_int8 M=%lld: regime %d, the rule says %d",
                      (long long)c.M, qmm_amx_last_regime_emu, want))
            continue;
        TU_CHECK(!strcmp(f.name, qmm_amx_regime_name((qmm_amx_regime)want)) &&
                     !strcmp(qmm_engine_regime(QMM_ENGINE_AMX_INT8, &w, c.M), f.name),
                 "amx_int8 M=%lld: named '%s', qmm_engine_regime '%s'", (long long)c.M, f.name,
                 qmm_engine_regime(QMM_ENGINE_AMX_INT8, &w, c.M));
        TU_CHECK(!seen[want] || seen[want] == e, "amx_int8 M=%lld: a second descriptor for regime %s", (long long)c.M, f.name);
        seen[want] = e;
        TU_CHECK(e->whole_k_m == (want == QMM_AMX_BLOCKED ? 0 : INT_MAX) && e->mc == b.mc && e->nc == b.nc &&
                     e->kc == b.kc &&
                     e->tile == (want == QMM_AMX_DECODE ? qmm_amx_int8_kernels_decode_emu : qmm_amx_int8_kernels_emu).tile &&
                     e->mr == 32 && e->nrb == 2 && e->k64 && e->c_tiles && e->pack_bare && e->begin && e->end,
                 "amx_int8 M=%lld: descriptor of regime %s", (long long)c.M, f.name);
    }
    TU_CHECK(seen[0] && seen[1] && seen[2] && seen[0] != seen[1] && seen[1] != seen[2], "amx_int8: three descriptors");
    w.is_int8 = 0;
    w.fdtype = QMM_BF16;
    const qmm_call c = {.w = &w, .M = 1, .N = w.N, .K = w.K};
    const qmm_fgemm *g1 = rb->finalize(&c, 1).desc, *g1b = rb->finalize(&c, 1).desc, *g16 = rb->finalize(&c, 16).desc;
    if (!TU_CHECK(g1 && g16, "amx_bf16: no descriptor")) return;
    TU_CHECK(g1 == g1b && g1 != g16 && g1->nr == 512 && g16->nr == 64 && g1->kc == b.kc / 2 && g16->kc == b.kc / 2 &&
                 g1->b_bytes == (size_t)(g1->nr * g1->kc) * 2 && g1->b_col16 == (size_t)(16 * g1->kc) * 2,
             "amx_bf16 N=4096 M=1: nr %d (1 thread, again %s), %d (16 threads), kc %lld",
             g1->nr, g1 == g1b ? "the same" : "another", g16->nr, (long long)g1->kc);
    TU_CHECK(g1->kernel_aux == qmm_amx_bf16_kernels_emu.kernel_aux && g1->mr == 32 && g1->bf16 && g1->ka == 32 &&
                 g1->even_k && g1->page_bufs && g1->begin && g1->end,
             "amx_bf16: the kernels' fixed part");
    TU_CHECK(!strcmp(qmm_engine_regime(QMM_ENGINE_AMX_BF16, &w, 1), ""), "amx_bf16: no regime name");
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_amx_emulated");
    g_quick = getenv("QMM_TEST_QUICK") != NULL;
    const uint32_t need = QMM_CPU_AVX512F | QMM_CPU_AVX512BW | QMM_CPU_AVX512VL | QMM_CPU_AVX512DQ;
    if ((qmm_cpu_features() & need) != need) {
        tu_skip("amx_int8/amx_bf16 (emulated)", "the emulated build uses AVX-512 for the epilogue; CPU lacks it");
        tu_finish();
        return 77;
    }
    for (int t = 0; t < 2; t++) {
        qmm_context_options o = qmm_context_options_default();
        o.n_threads = t + 1;
        if (qmm_context_create(&o, &g_ctx[t]) != QMM_OK) { printf("context: %s\n", qmm_last_error()); return 1; }
    }
    admission();
    blocking_rules();
    finalized();
    ukernel_unit();
    op_counts();
    prefetch_rows();
    ladder_rungs();
    audits();
    audits_bf16();
    long ops0 = qmm_amx_emu_ops();
    sweep(&g_emu_int8, &g_emu_bf16, 0);
    tu_note("emulated tile instructions executed: %ld", qmm_amx_emu_ops() - ops0);
    tu_note("amx_int8 emulated calls per regime: decode %ld, panel %ld, blocked %ld", g_regime_runs[0][0],
            g_regime_runs[0][1], g_regime_runs[0][2]);
    for (int r = 0; r < 3; r++)
        TU_CHECK(g_regime_runs[0][r] > 0, "amx_int8: regime %s never ran", qmm_amx_regime_name((qmm_amx_regime)r));
    tu_note("amx_bf16 emulated calls: bf16 weights %ld, int8 owned %ld, int8 borrowed %ld", g_bf16_runs[0],
            g_bf16_runs[1], g_bf16_runs[2]);
    for (int k = 0; k < 3; k++) TU_CHECK(g_bf16_runs[k] > 0, "amx_bf16: weight kind %d never ran", k);
    tu_note("amx_int8 on borrowed weights (packed per call) per regime: decode %ld, panel %ld, blocked %ld", g_borrowed_runs[0],
            g_borrowed_runs[1], g_borrowed_runs[2]);
    for (int r = 0; r < 3; r++)
        TU_CHECK(g_borrowed_runs[r] > 0, "amx_int8 borrowed: regime %s never ran", qmm_amx_regime_name((qmm_amx_regime)r));
    TU_CHECK(qmm_amx_emu_ops() > ops0, "the emulated engines executed no tile instruction");
    char why[QMM_REASON_MAX];
    if (qmm_engine_available(QMM_ENGINE_AMX_INT8, why, sizeof why) &&
        qmm_engine_available(QMM_ENGINE_AMX_BF16, why, sizeof why)) {
        tu_note("AMX present: running the same sweep on the real engines");
        sweep(qmm_engine_get(QMM_ENGINE_AMX_INT8), qmm_engine_get(QMM_ENGINE_AMX_BF16), 1);
    } else {
        tu_skip("amx_int8/amx_bf16 (real)", why);
    }
    for (int t = 0; t < 2; t++) qmm_context_destroy(g_ctx[t]);
    return tu_finish();
}
