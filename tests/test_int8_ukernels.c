/*
 * test_int8_ukernels.c — the int8 engines' micro-kernels as units, outside the driver: every
 * engine with a core-driver descriptor (qmm_i8_engine_of: amx_int8, avx512_vnni, avx_vnni, avx2_int8; an
 * int8 engine without one is listed as skipped, as is an engine this CPU cannot run), against an
 * int32 triple loop on the same bytes:
 *   tile         qmm_i8_engine.tile over mr = 1..MR, nr = 1..nrb blocks (the last block partial:
 *                N not a multiple of 16), K split into chunks of nq quads (1, odd, even, all of
 *                K) run first → last: after each chunk the partials hold Σ a·w over the quads so
 *                far (a as the engine's operand: u8 = q XOR 0x80, or s8), after the last the
 *                outputs (I32: the exact Σ q·w; f32: qmm_epilogue_store_ref of it, bit for bit)
 *                and nothing else of y written; weights with -128 (the panel's neg128 flag set),
 *                activations with -128, every prefetch mode (NONE, STREAM, NEXT);
 *   pack         qmm_i8_engine.pack against qmm_pack_n16k4_ref: rows 1..16, chunks [k0, k1)
 *                with odd ends, nq past the bytes, first or accumulating column sums, the -128
 *                flag (for engines that need it: exact; nothing past k1 read, ASan's job);
 *   rows         borrowed rows at M = 1..rows_m (the kernel qmm_i8_rows_kernel_for picks), and every
 *                rows kernel by name (qmm_i8_engine.rows_kernels: every M of its range, odd N and
 *                K), against the triple loop, a = q (s8) with its row
 *                sums and -128 flags (and the engine's own copy of q where it asks for one:
 *                rows_ap_fill), over the driver's tasks of 16 blocks and over other ranges;
 *   one_pass     at every M it takes (one_pass_rows(M) > 0), owned weights, its tiles as the
 *                driver runs them (in ranges of blocks, each tile inside the weight, asked for its
 *                blocks inside the range; some ranges left out): the blocks asked for hold the
 *                triple loop's sums (padding rows of ap as the pre-pass writes them), the rest of
 *                y untouched.
 * An engine of whole 64-byte k-steps (k64) gets chunks of whole k-steps; tile-contiguous partials
 * (c_tiles) are read in their 16 × 16 tiles; a bare pack (pack_bare) is checked on its bytes only;
 * the engine's per-thread hooks (begin, end) bracket its tiles as the driver's do.
 * Linked with the emulated AMX engines (tests/amx_emu.cmake, QMM_TEST_AMX_EMU) it also runs amx_int8
 * (emulated) through its blocked regime's descriptor (its linear row's finalize) on a CPU with AVX-512, with no
 * emulated tile fault and no tile configuration left.
 * No kernel may report an impossible case (qmm_call_bug). Seeded (testutil.h): QMM_SEED=N or the
 * first argument replays a run; QMM_TEST_QUICK=1 runs fewer cases.
 */
#include "int8_gemm.h"
#include "numerics.h"
#include "testutil.h"
#ifdef QMM_TEST_AMX_EMU
#include "../src/engines/x86_amx/amx_emu.h"
#endif

#include <stdlib.h>
#include <string.h>

static int g_quick;

/* a call writing y [M][ldy] of dtype yt from weight w (N × K), kernel bugs reported to *bug */
static qmm_call unit_call(const qmm_weight *w, int64_t M, void *y, qmm_dtype yt, int64_t ldy, _Atomic(const char *) *bug) {
    return (qmm_call){.w = w, .M = M, .N = w->N, .K = w->K, .y = y, .y_dtype = yt, .ldy = ldy, .bug = bug};
}

/* where a tile's partial sum of row i, column n lies (nr blocks; int8_gemm.h, c_tiles) */
static int64_t part_at(const qmm_i8_engine *e, int i, int64_t n, int nr) {
    return e->c_tiles ? ((i / 16) * nr + n / 16) * 256 + (i % 16) * 16 + n % 16 : i * (int64_t)e->nc + n;
}

/* a: the engine's operand byte as the kernel multiplies it */
static int32_t a_val(const qmm_i8_engine *e, uint8_t a) { return e->u8 ? (int32_t)a : (int32_t)(int8_t)a; }

