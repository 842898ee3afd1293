/*
 * amx_kernel.h — what the two AMX engines (amx_int8.c: TDPBSSD, amx_bf16.c: TDPBF16PS) share:
 * the tile instructions behind macros, the tile register plan and the per-thread tile
 * configuration.
 *
 * One source, two builds:
 *   normal build  the macros are the real AMX instructions (compiled with -mamx-tile
 *                 -mamx-int8 -mamx-bf16 + AVX-512); the engines are registered as
 *                 qmm_amx_int8_ops / qmm_amx_bf16_ops. Without compiler support for AMX
 *                 (QMM_NO_AMX_BUILD) the kernels are left out and the engines say .built = 0.
 *   -DQMM_AMX_EMULATE  every tile instruction calls the software model of amx_emu.c (Intel SDM
 *                 semantics, faults counted), and every external symbol gets the suffix _emu
 *                 (qmm_amx_int8_ops_emu, ...), so the test executable tests/test_amx_emulated
 *                 links these copies beside the library. They are never registered for dispatch.
 *
 * Verification: the real build ran its tests on an AMX machine at d9c1ae0 (CTest green there:
 * ../shared/measurements/AMX-d9c1ae0.md); on machines without AMX the execution evidence is the
 * emulated build (test_amx_emulated, test_int8_ukernels, fuzz_corpus_engines_amx_emu), and the
 * real build is checked by compiling it (tests/isa/check_isa.sh reads its tile instructions).
 *
 * Tile register plan (both engines; the "2×2" scheme: one tile load per dot-product op):
 *   tmm0 tmm1  C of rows [m0, m0+16)    × column blocks nb, nb+1   (colsb 64, rows r0)
 *   tmm2 tmm3  C of rows [m0+16, m0+32) × column blocks nb, nb+1   (colsb 64, rows r1)
 *   tmm4 tmm5  A of rows [m0, m0+16) and [m0+16, m0+32)           (colsb 64, rows r0 / r1)
 *   tmm6 tmm7  B of column blocks nb and nb+1                       (colsb 64, rows 16)
 * r0 = min(16, rows left), r1 = min(16, rows left - 16) (0: tmm2, tmm3, tmm5 unconfigured).
 * Rows of a partial M panel are handled by a partial configuration, never by padding.
 * amx_int8 runs this plan as a micro-kernel under the core int8 driver (int8_gemm.h: B = the
 * n16k4 blocks of the weight panel, owned or packed per call). amx_bf16 runs it as a micro-kernel
 * of the float GEMM driver (float_gemm.h) with the operands' roles swapped: A = 16 widened W rows
 * per tile, B = 16 tokens of the driver's 32-row bf16 panel, C = [W rows][tokens], every tile
 * 16 × 64 (configured once per thread and call, by the driver's begin hook).
 */
#ifndef QMM_AMX_KERNEL_H
#define QMM_AMX_KERNEL_H

#include "amx_blocking.h"
#include "amx_regime.h"
#include "qmm_internal.h"

#if defined(QMM_AMX_EMULATE) || !defined(QMM_NO_AMX_BUILD)
#define QMM_AMX_KERNELS 1
#define QMM_AMX_BUILT 1 /* the engines' .built */
#else
#define QMM_AMX_BUILT 0
#endif

/* QMM_AMX_SYM (the _emu suffix), the blocking in force (qmm_amx_blocking_now), the engines'
 * descriptors per call class: amx_regime.h. */

/* The tile register plan (plain macros: the gcc intrinsics stringify the tile number). */
#define QMM_TC00 0
#define QMM_TC01 1
#define QMM_TC10 2
#define QMM_TC11 3
#define QMM_TA0 4
#define QMM_TA1 5
#define QMM_TB0 6
#define QMM_TB1 7

