/*
 * ukernels.h — every micro-kernel of the engines on the core drivers, by name (XNNPACK's gemm.h):
 * qmm_<operands>_<family>_ukernel_<tile>__<isa>[_<variant>], qmm_qd8_qc8w = dynamically quantized
 * int8 activations × per-channel int8 weights, c4 = K packed by 4 (n16k4, panel.h). One signature
 * per family (the driver's callback type); each kernel states its preconditions where it is
 * defined (src/engines/<isa>/), and the tests call them by these names (test_int8_ukernels,
 * test_w4a8_ukernels, test_float_engines, test_attn_ukernels). Declarations only: call a kernel only when the CPU
 * has its ISA (its engine is available). The AMX kernels are declared in x86_amx/amx_kernel.h
 * (compiled twice: for the hardware and for the tile emulator).
 *
 * Families:
 *   gemm (int8)   qmm_i8_tile_fn (int8_gemm.h): one tile of the int8 driver, its sums and, on
 *                 the last K chunk, its outputs; <mr>x<16·nrb> the largest tile;
 *   rows (int8)   qmm_i8_rows_fn (int8_gemm.h): the rows regime of a borrowed weight, for the
 *                 M of its name (m<lo>to<hi>), on int8 rows (pointer and stride); each engine
 *                 lists its own in its qmm_i8_engine.rows_kernels with the range;
 *   w4 rows       qmm_w4_rows_fn (int8_gemm.h): the rows regime of a W4A8 / W6A8 weight, fused
 *                 (its codes looked up in the call's decode table as they are multiplied);
 *                 qmm_qd8_w4 / _w6 / _w4w6 = the bit widths it runs; each engine lists its own
 *                 in a qmm_w4_rows_kernels (qmm_i8_engine.w4a8) with the range, the widths and
 *                 whether it needs VBMI (tests/test_w4a8_ukernels);
 *   onepass       avx512_vnni's one-pass register tiles (7 <= M <= 24): rows × 16·blocks
 *                 columns over the whole K, the sums only (avx512_vnni_small.c; its
 *                 qmm_i8_onepass_fn, qmm_vnni_one_pass, adds the outputs);
 *   gemm (float)  qmm_fkernel_fn (float_gemm.h): mr × nr panel tile of the float driver;
 *   attention     the ukernels of an attention engine (attention.h: qmm_attn_pack_kv_fn,
 *                 pack_q, qk, softmax, pv) and each engine's const qmm_attn_ukernels that lists
 *                 them (its attention row's desc); the softmax ukernels are the frame's (core/
 *                 attention_<isa>.c, by SIMD level and P kind), the others the engine's
 *                 (<engine>_attn.c); qmm_f32 = f32 operands, qmm_bf16 = bf16, qmm_qs8 = rotated
 *                 int8 q (+ 128, u8) and k, qmm_qu8_qs8 = u8 P × int8 V; <mr>x<nk> the tile of qk,
 *                 <mr>x<64 of D> that of pv (tests/test_attn_ukernels).
 */
#ifndef QMM_UKERNELS_H
#define QMM_UKERNELS_H

#include "attention.h"
#include "float_gemm.h"
#include "int8_gemm.h"

/* ---------------------------------------------------------------- gemm (int8): qmm_i8_tile_fn */
#define QMM_I8_TILE_ARGS const uint8_t *a, int64_t lda, const float *s, const qmm_call *out, const qmm_i8_tile *t
/* x86_avx512/avx512_vnni_gemm.c: 4 blocks, mr = 1..6 rows (asm, accumulators pinned in zmm0-23) */
void qmm_qd8_qc8w_gemm_ukernel_1x64c4__avx512vnni(QMM_I8_TILE_ARGS);
void qmm_qd8_qc8w_gemm_ukernel_2x64c4__avx512vnni(QMM_I8_TILE_ARGS);
void qmm_qd8_qc8w_gemm_ukernel_3x64c4__avx512vnni(QMM_I8_TILE_ARGS);
void qmm_qd8_qc8w_gemm_ukernel_4x64c4__avx512vnni(QMM_I8_TILE_ARGS);
void qmm_qd8_qc8w_gemm_ukernel_5x64c4__avx512vnni(QMM_I8_TILE_ARGS);
void qmm_qd8_qc8w_gemm_ukernel_6x64c4__avx512vnni(QMM_I8_TILE_ARGS);
/* 1..3 blocks (the last of N), 1..6 rows (C) */
void qmm_qd8_qc8w_gemm_ukernel_6x48c4__avx512vnni(QMM_I8_TILE_ARGS);
/* x86_avx2/avx_vnni.c, avx2_int8.c: 1..4 blocks, one 16-column kernel call per block */
void qmm_qd8_qc8w_gemm_ukernel_6x64c4__avxvnni(QMM_I8_TILE_ARGS);
void qmm_qd8_qc8w_gemm_ukernel_4x64c4__avx2(QMM_I8_TILE_ARGS);
#undef QMM_I8_TILE_ARGS