/* one tile: rows [r0, r0 + mr) × blocks [0, nr) of a weight with N columns (the last block may be
 * partial), K = 4·kq bytes in chunks of cq quads; on half the chunks a rows_pf share of rows
 * allocated to the byte (an engine that fetches it reads nothing else, and the bits stay) */
static void tile_case(const char *name, const qmm_i8_engine *e, int mr, int nr, int64_t kq, int64_t cq, int neg128,
                      qmm_dtype yt, int pf_mode) {
    const int64_t K = 4 * kq - tu_rand_int(0, 3), Kp = qmm_round_up(4 * kq, 64), N = 16 * (nr - 1) + tu_rand_int(1, 16);
    const int64_t r0 = tu_rand_int(0, 3), M = r0 + mr, ldy = N + tu_rand_int(0, 5), nc = e->nc;
    /* q: the activations (zero past K); a: the engine's operand, rows Kp bytes apart */
    int8_t *q = calloc((size_t)(M * Kp), 1);
    uint8_t *a = qmm_aligned_alloc((size_t)(M * Kp));
    for (int64_t r = 0; r < M; r++)
        for (int64_t k = 0; k < K; k++) q[r * Kp + k] = (int8_t)tu_rand_int(-128, 127);
    for (int64_t i = 0; i < M * Kp; i++) a[i] = (uint8_t)q[i] ^ (e->u8 ? 0x80 : 0);
    /* W [16·nr][K] and its n16k4 packing over all of K (qmm_pack_n16k4_ref), column sums */
    int8_t *W = calloc((size_t)(16 * nr * K), 1);
    tu_fill_i8(W, N * K, -127, 127);
    if (neg128) W[tu_rand_int(0, N * K - 1)] = -128;
    const int64_t ldb = kq * 64;
    int8_t *b = qmm_aligned_alloc((size_t)(nr * ldb) + 4096), *pfbuf = qmm_aligned_alloc(128 * (size_t)kq + 64);
    int32_t *cs = malloc(sizeof(int32_t) * 16 * (size_t)nr);
    /* a borrowed weight's rows packed next (the tile's rows_pf, on half the calls): 16·nr rows of
     * pld >= K bytes, allocated to the byte, so that a read past its lines is a sanitizer error */
    const int64_t pld = K + tu_rand_int(0, 9), pper = (K + 63) / 64, plines = 16 * nr * pper;
    int8_t *prows = malloc((size_t)(16 * nr * pld));
    memset(prows, 7, (size_t)(16 * nr * pld));
    int flag = 0;
    for (int jb = 0; jb < nr; jb++) {
        const int rows = N - 16 * jb < 16 ? (int)(N - 16 * jb) : 16;
        qmm_pack_n16k4_ref(W + 16 * jb * K, K, rows, 0, K, b + jb * ldb, kq, cs + 16 * jb, 1, &flag);
    }
    int32_t *part = qmm_aligned_alloc(sizeof(int32_t) * (size_t)(e->mr * nc));
    (void)nc;
    int32_t *y = malloc(sizeof(int32_t) * (size_t)(M * ldy)), *y0 = malloc(sizeof(int32_t) * (size_t)(M * ldy));
    float *s = malloc(sizeof(float) * (size_t)M), *scale = malloc(sizeof(float) * (size_t)N);
    float *bias = malloc(sizeof(float) * (size_t)N);
    for (int64_t r = 0; r < M; r++) s[r] = (float)tu_rand_int(1, 1000) / 4096.0f;
    for (int64_t n = 0; n < N; n++) {
        scale[n] = (float)tu_rand_int(1, 1 << 20) / (float)(1 << 27);
        bias[n] = tu_rand_normal();
    }
    memset(y, 0xA5, sizeof(int32_t) * (size_t)(M * ldy));
    memcpy(y0, y, sizeof(int32_t) * (size_t)(M * ldy));
    qmm_weight w;
    memset(&w, 0, sizeof w);
    w.N = N;
    w.K = K;
    w.scale = scale;
    w.bias = tu_rand_int(0, 1) ? bias : NULL;
    _Atomic(const char *) bug = NULL;
    qmm_call c = unit_call(&w, M, y, yt, ldy, &bug);
    if (e->begin) e->begin(&c, 0);
    /* the expected outputs: exact sums through the scalar epilogue on y0 (I32: the sums) */
    qmm_call c0 = c;
    c0.y = y0;
    for (int i = 0; i < mr; i++)
        for (int64_t n = 0; n < N; n++) {
            uint32_t acc = 0;
            for (int64_t k = 0; k < K; k++) acc += (uint32_t)((int32_t)q[(r0 + i) * Kp + k] * W[n * K + k]);
            qmm_epilogue_store_ref(&c0, (int32_t)acc, r0 + i, n, s[r0 + i]);
        }
    char what[200];
    snprintf(what, sizeof what, "%s tile mr=%d nr=%d N=%lld K=%lld (%lld quads, chunks of %lld) y %s pf %d%s", name, mr,
             nr, (long long)N, (long long)K, (long long)kq, (long long)cq, qmm_dtype_name(yt), pf_mode,
             neg128 ? " W has -128" : "");
    int ok = 1;
    for (int64_t q0 = 0; q0 < kq && ok; q0 += cq) {
        qmm_i8_tile t;
        memset(&t, 0, sizeof t);
        t.nq = kq - q0 < cq ? kq - q0 : cq;
        t.b = b + q0 * 64;
        t.ldb = ldb;
        t.colsum = cs;
        t.neg128 = flag;
        t.part = part;
        t.mr = mr;
        t.nr = nr;
        t.first = q0 == 0;
        t.last = q0 + t.nq >= kq;
        t.r = r0;
        t.n = 0;
        t.pf_mode = pf_mode;
        t.pf = pf_mode == QMM_I8_PF_NEXT ? pfbuf : NULL;
        t.pf_step = 128;
        if (tu_rand_int(0, 1)) {
            const int64_t l0 = tu_rand_int(0, plines);
            t.rows_pf = (qmm_i8_rows_pf){prows, pld, pper, l0, tu_rand_int(l0, plines)};
        }
                e->tile(a + r0 * Kp + q0 * 4, Kp, s + r0, &c, &t);
        if (t.last) break;
        /* the partials: Σ a·w over quads [0, q0 + nq) (the operand as the kernel reads it) */
        const int64_t kend = (q0 + t.nq) * 4;
        for (int i = 0; i < mr && ok; i++)
            for (int64_t n = 0; n < 16 * nr && ok; n++) {
                uint32_t acc = 0;
                for (int64_t k = 0; k < kend; k++)
                    acc += (uint32_t)(a_val(e, a[(r0 + i) * Kp + k]) * (n < N && k < K ? W[n * K + k] : 0));
                ok = TU_CHECK(part[part_at(e, i, n, nr)] == (int32_t)acc,
                              "%s: after the chunk ending at quad %lld: part[%d][%lld] = %d, expected %d", what,
                              (long long)(q0 + t.nq), i, (long long)n, part[part_at(e, i, n, nr)], (int32_t)acc);
            }
    }
    if (e->end) e->end(&c, 0);
    if (ok) {
        const int64_t bad = tu_first_diff(y0, y, yt == QMM_I32 ? QMM_I32 : QMM_F32, M * ldy);
        ok = TU_CHECK(bad < 0, "%s: y[%lld][%lld] = %d (bits), expected %d", what, (long long)(bad / ldy),
                      (long long)(bad % ldy), bad >= 0 ? y[bad] : 0, bad >= 0 ? y0[bad] : 0);
    }
    TU_CHECK(!atomic_load(&bug), "%s: the kernel reported: %s", what, atomic_load(&bug));
    free(q);
    qmm_aligned_free(a);
    free(W);
    qmm_aligned_free(b);
    qmm_aligned_free(pfbuf);
    free(prows);
    free(cs);
    qmm_aligned_free(part);
    free(y);
    free(y0);
    free(s);
    free(scale);
    free(bias);
}

