/*
 * test_w4a8_ukernels.c — the W4A8 family's kernels as units, outside the driver: every kernel of
 * every int8 engine's W4A8 family (qmm_i8_engine.w4a8: qmm_w4_rows_ukernel, by name) against a
 * scalar reference on the same bytes. An engine this CPU (or QMM_MAX_ISA) does not allow, an int8
 * engine without a core-driver descriptor or without a W4A8 family, and a kernel that needs
 * AVX512-VBMI on a CPU without it are listed as skipped.
 *   family     each kernel's name, function, range (inside 1..rows_m) and bit widths are set;
 *              for every M in 1..64 and both widths, qmm_i8_w4a8_kernel_for (with and without
 *              VBMI) picks a kernel whose range holds M and that runs the width, or none;
 *   kernels    each kernel for each width it runs (4 and 6 bits), at M = its range's ends and
 *              random M inside it (every M unless QMM_TEST_QUICK), on random codes, e4m3 group
 *              scales (groups of 16, 32, 48, 64, 128 dividing K; K from one group to past 2048)
 *              and a codebook or none (4 bits), q with and without -128, and random N (odd, the
 *              last block partial); the columns in the driver's per-thread shares or in random
 *              ranges of whole blocks, a buffer as the driver gives (qmm_w4a8_rows_step rows of
 *              Kp), the engine's token copy where it makes one (rows_ap_fill). Expected: the
 *              exact int32 Σ q·W (W = qmm_w4a8_at, the definition) through the scalar epilogue
 *              (qmm_epilogue_store_ref), bit for bit, for every output the kernels write: I32,
 *              and f32 / f16 / bf16 with the fused or kitchen epilogue, with or without bias,
 *              with or without a residual; nothing else of y written; no qmm_call_bug.
 * Seeded (testutil.h): QMM_SEED=N or the first argument replays a run; QMM_TEST_QUICK=1 runs
 * fewer cases.
 */
#include "epilogue.h"
#include "int8_gemm.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static int g_quick;

/* a random e4m3 byte that is not NaN (0x7f, 0xff) */
static uint8_t rand_e4m3(void) {
    const int b = (int)tu_rand_int(0, 253);
    return (uint8_t)(b >= 0x7f ? b + 1 : b);
}

/* One case: kernel k of engine e on a weight of `bits` bits with N rows of K (groups of group), M
 * tokens (neg_q: q may hold -128), output dtype yt (epi, bias, residual), columns in the driver's
 * shares (shares) or in random ranges. */
