/*
 * peak.h — what the machine can do, measured in the same run as the kernels it judges:
 * register-only loops of each engine's core instruction on T pinned threads at once (no memory
 * traffic: the ceiling an engine's kernel is compared with), and the DRAM read bandwidth of a
 * streaming read over a buffer much larger than the last-level cache on T threads.
 */
#ifndef QMM_BENCH_PEAK_H
#define QMM_BENCH_PEAK_H

#include "qmm.h"

#include <stddef.h>

/* Peak of engine e's core instruction in T ops/s (int8 ops or flops; a multiply-add counts 2)
 * on `threads` threads pinned to CPUs 0..threads-1; `seconds` of loop per measurement (best of
 * 3). Returns 0 and writes why when this CPU/build cannot run it. What is measured:
 *   amx_int8 TDPBSSD · avx512_vnni VPDPBUSD zmm · avx_vnni VPDPBUSD ymm ·
 *   avx2_int8 VPSIGNB+VPMADDUBSW+VPMADDWD+VPADDD ymm (the exact sequence of that engine) ·
 *   amx_bf16 TDPBF16PS · avx512_bf16 VDPBF16PS zmm · avx512_f32 FMA zmm · avx2_f32 FMA ymm. */
double qmm_peak_tops(qmm_engine_id e, int threads, double seconds, char *why, size_t why_size);
/* The same loop judged by CPU time instead of wall time: Σ over threads of ops / thread CPU
 * seconds (best of 3) — what the threads reach while they run, robust to a machine shared
 * with other processes (a descheduled thread's time is not counted). 0 if unavailable. */
double qmm_peak_tops_cpu(qmm_engine_id e, int threads, double seconds);
const char *qmm_peak_instruction(qmm_engine_id e);

/* DRAM read bandwidth in GB/s (1e9 bytes/s): `threads` pinned threads each stream-read their
 * share of a `bytes` buffer (touched first); best of `reps`. */
double qmm_dram_read_gbps(int threads, size_t bytes, int reps);

/* Last-level cache size in bytes (sysconf, 32 MiB if unknown). */
size_t qmm_llc_bytes(void);

/* Monotonic seconds; CPU seconds of this process (all threads). */
double qmm_now(void);
double qmm_process_cpu(void);

#endif