static void test_tiles(const char *name, const qmm_i8_engine *e) {
    static const int64_t kqs[] = {1, 2, 3, 7, 16, 17, 33, 64, 65, 130};
    const int nk = (int)(sizeof kqs / sizeof kqs[0]);
    int cases = 0;
    for (int mr = 1; mr <= e->mr; mr++)
        for (int nr = 1; nr <= e->nrb; nr++)
            for (int rep = 0; rep < (g_quick ? 2 : 6); rep++) {
                int64_t kq = kqs[tu_rand_int(0, nk - 1)];
                /* chunks: 1 quad, an odd count, all of K, or random (k64: whole k-steps of 16 quads) */
                const int64_t cqs[4] = {1, kq > 2 ? (kq / 2) | 1 : 1, kq, tu_rand_int(1, kq)};
                int64_t cq = cqs[rep % 4];
                if (e->k64) {
                    kq = qmm_round_up(kq, 16);
                    cq = qmm_round_up(cq, 16);
                }
                tile_case(name, e, mr, nr, kq, cq, rep % 3 == 2, rep % 2 ? QMM_I32 : QMM_F32, (int)tu_rand_int(0, 2));
                cases++;
            }
    /* the edges once more: one quad, one chunk per quad, -128 in W, each prefetch mode */
    const int64_t u = e->k64 ? 16 : 1; /* the smallest chunk */
    for (int pf = 0; pf < 3; pf++) {
        tile_case(name, e, e->mr, e->nrb, u, u, 1, QMM_I32, pf);
        tile_case(name, e, 1, 1, 5 * u, u, 1, QMM_I32, QMM_I8_PF_NONE);
        tile_case(name, e, e->mr, e->nrb, qmm_round_up(67, u), qmm_round_up(67, u), 0, QMM_F32, pf);
        cases += 3;
    }
    tu_note("%s: %d tiles", name, cases);
}