/* The 64-byte LDTILECFG operand (Intel SDM vol. 2, LDTILECFG: palette 1). */
typedef struct qmm_amx_cfg {
    uint8_t palette;       /* 1 */
    uint8_t start_row;     /* 0 */
    uint8_t reserved[14];  /* 0 */
    uint16_t colsb[16];    /* bytes per row of tile i (0 for an unused tile) */
    uint8_t rows[16];      /* rows of tile i (0 for an unused tile) */
} qmm_amx_cfg;

/* The ladder of amx_ladder.c (qmm_engine.probe of amx_int8): rung names and the probe. */
#ifndef QMM_AMX_LADDER_RUNGS
#define QMM_AMX_LADDER_RUNGS 12 /* amx_emu.h says the same */
#endif
extern const char *const QMM_AMX_SYM(qmm_amx_ladder_names)[QMM_AMX_LADDER_RUNGS];
qmm_status QMM_AMX_SYM(qmm_amx_ladder_probe)(int rung, int64_t reps, int small, void (*ready)(void *), void *arg,
                                             qmm_probe_result *res);

#ifdef QMM_AMX_KERNELS

#include <immintrin.h>

#ifdef QMM_AMX_EMULATE
#include "amx_emu.h"
#define QMM_TILE_LOADCONFIG(cfg) qmm_amx_emu_loadconfig(cfg)
#define QMM_TILE_RELEASE() qmm_amx_emu_release()
#define QMM_TILE_LOAD(t, p, stride) qmm_amx_emu_load((t), (p), (size_t)(stride))
#define QMM_TILE_STORE(t, p, stride) qmm_amx_emu_store((t), (p), (size_t)(stride))
#define QMM_TILE_ZERO(t) qmm_amx_emu_zero(t)
#define QMM_TDPBSSD(c, a, b) qmm_amx_emu_dpbssd((c), (a), (b))
#define QMM_TDPBUSD(c, a, b) qmm_amx_emu_dpbusd((c), (a), (b))
#define QMM_TDPBF16PS(c, a, b) qmm_amx_emu_dpbf16ps((c), (a), (b))
#define QMM_AMX_PREFETCH_T1(p) qmm_amx_emu_prefetch(p)
#define QMM_TILE_LOAD_T1(t, p, stride) qmm_amx_emu_load_t1((t), (p), (size_t)(stride))
#else
/* A compiler barrier: gcc's tileloadd asm declares no memory input, so buffers written by C
 * code just before (the widened B block, ...) must be forced to memory first. */
#define QMM_AMX_MEMBAR() __asm__ volatile("" ::: "memory")
/* Our own LDTILECFG with a memory operand of the whole 64-byte config: gcc 12's
 * _tile_loadconfig declares an 8-byte operand, and stores to a stack config have been seen
 * eliminated (→ SIGILL). The config lives in thread-local storage as well (amx_common.c). */
#define QMM_TILE_LOADCONFIG(cfg) __asm__ volatile("ldtilecfg %0" ::"m"(*(const qmm_amx_cfg *)(cfg)) : "memory")
#define QMM_TILE_RELEASE() _tile_release()
#define QMM_TILE_LOAD(t, p, stride) \
    do { QMM_AMX_MEMBAR(); _tile_loadd(t, (p), (long)(stride)); } while (0)
#define QMM_TILE_STORE(t, p, stride) \
    do { _tile_stored(t, (p), (long)(stride)); QMM_AMX_MEMBAR(); } while (0)
/* TILELOADDT1: the load with a hint that the data is not reused from L1 (streamed) */
#define QMM_TILE_LOAD_T1(t, p, stride) \
    do { QMM_AMX_MEMBAR(); _tile_stream_loadd(t, (p), (long)(stride)); } while (0)
#define QMM_TILE_ZERO(t) _tile_zero(t)
#define QMM_TDPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#define QMM_TDPBUSD(c, a, b) _tile_dpbusd(c, a, b)
#define QMM_TDPBF16PS(c, a, b) _tile_dpbf16ps(c, a, b)
#define QMM_AMX_PREFETCH_T1(p) _mm_prefetch((const char *)(p), _MM_HINT_T1)
#endif

