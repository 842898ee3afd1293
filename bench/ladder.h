/*
 * ladder.h — `qmm bench --amx-ladder` (bench/ladder.c; bench/NOTES.md "## The AMX ladder").
 */
#ifndef QMM_BENCH_LADDER_H
#define QMM_BENCH_LADDER_H

/* Runs the ladder and prints its table; quick: short timings and small shapes (smoke test).
 * Without AMX it prints what is missing and returns 0. Returns 0, or 1 when a rung computed a
 * wrong C or a call failed. */
int qmm_bench_amx_ladder(int quick);

#endif