static void test_pack(const char *name, const qmm_i8_engine *e) {
    if (!e->pack) {
        tu_skip(name, "pack: none (the driver uses qmm_pack_n16k4_ref)");
        return;
    }
    int cases = 0;
    for (int rep = 0; rep < (g_quick ? 60 : 400); rep++) {
        const int rows = rep < 16 ? rep + 1 : (int)tu_rand_int(1, 16);
        const int64_t K = tu_rand_int(1, rep % 5 ? 300 : 1100), k0 = 4 * tu_rand_int(0, (K - 1) / 4);
        const int64_t k1 = rep % 3 ? K : tu_rand_int(k0 + 1, K), ld = K + tu_rand_int(0, 9);
        const int64_t nq = (k1 - k0 + 3) / 4 + (rep % 4 == 3 ? tu_rand_int(1, 9) : 0);
        /* the last row ends at k1: a read past it is a heap overflow (ASan) */
        int8_t *W = malloc((size_t)((rows - 1) * ld + k1));
        tu_fill_i8(W, (rows - 1) * ld + k1, -127, 127);
        const int neg = rep % 4 == 1;
        if (neg) {
            const int r = (int)tu_rand_int(0, rows - 1);
            W[r * ld + tu_rand_int(k0, k1 - 1)] = -128;
        }
        int8_t *d0 = qmm_aligned_alloc((size_t)(nq * 64)), *d1 = qmm_aligned_alloc((size_t)(nq * 64));
        memset(d0, 0x11, (size_t)(nq * 64));
        memset(d1, 0x22, (size_t)(nq * 64));
        int32_t cs0[16], cs1[16];
        const int first = rep % 2;
        for (int j = 0; j < 16; j++) cs0[j] = cs1[j] = (int32_t)tu_rand_int(-100000, 100000);
        int32_t csin[16];
        memcpy(csin, cs1, sizeof csin);
        const int flag_in = rep % 8 == 5;
        int f0 = flag_in, f1 = flag_in;
        qmm_pack_n16k4_ref(W, ld, rows, k0, k1, d0, nq, cs0, first, &f0);
        e->pack(W, ld, rows, k0, k1, d1, nq, cs1, first, &f1);
        int64_t bad = -1;
        for (int64_t i = 0; i < nq * 64 && bad < 0; i++)
            if (d0[i] != d1[i]) bad = i;
        int csbad = -1;
        for (int j = 0; j < 16 && csbad < 0; j++)
            if (cs0[j] != cs1[j]) csbad = j;
        if (e->pack_bare) csbad = -1; /* column sums left alone (checked below) */
        TU_CHECK(bad < 0 && csbad < 0, "%s pack rows=%d K=%lld [%lld, %lld) nq=%lld ld=%lld first=%d: byte %lld (%d vs %d), colsum %d",
                 name, rows, (long long)K, (long long)k0, (long long)k1, (long long)nq, (long long)ld, first,
                 (long long)bad, bad >= 0 ? d1[bad] : 0, bad >= 0 ? d0[bad] : 0, csbad);
        /* the -128 flag: an engine whose kernels need it (s8 × s8 with VPSIGNB) must set it, and
         * none may clear it; a bare pack leaves the flag and the sums as they were */
        if (e->pack_bare)
            TU_CHECK(f1 == flag_in && !memcmp(cs1, csin, sizeof csin),
                     "%s pack (bare): the -128 flag (%d -> %d) or the column sums changed", name, flag_in, f1);
        else if (!e->u8) TU_CHECK(f1 == f0, "%s pack: -128 flag %d, expected %d (W %s -128)", name, f1, f0, neg ? "has" : "lacks");
        else TU_CHECK(f1 >= flag_in, "%s pack: the -128 flag was cleared", name);
        free(W);
        qmm_aligned_free(d0);
        qmm_aligned_free(d1);
        cases++;
    }
    tu_note("%s: %d packs", name, cases);
}