/* ---------------------------------------------------------------- rows (int8): qmm_i8_rows_fn */
#define QMM_I8_ROWS_ARGS const int8_t *w, int64_t ldw, const qmm_rows_act *a, const qmm_call *out, int64_t n0, int64_t n1
/* x86_avx512/avx512_vnni_rows.c: row dot products (M <= 8: rows_dot, rows_dot2), then W broadcast
 * against the tokens in lanes (lanes_dot: 9..12, bcast_dot: 13..16, groups of 16: 17..64) */
void qmm_qd8_qc8w_rows_ukernel_m1to2__avx512vnni_dot(QMM_I8_ROWS_ARGS);
void qmm_qd8_qc8w_rows_ukernel_m3to8__avx512vnni_dot2(QMM_I8_ROWS_ARGS);
void qmm_qd8_qc8w_rows_ukernel_m9to12__avx512vnni_lanes(QMM_I8_ROWS_ARGS);
void qmm_qd8_qc8w_rows_ukernel_m13to16__avx512vnni_bcast(QMM_I8_ROWS_ARGS);
void qmm_qd8_qc8w_rows_ukernel_m17to64__avx512vnni_bcast(QMM_I8_ROWS_ARGS);
/* x86_avx2/avx2_int8.c: row dot products, one token group (M <= 12), groups of 8 (13..64) */
void qmm_qd8_qc8w_rows_ukernel_m1to12__avx2_dot(QMM_I8_ROWS_ARGS);
void qmm_qd8_qc8w_rows_ukernel_m13to64__avx2_dot(QMM_I8_ROWS_ARGS);
/* x86_avx2/avx_vnni.c: the same with VPDPBUSD ymm (w + 128 against q), one token group (M <= 8) */
void qmm_qd8_qc8w_rows_ukernel_m1to8__avxvnni_dot(QMM_I8_ROWS_ARGS);
/* x86_avx2/avx_vnni_rows.c: the tokens in the lanes of a ymm (9..32), each row's k-quads broadcast */
void qmm_qd8_qc8w_rows_ukernel_m9to32__avxvnni_bcast(QMM_I8_ROWS_ARGS);
#undef QMM_I8_ROWS_ARGS

/* ---------------------------------------------------------------- w4 rows: qmm_w4_rows_fn */
#define QMM_W4_ROWS_ARGS                                                                                           \
    const qmm_w4_codes *w, const int8_t *lut, const int8_t *lut_u8, const qmm_rows_act *a, const qmm_call *out,  \
        int64_t n0, int64_t n1, int8_t *buf, int64_t buf_bytes
/* x86_avx512/avx512_vnni_w4a8.c: 4- and 6-bit weights, each row's codes looked up in the call's
 * decode table and multiplied as they are looked up: row dot products (M <= 8), W broadcast
 * against the tokens in lanes (9..16; 17..64 in groups of 16, the later groups on the looked-up
 * rows kept in buf) */
void qmm_qd8_w4w6_rows_ukernel_m1to8__avx512vnni_fused(QMM_W4_ROWS_ARGS);
void qmm_qd8_w4w6_rows_ukernel_m9to16__avx512vnni_bcast(QMM_W4_ROWS_ARGS);
void qmm_qd8_w4w6_rows_ukernel_m17to64__avx512vnni_groups(QMM_W4_ROWS_ARGS);
/* x86_avx512/avx512_vnni_w4a8_vbmi.c: the same for 6-bit weights only, the codes looked up by
 * VPERMB (AVX512-VBMI) */
void qmm_qd8_w6_rows_ukernel_m1to8__avx512vbmi_fused(QMM_W4_ROWS_ARGS);
void qmm_qd8_w6_rows_ukernel_m9to16__avx512vbmi_bcast(QMM_W4_ROWS_ARGS);
void qmm_qd8_w6_rows_ukernel_m17to64__avx512vbmi_groups(QMM_W4_ROWS_ARGS);
/* x86_avx2/avx2_int8_w4a8.c: 4- and 6-bit weights on avx2_int8, looked up and multiplied without
 * being stored (M <= 8) */