static void kernel_case(const char *name, const qmm_i8_engine *e, const qmm_w4_rows_ukernel *k, int bits, int64_t M,
                        int64_t N, int64_t K, int group, int codebook, int neg_q, qmm_dtype yt, qmm_epilogue epi,
                        int bias_on, int residual_on, int shares) {
    const int64_t Kp = qmm_round_up(K, 64), G = K / group, row_bytes = K / 8 * bits;
    const int64_t ldy = N + tu_rand_int(0, 3), ldr = N + tu_rand_int(0, 2), ysz = qmm_dtype_size(yt);
    /* the weight: codes, group scales, codebook (exactly their bytes: ASan sees any read past) */
    uint8_t *codes = malloc((size_t)(N * row_bytes)), *s_rel = malloc((size_t)(N * G));
    for (int64_t i = 0; i < N * row_bytes; i++) codes[i] = (uint8_t)tu_rand_int(0, 255);
    for (int64_t i = 0; i < N * G; i++) s_rel[i] = rand_e4m3();
    float cb[16];
    for (int c = 0; c < 16; c++) cb[c] = (float)tu_rand_int(-80, 80) / 10.0f;
    float *scale = malloc(sizeof(float) * (size_t)N), *bias = malloc(sizeof(float) * (size_t)N);
    for (int64_t n = 0; n < N; n++) {
        scale[n] = (float)tu_rand_int(1, 1 << 20) / (float)(1 << 27);
        bias[n] = tu_rand_normal();
    }
    qmm_weight w;
    memset(&w, 0, sizeof w);
    w.N = N;
    w.K = K;
    w.borrowed = 1;
    w.w4a8 = 1;
    w.w4.codes = codes;
    w.w4.row_bytes = row_bytes;
    w.w4.bits = bits;
    w.w4.s_rel = s_rel;
    w.w4.s_rel_dtype = QMM_F8_E4M3;
    w.w4.group = group;
    w.w4.codebook = codebook && bits == 4 ? cb : NULL;
    w.scale = scale;
    w.bias = bias_on ? bias : NULL;
    w.i8.Np = qmm_round_up(N, 16);
    w.i8.Kp = Kp;
    /* the call's decode table and its u8 form, as the driver makes them */
    int8_t *lut = qmm_aligned_alloc(QMM_W4A8_LUT_BYTES), *lut_u8 = qmm_aligned_alloc(QMM_W4A8_LUT_BYTES);
    qmm_w4a8_lut_fill(&w, lut);
    for (int64_t i = 0; i < ((int64_t)256 << bits); i++) lut_u8[i] = (int8_t)(lut[i] ^ (int8_t)0x80);
    /* the activations: q [M][Kp] (zero past K), its row sums and -128 flags, token scales */
    int8_t *q = qmm_aligned_alloc((size_t)(M * Kp));
    memset(q, 0, (size_t)(M * Kp));
    int32_t *qsum = malloc(sizeof(int32_t) * (size_t)M);
    uint8_t *qneg = malloc((size_t)M);
    float *s = malloc(sizeof(float) * (size_t)M);
    for (int64_t r = 0; r < M; r++) {
        int32_t sum = 0;
        int m = 0;
        for (int64_t kk = 0; kk < K; kk++) {
            q[r * Kp + kk] = (int8_t)tu_rand_int(neg_q && tu_rand_int(0, 15) == 0 ? -128 : -127, 127);
            sum += q[r * Kp + kk];
            m |= q[r * Kp + kk] == -128;
        }
        qsum[r] = sum;
        qneg[r] = (uint8_t)m;
        s[r] = (float)tu_rand_int(1, 1000) / 4096.0f;
    }
    /* the token copy, as the driver makes it (rows_ap_bytes; the family's ap_fill, else rows_ap_fill) */
    const int64_t apb = e->rows_ap_bytes ? e->rows_ap_bytes(M, Kp) : 0;
    uint8_t *ap = apb ? qmm_aligned_alloc((size_t)apb) : NULL;
    if (ap) {
        for (int64_t r0 = 0; r0 < M; r0 += 16) {
            const int64_t r1 = r0 + 16 < M ? r0 + 16 : M;
            if (e->w4a8->ap_fill) e->w4a8->ap_fill(q, Kp, ap, r0, r1);
            else e->rows_ap_fill(q, Kp, ap, r0, r1);
        }
    }
    /* y and the expected y0 (same fill), a residual of y's dtype */
    void *y = malloc((size_t)(M * ldy * ysz)), *y0 = malloc((size_t)(M * ldy * ysz));
    memset(y, 0xA5, (size_t)(M * ldy * ysz));
    memcpy(y0, y, (size_t)(M * ldy * ysz));
    void *res = residual_on ? malloc((size_t)(M * ldr * ysz)) : NULL, *rs = residual_on ? malloc((size_t)(N * ysz)) : NULL;
    if (res) {
        tu_fill_float(res, yt, M * ldr, 1.0f);
        tu_fill_float(rs, yt, N, 1.0f);
    }
    _Atomic(const char *) bug = NULL;
    const qmm_call c = {.w = &w, .M = M, .N = N, .K = K, .y = y, .y_dtype = yt, .ldy = ldy, .epilogue = epi,
                        .residual = res, .ldr = ldr, .residual_scale = rs, .bug = &bug};
    qmm_call c0 = c;
    c0.y = y0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < M; i++) {
            uint32_t acc = 0;
            for (int64_t kk = 0; kk < K; kk++) acc += (uint32_t)((int32_t)q[i * Kp + kk] * qmm_w4a8_at(&w, n, kk));
            qmm_epilogue_store_ref(&c0, (int32_t)acc, i, n, s[i]);
        }
    /* the kernel on its operands, over the columns in ranges of whole blocks */
    const qmm_w4_codes wc = qmm_w4_codes_of(&w);
    const qmm_rows_act act = {.q = q, .lda = Kp, .M = M, .K = K, .qsum = qsum, .qneg128 = qneg, .ap = ap, .s = s};
    const int64_t buf_bytes = qmm_w4a8_rows_step(Kp) * Kp, nblocks = (N + 15) / 16;
    int8_t *buf = qmm_aligned_alloc((size_t)buf_bytes);
    const int64_t T = tu_rand_int(1, 4); /* the driver's shares: T threads */
    for (int64_t t = 0, b0 = 0; b0 < nblocks; t++) {
        const int64_t b1 = shares ? nblocks * (t + 1) / T : b0 + tu_rand_int(1, 12);
        const int64_t n0 = b0 * 16, n1 = b1 * 16 < N ? b1 * 16 : N;
        k->fn(&wc, lut, lut_u8, &act, &c, n0, n1, buf, buf_bytes);
        b0 = b1;
    }
    const int64_t bad = tu_first_diff(y0, y, yt, M * ldy);
    TU_CHECK(bad < 0,
             "%s %s w%d M=%lld N=%lld K=%lld group=%d%s%s y %s epi %d%s%s %s: y[%lld][%lld] = %g, expected %g", name,
             k->name, bits, (long long)M, (long long)N, (long long)K, group, w.w4.codebook ? " codebook" : "",
             neg_q ? " q may hold -128" : "", qmm_dtype_name(yt), (int)epi, bias_on ? " bias" : "",
             residual_on ? " residual" : "", shares ? "driver shares" : "random ranges", (long long)(bad / ldy),
             (long long)(bad % ldy), bad >= 0 ? (double)tu_load(y, yt, bad) : 0.0,
             bad >= 0 ? (double)tu_load(y0, yt, bad) : 0.0);
    TU_CHECK(!atomic_load(&bug), "%s %s M=%lld: the kernel reported: %s", name, k->name, (long long)M,
             atomic_load(&bug));
    free(codes);
    free(s_rel);
    free(scale);
    free(bias);
    qmm_aligned_free(lut);
    qmm_aligned_free(lut_u8);
    qmm_aligned_free(q);
    free(qsum);
    free(qneg);
    free(s);
    qmm_aligned_free(ap);
    free(y);
    free(y0);
    free(res);
    free(rs);
    qmm_aligned_free(buf);
}