/* rows kernel fn (named kname) of engine e on the rows of a borrowed weight (pointer and stride), M rows of q,
 * over column ranges of whole blocks */
static void rows_case(const char *name, const qmm_i8_engine *e, const char *kname, qmm_i8_rows_fn fn, int64_t M,
                      int64_t N, int64_t K, int task_ranges, int neg_q) {
    const int64_t Kp = qmm_round_up(K, 64), ld = K + tu_rand_int(0, 2) * tu_rand_int(0, 70), ldy = N + tu_rand_int(0, 3);
    int8_t *q = qmm_aligned_alloc((size_t)(M * Kp));
    memset(q, 0, (size_t)(M * Kp));
    int32_t *qsum = malloc(sizeof(int32_t) * (size_t)M);
    uint8_t *qneg = malloc((size_t)M);
    for (int64_t r = 0; r < M; r++) {
        int32_t sum = 0;
        int m = 0;
        for (int64_t k = 0; k < K; k++) {
            q[r * Kp + k] = (int8_t)tu_rand_int(neg_q ? -128 : -127, 127);
            sum += q[r * Kp + k];
            m |= q[r * Kp + k] == -128;
        }
        qsum[r] = sum;
        qneg[r] = (uint8_t)m;
    }
    int8_t *W = malloc((size_t)((N - 1) * ld + K));
    tu_fill_i8(W, (N - 1) * ld + K, -128, 127);
    int32_t *y = malloc(sizeof(int32_t) * (size_t)(M * ldy)), *y0 = malloc(sizeof(int32_t) * (size_t)(M * ldy));
    float *s = malloc(sizeof(float) * (size_t)M);
    for (int64_t r = 0; r < M; r++) s[r] = 1.0f;
    memset(y, 0xA5, sizeof(int32_t) * (size_t)(M * ldy));
    memcpy(y0, y, sizeof(int32_t) * (size_t)(M * ldy));
    for (int64_t r = 0; r < M; r++)
        for (int64_t n = 0; n < N; n++) {
            uint32_t acc = 0;
            for (int64_t k = 0; k < K; k++) acc += (uint32_t)((int32_t)q[r * Kp + k] * W[n * ld + k]);
            y0[r * ldy + n] = (int32_t)acc;
        }
    qmm_weight w;
    memset(&w, 0, sizeof w);
    w.N = N;
    w.K = K;
    w.borrowed = 1;
    w.borrow.data = W;
    w.borrow.ld = ld;
    w.i8.Np = qmm_round_up(N, 16);
    w.i8.Kp = Kp;
    _Atomic(const char *) bug = NULL;
    const qmm_call c = unit_call(&w, M, y, QMM_I32, ldy, &bug);
    /* the engine's own copy of q, as the driver makes it (int8_gemm.h: rows_ap_bytes/rows_ap_fill) */
    const int64_t apb = e->rows_ap_bytes ? e->rows_ap_bytes(M, Kp) : 0;
    uint8_t *ap = apb ? qmm_aligned_alloc((size_t)apb) : NULL;
    if (ap) {
        for (int64_t r0 = 0, r1; r0 < M; r0 = r1) { /* in ranges of whole groups, as the pre-pass */
            r1 = r0 + 16 * tu_rand_int(1, 2);
            if (r1 > M) r1 = M;
            e->rows_ap_fill(q, Kp, ap, r0, r1);
        }
    }
    /* the kernel's operands: the rows from row n0 on (ld bytes apart), the activations */
    const qmm_rows_act act = {.q = q, .lda = Kp, .M = M, .K = K, .qsum = qsum, .qneg128 = qneg, .ap = ap, .s = s};
    const int64_t nblocks = (N + 15) / 16, bpt = e->nc / 16;
    for (int64_t b0 = 0; b0 < nblocks;) { /* the driver's tasks, or any ranges of whole blocks */
        const int64_t b1 = task_ranges ? b0 + bpt : b0 + tu_rand_int(1, 20);
        const int64_t n0 = b0 * 16, n1 = b1 * 16 < N ? b1 * 16 : N;
        fn(W + n0 * ld, ld, &act, &c, n0, n1);
        b0 = b1;
    }
    const int64_t bad = tu_first_diff(y0, y, QMM_I32, M * ldy);
    TU_CHECK(bad < 0, "%s %s M=%lld N=%lld K=%lld ld=%lld %s%s: y[%lld][%lld] = %d, expected %d", name, kname,
             (long long)M, (long long)N, (long long)K, (long long)ld, task_ranges ? "driver tasks" : "random ranges",
             neg_q ? " q has -128" : "", (long long)(bad / ldy), (long long)(bad % ldy), bad >= 0 ? y[bad] : 0,
             bad >= 0 ? y0[bad] : 0);
    TU_CHECK(!atomic_load(&bug), "%s %s M=%lld: the kernel reported: %s", name, kname, (long long)M, atomic_load(&bug));
    qmm_aligned_free(q);
    qmm_aligned_free(ap);
    free(qsum);
    free(qneg);
    free(W);
    free(y);
    free(y0);
    free(s);
}