void qmm_qd8_w4w6_rows_ukernel_m1to8__avx2_fused(QMM_W4_ROWS_ARGS);
/* x86_avx2/avx_vnni_w4a8.c: the same on avx_vnni, VPDPBUSD on the table's w + 128 (M <= 8); and
 * at 9..24 tokens the looked-up values' k-quads broadcast against the tokens in the lanes of a
 * ymm (avx_vnni_bcast.h, the engine's token copy) */
void qmm_qd8_w4w6_rows_ukernel_m1to8__avxvnni_fused(QMM_W4_ROWS_ARGS);
void qmm_qd8_w4w6_rows_ukernel_m9to24__avxvnni_bcast(QMM_W4_ROWS_ARGS);
#undef QMM_W4_ROWS_ARGS

/* ---------------------------------------------------------------- onepass (avx512_vnni) */
/* part[i·256 + jb·16 + l] = Σ_q Σ_t ap[q][i][t] · b[jb·ldb + q·64 + l·4 + t] for the tile's rows i,
 * blocks jb, l < 16, over nq quads; u8 × s8, exact int32 (mod 2^32). ap [nq][rows][4] u8; b: n16k4
 * blocks ldb bytes apart, 64-byte aligned. */
typedef void (*qmm_vnni_onepass_fn)(const uint8_t *ap, const int8_t *b, int64_t ldb, int64_t nq, int32_t *part);
void qmm_qd8_qc8w_onepass_ukernel_24x16c4__avx512vnni(const uint8_t *ap, const int8_t *b, int64_t ldb, int64_t nq,
                                                      int32_t *part);
void qmm_qd8_qc8w_onepass_ukernel_20x16c4__avx512vnni(const uint8_t *ap, const int8_t *b, int64_t ldb, int64_t nq,
                                                      int32_t *part);
void qmm_qd8_qc8w_onepass_ukernel_16x16c4__avx512vnni(const uint8_t *ap, const int8_t *b, int64_t ldb, int64_t nq,
                                                      int32_t *part);
void qmm_qd8_qc8w_onepass_ukernel_12x32c4__avx512vnni(const uint8_t *ap, const int8_t *b, int64_t ldb, int64_t nq,
                                                      int32_t *part);
void qmm_qd8_qc8w_onepass_ukernel_8x48c4__avx512vnni(const uint8_t *ap, const int8_t *b, int64_t ldb, int64_t nq,
                                                     int32_t *part);

/* ---------------------------------------------------------------- gemm (float): qmm_fkernel_fn */
void qmm_f32_gemm_ukernel_6x64__avx512f(const qmm_fgemm *g, int rows, int64_t kc, const void *a, const void *b,
                                        float *C, int accumulate);
void qmm_bf16_f32_gemm_ukernel_6x64__avx512bf16(const qmm_fgemm *g, int rows, int64_t kc, const void *a,
                                                const void *b, float *C, int accumulate);
void qmm_f32_gemm_ukernel_6x16__avx2_fma(const qmm_fgemm *g, int rows, int64_t kc, const void *a, const void *b,
                                         float *C, int accumulate);

/* ---------------------------------------------------------------- attention (attention.h) */
/* the frame's softmax ukernels (qmm_attn_softmax_fn): core/avx512/attention_avx512.c (AVX-512 F/BW/VL/DQ,
 * nk a multiple of 16 up to 64), core/avx2/attention_avx2.c (AVX2 + FMA, nk a multiple of 8 up to 64) */
void qmm_attn_softmax_f32__avx512(const qmm_attn_call *c, int rows, const float *S, int64_t nk, int64_t nv,
                                  const void *mask, void *P, float *m, float *l, float *alpha, float *ps);
void qmm_attn_softmax_bf16__avx512(const qmm_attn_call *c, int rows, const float *S, int64_t nk, int64_t nv,
                                   const void *mask, void *P, float *m, float *l, float *alpha, float *ps);
void qmm_attn_softmax_u8__avx512(const qmm_attn_call *c, int rows, const float *S, int64_t nk, int64_t nv,
                                 const void *mask, void *P, float *m, float *l, float *alpha, float *ps);
void qmm_attn_softmax_f32__avx2(const qmm_attn_call *c, int rows, const float *S, int64_t nk, int64_t nv,
                                const void *mask, void *P, float *m, float *l, float *alpha, float *ps);
void qmm_attn_softmax_u8__avx2(const qmm_attn_call *c, int rows, const float *S, int64_t nk, int64_t nv,
                               const void *mask, void *P, float *m, float *l, float *alpha, float *ps);

