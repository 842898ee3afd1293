/*
 * shapes.h — the benchmark shapes of SPEC §8, shared by `qmm bench` and the tests: the default
 * set (the performance targets: the big video-DiT layers at M=4096 and M=256, and the
 * decode-like M=1 / M=16) and every model shape of §8. A shape is one linear layer call:
 * M tokens × (N × K) weight, with its input_act and convrot group.
 */
#ifndef QMM_BENCH_SHAPES_H
#define QMM_BENCH_SHAPES_H

#include "qmm.h"

#include <stddef.h>
#include <stdint.h>

typedef struct qmm_bench_shape {
    const char *name;   /* model layer it stands for */
    int64_t M, N, K;    /* K = GEMM depth (x is 2K wide for swiglu) */
    qmm_act act;
    int gs;             /* convrot group, 0 = none */
} qmm_bench_shape;

/* The performance targets: M=4096 on 21504×5376 g=256 and on 5376×14336 swiglu, M=256 on 5376×5376,
 * M=1 and M=16 on 28672×5376. */
extern const qmm_bench_shape qmm_bench_default_shapes[];
extern const size_t qmm_bench_default_count;
/* Every N×K of SPEC §8 (video DiT, text encoder, Wan, FLUX), with M = 256 (use --shape for others). */
extern const qmm_bench_shape qmm_bench_spec_shapes[];
extern const size_t qmm_bench_spec_count;
/* The tiny shape of --quick (smoke tests). */
extern const qmm_bench_shape qmm_bench_quick_shape;

/* Parses "MxNxK[:swiglu|:gelu][:gN]" (e.g. "4096x21504x5376:g256"); 0 on success. */
int qmm_bench_parse_shape(const char *s, qmm_bench_shape *out);

#endif