static const int64_t g_rows_Ks[] = {1, 3, 32, 63, 64, 65, 100, 256, 1001};

/* the rows regime as the driver runs it: at every M up to rows_m the kernel qmm_i8_rows_kernel_for
 * picks (there is one) */
static void test_rows(const char *name, const qmm_i8_engine *e) {
    if (!e->n_rows_kernels) {
        tu_skip(name, "rows kernels: none");
        return;
    }
    int cases = 0;
    for (int64_t M = 1; M <= e->rows_m; M++) {
        const qmm_i8_rows_fn fn = qmm_i8_rows_kernel_for(e, M);
        if (!TU_CHECK(fn != NULL, "%s: no rows kernel for M=%lld <= rows_m %d", name, (long long)M, e->rows_m)) continue;
        for (int rep = 0; rep < (g_quick ? 2 : 4); rep++) {
            const int64_t N = rep == 0 ? 256 + tu_rand_int(1, 40) : rep == 1 ? 512 : tu_rand_int(1, 300);
            rows_case(name, e, "rows kernel", fn, M, N, g_rows_Ks[tu_rand_int(0, 8)], rep != 3, rep % 2 == 1);
            cases++;
        }
    }
    tu_note("%s: %d rows-kernel calls", name, cases);
}

/* every rows kernel of the engine by name (qmm_i8_engine.rows_kernels, ukernels.h): its ranges
 * disjoint and inside 1..rows_m; then the kernel at every M of its range and at random ones, odd N
 * and K, against the triple loop */
static void test_rows_by_name(const char *name, const qmm_i8_engine *e) {
    for (int i = 0; i < e->n_rows_kernels; i++) {
        const qmm_i8_rows_ukernel *k = &e->rows_kernels[i];
        TU_CHECK(k->name && k->fn && k->m_min >= 1 && k->m_min <= k->m_max && k->m_max <= e->rows_m,
                 "%s rows kernel %d (%s): range [%d, %d] outside 1..rows_m %d", name, i, k->name ? k->name : "?",
                 k->m_min, k->m_max, e->rows_m);
        for (int j = 0; j < i; j++)
            TU_CHECK(k->m_max < e->rows_kernels[j].m_min || k->m_min > e->rows_kernels[j].m_max,
                     "%s: rows kernels %s and %s overlap", name, k->name, e->rows_kernels[j].name);
        int cases = 0;
        /* every M of the range (QMM_TEST_QUICK: every 4th, and the last), then 4 at random */
        const int step = g_quick ? 4 : 1, span = (k->m_max - k->m_min) / step + 1, reps = span + 1 + 4;
        for (int rep = 0; rep < reps; rep++) {
            const int64_t M = rep < span ? k->m_min + rep * step : rep == span ? k->m_max : tu_rand_int(k->m_min, k->m_max);
            const int64_t N = rep % 3 == 0 ? tu_rand_int(1, 47) : rep % 3 == 1 ? 16 * tu_rand_int(1, 20) + tu_rand_int(1, 15)
                                                                : tu_rand_int(1, 400);
            const int64_t K = rep == 2 ? 2 * tu_rand_int(0, 600) + 1 : g_rows_Ks[tu_rand_int(0, 8)];
            rows_case(name, e, k->name, k->fn, M, N, K, rep % 2 == 0, rep == 3);
            cases++;
        }
        tu_note("%s: %s (M %d..%d): %d cases", name, k->name, k->m_min, k->m_max, cases);
    }
}