/* a random case of kernel k at M tokens, bits bits */
static void random_case(const char *name, const qmm_i8_engine *e, const qmm_w4_rows_ukernel *k, int bits, int64_t M) {
    static const int groups[] = {16, 32, 48, 64, 128};
    static const qmm_dtype yts[] = {QMM_I32, QMM_F32, QMM_F16, QMM_BF16};
    const int group = groups[tu_rand_int(0, 4)];
    const int64_t unit = bits == 6 ? (group % 32 ? 2 * group : group) : group; /* 6 bits: K a multiple of 32 */
    const int64_t K = tu_rand_int(0, 7) == 0 ? (2048 / unit + tu_rand_int(1, 2)) * unit : unit * tu_rand_int(1, 1100 / unit > 1 ? 1100 / unit : 1);
    const int64_t N = tu_rand_int(0, 2) ? tu_rand_int(1, 40) : 16 * tu_rand_int(2, 24) + tu_rand_int(-15, 15);
    const qmm_dtype yt = yts[tu_rand_int(0, 3)];
    const int fl = yt != QMM_I32;
    kernel_case(name, e, k, bits, M, N, K, group, (int)tu_rand_int(0, 1), tu_rand_int(0, 3) == 0, yt,
                fl && tu_rand_int(0, 1) ? QMM_EPILOGUE_KITCHEN : QMM_EPILOGUE_FUSED, fl && tu_rand_int(0, 1),
                fl && tu_rand_int(0, 2) == 0, (int)tu_rand_int(0, 1));
}