/* x86_avx512/avx512_f32_attn.c: f32 K [D][64] and V [64][Dp] blocks, FMA */
extern const qmm_attn_ukernels qmm_avx512_f32_attn;
void qmm_f32_attn_pack_kv__avx512f(const qmm_attn_call *c, const void *k, const void *v, const uint8_t *live, void *kv);
void qmm_f32_attn_pack_q__avx512f(const qmm_attn_call *c, const void *q, void *Q, float *sq);
void qmm_f32_attn_qk_ukernel_6x64__avx512f(int rows, const void *Q, const float *sq, const void *kblk, int64_t D,
                                           float *S);
void qmm_f32_attn_pv_ukernel_6x64__avx512f(int rows, const void *P, const float *ps, const float *alpha,
                                           const void *vblk, int64_t D, float *O, void *ws);
/* x86_avx512/avx512_bf16_attn.c: bf16 K [Dp/2][64][2] and V [32][Dp][2] blocks, VDPBF16PS */
extern const qmm_attn_ukernels qmm_avx512_bf16_attn;
void qmm_bf16_attn_pack_kv__avx512bf16(const qmm_attn_call *c, const void *k, const void *v, const uint8_t *live, void *kv);
void qmm_bf16_attn_pack_q__avx512bf16(const qmm_attn_call *c, const void *q, void *Q, float *sq);
void qmm_bf16_attn_qk_ukernel_6x64__avx512bf16(int rows, const void *Q, const float *sq, const void *kblk, int64_t D,
                                               float *S);
void qmm_bf16_attn_pv_ukernel_6x64__avx512bf16(int rows, const void *P, const float *ps, const float *alpha,
                                               const void *vblk, int64_t D, float *O, void *ws);
/* x86_avx512/avx512_vnni_attn.c (mode int8): rotated int8 K [Dq/4][64][4] with key sums and
 * scales, int8 V [16][Dp][4] with channel scales, VPDPBUSD */
extern const qmm_attn_ukernels qmm_avx512_vnni_attn;
void qmm_qs8_attn_pack_kv__avx512vnni(const qmm_attn_call *c, const void *k, const void *v, const uint8_t *live, void *kv);
void qmm_qs8_attn_pack_q__avx512vnni(const qmm_attn_call *c, const void *q, void *Q, float *sq);
void qmm_qs8_attn_qk_ukernel_6x64c4__avx512vnni(int rows, const void *Q, const float *sq, const void *kblk, int64_t D,
                                                float *S);
void qmm_qu8_qs8_attn_pv_ukernel_6x64c4__avx512vnni(int rows, const void *P, const float *ps, const float *alpha,
                                                    const void *vblk, int64_t D, float *O, void *ws);
/* x86_avx2/avx2_f32_attn.c: f32 K [D][32] and V [32][Dp] blocks (Dp = D rounded up to 8), FMA ymm */
extern const qmm_attn_ukernels qmm_avx2_f32_attn;
void qmm_f32_attn_pack_kv__avx2_fma(const qmm_attn_call *c, const void *k, const void *v, const uint8_t *live, void *kv);
void qmm_f32_attn_pack_q__avx2_fma(const qmm_attn_call *c, const void *q, void *Q, float *sq);
void qmm_f32_attn_qk_ukernel_6x32__avx2_fma(int rows, const void *Q, const float *sq, const void *kblk, int64_t D,
                                            float *S);
void qmm_f32_attn_pv_ukernel_6x16__avx2_fma(int rows, const void *P, const float *ps, const float *alpha,
                                            const void *vblk, int64_t D, float *O, void *ws);
/* x86_avx2/avx_vnni_attn.c (mode int8): rotated int8 K [Dq/4][32][4] with key sums and scales,
 * int8 V [8][Dp][4] with channel scales (Dp = D rounded up to 8), VPDPBUSD ymm */
extern const qmm_attn_ukernels qmm_avx_vnni_attn;
void qmm_qs8_attn_pack_kv__avxvnni(const qmm_attn_call *c, const void *k, const void *v, const uint8_t *live, void *kv);
void qmm_qs8_attn_pack_q__avxvnni(const qmm_attn_call *c, const void *q, void *Q, float *sq);
void qmm_qs8_attn_qk_ukernel_6x32c4__avxvnni(int rows, const void *Q, const float *sq, const void *kblk, int64_t D,
                                             float *S);
void qmm_qu8_qs8_attn_pv_ukernel_6x16c4__avxvnni(int rows, const void *P, const float *ps, const float *alpha,
                                                 const void *vblk, int64_t D, float *O, void *ws);

#endif /* QMM_UKERNELS_H */