/* one_pass on an owned weight (n16k4, Kp·16 bytes per block) at M rows, as the driver runs it: the
 * blocks in ranges (the tasks; some ranges left out), in each the tiles of `blocks` blocks that lie
 * inside the weight, each asked for the outputs of its blocks inside the range */
static void one_pass_case(const char *name, const qmm_i8_engine *e, int64_t M, int64_t N, int64_t K) {
    int blocks = 0;
    const int wrows = e->one_pass_rows(M, &blocks);
    const int64_t Kp = qmm_round_up(K, 64), kq = (K + 3) / 4, Np = qmm_round_up(N, 16), ldy = N + tu_rand_int(0, 3);
    const uint8_t flip = e->u8 ? 0x80 : 0;
    int8_t *q = calloc((size_t)(M * Kp), 1);
    uint8_t *ap = qmm_aligned_alloc((size_t)qmm_round_up(kq * wrows * 4, 64));
    for (int64_t r = 0; r < M; r++)
        for (int64_t k = 0; k < K; k++) q[r * Kp + k] = (int8_t)tu_rand_int(-128, 127);
    for (int64_t j = 0; j < kq; j++)
        for (int r = 0; r < wrows; r++)
            for (int b = 0; b < 4; b++)
                ap[(j * wrows + r) * 4 + b] = r < M ? (uint8_t)q[r * Kp + 4 * j + b] ^ flip : flip;
    int8_t *W = malloc((size_t)(N * K)), *data = qmm_aligned_alloc((size_t)(Np * Kp));
    int32_t *colsum = malloc(sizeof(int32_t) * (size_t)Np);
    tu_fill_i8(W, N * K, -128, 127);
    int flag = 0;
    for (int64_t nb = 0; nb < Np / 16; nb++) {
        const int rows = N - 16 * nb < 16 ? (int)(N - 16 * nb) : 16;
        qmm_pack_n16k4_ref(W + 16 * nb * K, K, rows, 0, K, data + nb * Kp * 16, Kp / 4, colsum + 16 * nb, 1, &flag);
    }
    qmm_weight w;
    memset(&w, 0, sizeof w);
    w.N = N;
    w.K = K;
    w.i8 = (qmm_packed_i8){.Np = Np, .Kp = Kp, .data = data, .colsum = colsum};
    int32_t *y = malloc(sizeof(int32_t) * (size_t)(M * ldy)), *y0 = malloc(sizeof(int32_t) * (size_t)(M * ldy));
    int32_t *part = qmm_aligned_alloc(sizeof(int32_t) * (size_t)(e->mc > wrows ? e->mc : wrows) * (size_t)e->nc);
    float *s = malloc(sizeof(float) * (size_t)M);
    for (int64_t r = 0; r < M; r++) s[r] = 1.0f;
    memset(y, 0xA5, sizeof(int32_t) * (size_t)(M * ldy));
    memcpy(y0, y, sizeof(int32_t) * (size_t)(M * ldy));
    _Atomic(const char *) bug = NULL;
    const qmm_call c = unit_call(&w, M, y, QMM_I32, ldy, &bug);
    const int64_t nblocks = Np / 16;
    int64_t asked = 0;
    for (int64_t r0 = 0, r1; r0 < nblocks; r0 = r1) {
        r1 = r0 + (tu_rand_int(0, 1) ? e->nc / 16 : tu_rand_int(1, 20));
        if (r1 > nblocks) r1 = nblocks;
        if (!tu_rand_int(0, 3)) continue; /* a range left out: its outputs stay as they were */
        for (int64_t nb = r0; nb < r1 && nb + blocks <= nblocks; nb += blocks) {
            qmm_i8_tile t;
            memset(&t, 0, sizeof t);
            t.b = data + nb * Kp * 16;
            t.ldb = Kp * 16;
            t.colsum = colsum + nb * 16;
            t.nq = kq;
            t.part = part;
            t.mr = (int)M;
            t.nr = (int)(r1 - nb < blocks ? r1 - nb : blocks);
            t.first = t.last = 1;
            t.n = nb * 16;
            e->one_pass(ap, wrows, s, &c, &t);
            asked += t.nr;
            for (int64_t r = 0; r < M; r++) /* the blocks asked for: the sums */
                for (int64_t n = nb * 16; n < N && n < (nb + t.nr) * 16; n++) {
                    uint32_t acc = 0;
                    for (int64_t k = 0; k < K; k++) acc += (uint32_t)((int32_t)q[r * Kp + k] * W[n * K + k]);
                    y0[r * ldy + n] = (int32_t)acc;
                }
        }
    }
    const int64_t bad = tu_first_diff(y0, y, QMM_I32, M * ldy);
    TU_CHECK(bad < 0,
             "%s one_pass M=%lld (%d rows x %d blocks) N=%lld K=%lld, %lld blocks asked for: y[%lld][%lld] = %d, "
             "expected %d",
             name, (long long)M, wrows, blocks, (long long)N, (long long)K, (long long)asked, (long long)(bad / ldy),
             (long long)(bad % ldy), bad >= 0 ? y[bad] : 0, bad >= 0 ? y0[bad] : 0);
    TU_CHECK(!atomic_load(&bug), "%s one_pass M=%lld: the kernel reported: %s", name, (long long)M, atomic_load(&bug));
    free(q);
    qmm_aligned_free(ap);
    free(W);
    qmm_aligned_free(data);
    free(colsum);
    free(y);
    free(y0);
    qmm_aligned_free(part);
    free(s);
}