/* the family's table and the kernel the driver picks for every M and width */
static void test_family(const char *name, const qmm_i8_engine *e) {
    const qmm_w4_rows_kernels *f = e->w4a8;
    for (int i = 0; i < f->n; i++) {
        const qmm_w4_rows_ukernel *k = &f->k[i];
        TU_CHECK(k->name && k->fn && k->m_min >= 1 && k->m_min <= k->m_max && k->m_max <= e->rows_m &&
                     (k->bits & (QMM_W4_BITS4 | QMM_W4_BITS6)) && !(k->bits & ~(QMM_W4_BITS4 | QMM_W4_BITS6)),
                 "%s W4A8 kernel %d (%s): range [%d, %d] outside 1..rows_m %d, or bits %d", name, i,
                 k->name ? k->name : "?", k->m_min, k->m_max, e->rows_m, k->bits);
    }
    for (int64_t M = 1; M <= 64; M++)
        for (int bits = 4; bits <= 6; bits += 2)
            for (int vbmi = 0; vbmi <= 1; vbmi++) {
                const qmm_w4_rows_ukernel *k = qmm_i8_w4a8_kernel_for(e, M, bits, vbmi);
                if (!k) continue;
                TU_CHECK(M >= k->m_min && M <= k->m_max && (k->bits & (bits == 6 ? QMM_W4_BITS6 : QMM_W4_BITS4)) &&
                             (vbmi || !k->vbmi),
                         "%s: qmm_i8_w4a8_kernel_for(M=%lld, %d bits, vbmi %d) picked %s [%d, %d] bits %d vbmi %d",
                         name, (long long)M, bits, vbmi, k->name, k->m_min, k->m_max, k->bits, k->vbmi);
            }
}

static void test_kernels(const char *name, const qmm_i8_engine *e) {
    const int have_vbmi = (qmm_cpu_features() & QMM_CPU_AVX512_VBMI) != 0;
    int cases = 0;
    for (int i = 0; i < e->w4a8->n; i++) {
        const qmm_w4_rows_ukernel *k = &e->w4a8->k[i];
        if (k->vbmi && !have_vbmi) {
            tu_skip(k->name, "needs AVX512-VBMI; the CPU lacks it");
            continue;
        }
        for (int bits = 4; bits <= 6; bits += 2) {
            if (!(k->bits & (bits == 6 ? QMM_W4_BITS6 : QMM_W4_BITS4))) continue;
            for (int64_t M = k->m_min; M <= k->m_max; M++) {
                const int ends = M == k->m_min || M == k->m_max;
                if (g_quick && !ends && tu_rand_int(0, 3)) continue;
                for (int rep = 0; rep < (ends ? 3 : 1); rep++, cases++) random_case(name, e, k, bits, M);
            }
        }
    }
    tu_note("%s: %d W4A8 kernel calls", name, cases);
}

/* the W4A8 family of engine e (tu_each_int8_engine): 1, or 0 where it has none */
static int test_engine(const char *name, const qmm_i8_engine *e) {
    if (!e->w4a8 || !e->w4a8->n) {
        tu_skip(name, "no W4A8 family (qmm_i8_engine.w4a8)");
        return 0;
    }
    test_family(name, e);
    test_kernels(name, e);
    return 1;
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_w4a8_ukernels");
    g_quick = getenv("QMM_TEST_QUICK") != NULL;
    const int tested = tu_each_int8_engine(test_engine);
    tu_note("%d engines' W4A8 kernels tested", tested);
    return tu_finish();
}