/* amx_int8's micro-kernel (amx_int8.c): the flags, and the kernel itself (used by the int8
 * driver's tile callback, the emulated kernel test and the ladder of amx_ladder.c). */
enum { QMM_AMX_UK_STREAM = 1, QMM_AMX_UK_A_T1 = 2 };
void QMM_AMX_SYM(qmm_qd8_qc8w_gemm_ukernel_32x32c4__amx)(int mr, int nr, int64_t nq, const int8_t *a, int64_t lda,
                                                        const int8_t *b, int64_t ldb, int32_t *c, int64_t ldc,
                                                        int first, int flags, const void *pf);

/* Configures this thread's tiles for an M panel of r0 + r1 rows (1 <= r0 <= 16, 0 <= r1 <=
 * 16, r1 > 0 only if r0 == 16); loads the config only when it differs from the current one. */
void QMM_AMX_SYM(qmm_amx_tiles_config)(int r0, int r1);
/* Releases this thread's tile state (TILERELEASE) if configured: at the end of a thread's work
 * (the end hook of either driver, after the thread's last task of a pool run). */
void QMM_AMX_SYM(qmm_amx_tiles_release)(void);

/* amx_bf16's attention (amx_bf16_attn.c; attention.h's contract): its descriptor (the desc of the
 * engine's attention row; begin / end configure and release the tiles) and its ukernels, 16 query
 * rows × 64 keys (qk) and 16 rows × 64 of D (pv) on bf16 tiles, called between begin and end. */
struct qmm_attn_ukernels;
extern const struct qmm_attn_ukernels QMM_AMX_SYM(qmm_amx_bf16_attn);
void QMM_AMX_SYM(qmm_bf16_attn_pack_kv__amx)(const qmm_attn_call *c, const void *k, const void *v, const uint8_t *live,
                                             void *kv);
void QMM_AMX_SYM(qmm_bf16_attn_pack_q__amx)(const qmm_attn_call *c, const void *q, void *Q, float *sq);
void QMM_AMX_SYM(qmm_bf16_attn_qk_ukernel_16x64__amx)(int rows, const void *Q, const float *sq, const void *kblk,
                                                      int64_t D, float *S);
void QMM_AMX_SYM(qmm_bf16_attn_pv_ukernel_16x64__amx)(int rows, const void *P, const float *ps, const float *alpha,
                                                      const void *vblk, int64_t D, float *O, void *ws);

/* amx_int8's attention (amx_int8_attn.c): mode int8 on avx512_vnni's operands, 16 query rows ×
 * 64 keys (qk) and 16 rows × 64 of D (pv) on TDPBUSD, called between begin and end. */
extern const struct qmm_attn_ukernels QMM_AMX_SYM(qmm_amx_int8_attn);
void QMM_AMX_SYM(qmm_qs8_attn_qk_ukernel_16x64c4__amx)(int rows, const void *Q, const float *sq, const void *kblk,
                                                       int64_t D, float *S);
void QMM_AMX_SYM(qmm_qu8_qs8_attn_pv_ukernel_16x64c4__amx)(int rows, const void *P, const float *ps,
                                                           const float *alpha, const void *vblk, int64_t D, float *O,
                                                           void *ws);

#endif /* QMM_AMX_KERNELS */

/* amx_int8's attention admit (amx_int8_attn.c: plain, built either way): mode int8 only */
const char *QMM_AMX_SYM(qmm_amx_int8_attn_admit)(const void *call, char *why, size_t n);
/* amx_bf16's attention admit (amx_bf16_attn.c: plain, built either way) */
const char *QMM_AMX_SYM(qmm_amx_bf16_attn_admit)(const void *call, char *why, size_t n);
#endif /* QMM_AMX_KERNEL_H */