static void test_one_pass(const char *name, const qmm_i8_engine *e) {
    if (!e->one_pass_rows) {
        tu_skip(name, "one_pass: none");
        return;
    }
    static const int64_t Ks[] = {1, 5, 64, 65, 256, 1001};
    int cases = 0;
    for (int64_t M = 1; M <= 64; M++) {
        int blocks = 0;
        const int wrows = e->one_pass_rows(M, &blocks);
        if (!wrows) continue;
        if (!TU_CHECK(wrows >= M && blocks >= 1, "%s one_pass_rows(%lld) = %d rows x %d blocks", name, (long long)M,
                      wrows, blocks))
            continue;
        for (int rep = 0; rep < (g_quick ? 1 : 3); rep++) {
            one_pass_case(name, e, M, rep ? tu_rand_int(1, 300) : 16 * tu_rand_int(1, 12), Ks[tu_rand_int(0, 5)]);
            cases++;
        }
    }
    tu_note("%s: %d one-pass calls", name, cases);
}

/* every family of engine e (tu_each_int8_engine) */
static int test_engine(const char *name, const qmm_i8_engine *e) {
    test_tiles(name, e);
    test_pack(name, e);
    test_rows(name, e);
    test_rows_by_name(name, e);
    test_one_pass(name, e);
    return 1;
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_int8_ukernels");
    g_quick = getenv("QMM_TEST_QUICK") != NULL;
    int tested = tu_each_int8_engine(test_engine);
#ifdef QMM_TEST_AMX_EMU
    {
        const uint32_t need = QMM_CPU_AVX512F | QMM_CPU_AVX512BW | QMM_CPU_AVX512VL | QMM_CPU_AVX512DQ;
        const char *name = "amx_int8 (emulated)";
        /* its blocked regime's descriptor: the finalize of a class past every switch point */
        qmm_weight wb;
        memset(&wb, 0, sizeof wb);
        wb.is_int8 = 1;
        wb.i8.Kp = 64;
        const qmm_call cb = {.w = &wb, .M = INT64_MAX};
        /* the emulated objects are built with the AVX-512 flags: none of them runs without it */
        const int cpu = (qmm_cpu_features() & need) == need;
        const qmm_final fb = cpu ? qmm_amx_int8_ops_emu.op[QMM_OP_LINEAR].finalize(&cb, 1) : (qmm_final){NULL, "blocked"};
        const qmm_i8_engine *e = fb.desc;
        TU_CHECK(!strcmp(fb.name, "blocked"), "%s: finalize of M = INT64_MAX gave '%s'", name, fb.name);
        if (!cpu) tu_skip(name, "the emulated build's epilogue is AVX-512; CPU lacks it");
        else if (!TU_CHECK(e != NULL, "%s: no qmm_i8_engine", name)) {
        } else {
            const long f0 = qmm_amx_emu_faults();
            tested += test_engine(name, e);
            TU_CHECK(qmm_amx_emu_faults() == f0 && qmm_amx_emu_live_configs() == 0,
                     "%s: %ld emulated tile faults (%s), %ld tile configurations left", name, qmm_amx_emu_faults() - f0,
                     qmm_amx_emu_first_fault(), qmm_amx_emu_live_configs());
        }
    }
#endif
    tu_note("%d engines' micro-kernels tested", tested);
    return tu_finish();
}
