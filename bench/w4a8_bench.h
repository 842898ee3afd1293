/*
 * w4a8_bench.h — `qmm bench --w4a8` (bench/w4a8_bench.c; bench/NOTES.md "## W4A8 speed").
 */
#ifndef QMM_BENCH_W4A8_H
#define QMM_BENCH_W4A8_H

/* Parses its options (argv[0] is "--w4a8"), runs and prints the table. Returns 0, 2 on bad
 * options, 1 when a call failed. */
int qmm_bench_w4a8(int argc, char **argv);

#endif
