/*
 * peak.c — register-only peak loops and the DRAM read bandwidth (see peak.h). The library's
 * build flags do not reach bench/, so each per-ISA loop is a function with its own
 * __attribute__((target(...))), called only when qmm_cpu_features() says the CPU has the ISA.
 * Each loop is one asm statement (the compiler can neither spill nor hoist it) with 12
 * independent accumulators, more than latency × throughput of every instruction here.
 */
#define _GNU_SOURCE
#include "peak.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double qmm_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double qmm_process_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The last-level cache: sysfs first (what the kernel was told), then sysconf — glibc derives the
 * latter from CPUID, which some hypervisors fill with the host's total (384 MiB seen on a 32 MiB VM). */
static size_t sysfs_cache_bytes(int index) {
    char path[96];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", index);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    unsigned long v = 0;
    char unit = 0;
    int n = fscanf(f, "%lu%c", &v, &unit);
    fclose(f);
    if (n < 1) return 0;
    return unit == 'K' ? (size_t)v << 10 : unit == 'M' ? (size_t)v << 20 : (size_t)v;
}

size_t qmm_llc_bytes(void) {
    size_t s3 = sysfs_cache_bytes(3);
    if (s3 > 0) return s3;
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0) return (size_t)l3;
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > (32l << 20) ? (size_t)l2 : (size_t)32 << 20;
}

/* zero registers 0..15 (accumulators and the all-zero operands) before each loop */
#define ZERO_XMM0_15 "vpxor %%xmm0, %%xmm0, %%xmm0\n\t" \
    "vpxor %%xmm1, %%xmm1, %%xmm1\n\t" \
    "vpxor %%xmm2, %%xmm2, %%xmm2\n\t" \
    "vpxor %%xmm3, %%xmm3, %%xmm3\n\t" \
    "vpxor %%xmm4, %%xmm4, %%xmm4\n\t" \
    "vpxor %%xmm5, %%xmm5, %%xmm5\n\t" \
    "vpxor %%xmm6, %%xmm6, %%xmm6\n\t" \
    "vpxor %%xmm7, %%xmm7, %%xmm7\n\t" \
    "vpxor %%xmm8, %%xmm8, %%xmm8\n\t" \
    "vpxor %%xmm9, %%xmm9, %%xmm9\n\t" \
    "vpxor %%xmm10, %%xmm10, %%xmm10\n\t" \
    "vpxor %%xmm11, %%xmm11, %%xmm11\n\t" \
    "vpxor %%xmm12, %%xmm12, %%xmm12\n\t" \
    "vpxor %%xmm13, %%xmm13, %%xmm13\n\t" \
    "vpxor %%xmm14, %%xmm14, %%xmm14\n\t" \
    "vpxor %%xmm15, %%xmm15, %%xmm15\n\t"

static volatile int64_t g_sink;

/* ---------------------------------------------------------------- loops: return ops done
 * Each is one asm loop (the compiler may neither spill nor hoist): 12 independent
 * accumulators in registers 0..11, operands in 14/15 (zero: no denormals, no NaN). */
#define QMM_BENCH_HAVE_AVXVNNI 1
__attribute__((target("avx512f,avx512vnni"))) static double loop_vnni512(int64_t it) {
    int64_t n = it;
    __asm__ volatile(
            ZERO_XMM0_15
            "1:\n\t"
            "vpdpbusd %%zmm15, %%zmm14, %%zmm0\n\t"
            "vpdpbusd %%zmm15, %%zmm14, %%zmm1\n\t"
            "vpdpbusd %%zmm15, %%zmm14, %%zmm2\n\t"
            "vpdpbusd %%zmm15, %%zmm14, %%zmm3\n\t"
            "vpdpbusd %%zmm15, %%zmm14, %%zmm4\n\t"
            "vpdpbusd %%zmm15, %%zmm14, %%zmm5\n\t"
            "vpdpbusd %%zmm15, %%zmm14, %%zmm6\n\t"
            "vpdpbusd %%zmm15, %%zmm14, %%zmm7\n\t"
            "vpdpbusd %%zmm15, %%zmm14, %%zmm8\n\t"
            "vpdpbusd %%zmm15, %%zmm14, %%zmm9\n\t"
            "vpdpbusd %%zmm15, %%zmm14, %%zmm10\n\t"
            "vpdpbusd %%zmm15, %%zmm14, %%zmm11\n\t"
            "dec %0\n\t"
            "jnz 1b\n\t"
            "vzeroupper\n\t"
            : "+r"(n)
            :
            : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc");
    return (double)it * 12 * 64 * 2;
}

__attribute__((target("avx2"))) static double loop_vnni256(int64_t it) {
    int64_t n = it;
    __asm__ volatile(
            ZERO_XMM0_15
            "1:\n\t"
            "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm0\n\t"
            "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm1\n\t"
            "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm2\n\t"
            "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm3\n\t"
            "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm4\n\t"
            "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm5\n\t"
            "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm6\n\t"
            "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm7\n\t"
            "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm8\n\t"
            "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm9\n\t"
            "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm10\n\t"
            "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm11\n\t"
            "dec %0\n\t"
            "jnz 1b\n\t"
            "vzeroupper\n\t"
            : "+r"(n)
            :
            : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc");
    return (double)it * 12 * 32 * 2;
}

__attribute__((target("avx2"))) static double loop_avx2_int8(int64_t it) {
    int64_t n = it;
    __asm__ volatile(
            ZERO_XMM0_15
            "1:\n\t"
            "vpsignb %%ymm14, %%ymm15, %%ymm8\n\t"
            "vpmaddubsw %%ymm8, %%ymm13, %%ymm8\n\t"
            "vpmaddwd %%ymm12, %%ymm8, %%ymm8\n\t"
            "vpaddd %%ymm8, %%ymm0, %%ymm0\n\t"
            "vpsignb %%ymm14, %%ymm15, %%ymm9\n\t"
            "vpmaddubsw %%ymm9, %%ymm13, %%ymm9\n\t"
            "vpmaddwd %%ymm12, %%ymm9, %%ymm9\n\t"
            "vpaddd %%ymm9, %%ymm1, %%ymm1\n\t"
            "vpsignb %%ymm14, %%ymm15, %%ymm10\n\t"
            "vpmaddubsw %%ymm10, %%ymm13, %%ymm10\n\t"
            "vpmaddwd %%ymm12, %%ymm10, %%ymm10\n\t"
            "vpaddd %%ymm10, %%ymm2, %%ymm2\n\t"
            "vpsignb %%ymm14, %%ymm15, %%ymm11\n\t"
            "vpmaddubsw %%ymm11, %%ymm13, %%ymm11\n\t"
            "vpmaddwd %%ymm12, %%ymm11, %%ymm11\n\t"
            "vpaddd %%ymm11, %%ymm3, %%ymm3\n\t"
            "vpsignb %%ymm14, %%ymm15, %%ymm8\n\t"
            "vpmaddubsw %%ymm8, %%ymm13, %%ymm8\n\t"
            "vpmaddwd %%ymm12, %%ymm8, %%ymm8\n\t"
            "vpaddd %%ymm8, %%ymm4, %%ymm4\n\t"
            "vpsignb %%ymm14, %%ymm15, %%ymm9\n\t"
            "vpmaddubsw %%ymm9, %%ymm13, %%ymm9\n\t"
            "vpmaddwd %%ymm12, %%ymm9, %%ymm9\n\t"
            "vpaddd %%ymm9, %%ymm5, %%ymm5\n\t"
            "vpsignb %%ymm14, %%ymm15, %%ymm10\n\t"
            "vpmaddubsw %%ymm10, %%ymm13, %%ymm10\n\t"
            "vpmaddwd %%ymm12, %%ymm10, %%ymm10\n\t"
            "vpaddd %%ymm10, %%ymm6, %%ymm6\n\t"
            "vpsignb %%ymm14, %%ymm15, %%ymm11\n\t"
            "vpmaddubsw %%ymm11, %%ymm13, %%ymm11\n\t"
            "vpmaddwd %%ymm12, %%ymm11, %%ymm11\n\t"
            "vpaddd %%ymm11, %%ymm7, %%ymm7\n\t"
            "vpsignb %%ymm14, %%ymm15, %%ymm8\n\t"
            "vpmaddubsw %%ymm8, %%ymm13, %%ymm8\n\t"
            "vpmaddwd %%ymm12, %%ymm8, %%ymm8\n\t"
            "vpaddd %%ymm8, %%ymm0, %%ymm0\n\t"
            "vpsignb %%ymm14, %%ymm15, %%ymm9\n\t"
            "vpmaddubsw %%ymm9, %%ymm13, %%ymm9\n\t"
            "vpmaddwd %%ymm12, %%ymm9, %%ymm9\n\t"
            "vpaddd %%ymm9, %%ymm1, %%ymm1\n\t"
            "vpsignb %%ymm14, %%ymm15, %%ymm10\n\t"
            "vpmaddubsw %%ymm10, %%ymm13, %%ymm10\n\t"
            "vpmaddwd %%ymm12, %%ymm10, %%ymm10\n\t"
            "vpaddd %%ymm10, %%ymm2, %%ymm2\n\t"
            "vpsignb %%ymm14, %%ymm15, %%ymm11\n\t"
            "vpmaddubsw %%ymm11, %%ymm13, %%ymm11\n\t"
            "vpmaddwd %%ymm12, %%ymm11, %%ymm11\n\t"
            "vpaddd %%ymm11, %%ymm3, %%ymm3\n\t"
            "dec %0\n\t"
            "jnz 1b\n\t"
            "vzeroupper\n\t"
            : "+r"(n)
            :
            : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc");
    return (double)it * 12 * 32 * 2;
}

__attribute__((target("avx512f,avx512bf16"))) static double loop_bf16_512(int64_t it) {
    int64_t n = it;
    __asm__ volatile(
            ZERO_XMM0_15
            "1:\n\t"
            "vdpbf16ps %%zmm15, %%zmm14, %%zmm0\n\t"
            "vdpbf16ps %%zmm15, %%zmm14, %%zmm1\n\t"
            "vdpbf16ps %%zmm15, %%zmm14, %%zmm2\n\t"
            "vdpbf16ps %%zmm15, %%zmm14, %%zmm3\n\t"
            "vdpbf16ps %%zmm15, %%zmm14, %%zmm4\n\t"
            "vdpbf16ps %%zmm15, %%zmm14, %%zmm5\n\t"
            "vdpbf16ps %%zmm15, %%zmm14, %%zmm6\n\t"
            "vdpbf16ps %%zmm15, %%zmm14, %%zmm7\n\t"
            "vdpbf16ps %%zmm15, %%zmm14, %%zmm8\n\t"
            "vdpbf16ps %%zmm15, %%zmm14, %%zmm9\n\t"
            "vdpbf16ps %%zmm15, %%zmm14, %%zmm10\n\t"
            "vdpbf16ps %%zmm15, %%zmm14, %%zmm11\n\t"
            "dec %0\n\t"
            "jnz 1b\n\t"
            "vzeroupper\n\t"
            : "+r"(n)
            :
            : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc");
    return (double)it * 12 * 32 * 2;
}

__attribute__((target("avx512f"))) static double loop_fma512(int64_t it) {
    int64_t n = it;
    __asm__ volatile(
            ZERO_XMM0_15
            "1:\n\t"
            "vfmadd231ps %%zmm15, %%zmm14, %%zmm0\n\t"
            "vfmadd231ps %%zmm15, %%zmm14, %%zmm1\n\t"
            "vfmadd231ps %%zmm15, %%zmm14, %%zmm2\n\t"
            "vfmadd231ps %%zmm15, %%zmm14, %%zmm3\n\t"
            "vfmadd231ps %%zmm15, %%zmm14, %%zmm4\n\t"
            "vfmadd231ps %%zmm15, %%zmm14, %%zmm5\n\t"
            "vfmadd231ps %%zmm15, %%zmm14, %%zmm6\n\t"
            "vfmadd231ps %%zmm15, %%zmm14, %%zmm7\n\t"
            "vfmadd231ps %%zmm15, %%zmm14, %%zmm8\n\t"
            "vfmadd231ps %%zmm15, %%zmm14, %%zmm9\n\t"
            "vfmadd231ps %%zmm15, %%zmm14, %%zmm10\n\t"
            "vfmadd231ps %%zmm15, %%zmm14, %%zmm11\n\t"
            "dec %0\n\t"
            "jnz 1b\n\t"
            "vzeroupper\n\t"
            : "+r"(n)
            :
            : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc");
    return (double)it * 12 * 16 * 2;
}

__attribute__((target("avx2,fma"))) static double loop_fma256(int64_t it) {
    int64_t n = it;
    __asm__ volatile(
            ZERO_XMM0_15
            "1:\n\t"
            "vfmadd231ps %%ymm15, %%ymm14, %%ymm0\n\t"
            "vfmadd231ps %%ymm15, %%ymm14, %%ymm1\n\t"
            "vfmadd231ps %%ymm15, %%ymm14, %%ymm2\n\t"
            "vfmadd231ps %%ymm15, %%ymm14, %%ymm3\n\t"
            "vfmadd231ps %%ymm15, %%ymm14, %%ymm4\n\t"
            "vfmadd231ps %%ymm15, %%ymm14, %%ymm5\n\t"
            "vfmadd231ps %%ymm15, %%ymm14, %%ymm6\n\t"
            "vfmadd231ps %%ymm15, %%ymm14, %%ymm7\n\t"
            "vfmadd231ps %%ymm15, %%ymm14, %%ymm8\n\t"
            "vfmadd231ps %%ymm15, %%ymm14, %%ymm9\n\t"
            "vfmadd231ps %%ymm15, %%ymm14, %%ymm10\n\t"
            "vfmadd231ps %%ymm15, %%ymm14, %%ymm11\n\t"
            "dec %0\n\t"
            "jnz 1b\n\t"
            "vzeroupper\n\t"
            : "+r"(n)
            :
            : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc");
    return (double)it * 12 * 8 * 2;
}

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define QMM_BENCH_HAVE_AMX 1
/* Tile config in static thread-local storage (gcc 12 has been seen to drop the stores to a
 * stack-local config before _tile_loadconfig). 8 tiles of 16 rows × 64 bytes. */
static __thread unsigned char g_tilecfg[64] __attribute__((aligned(64)));
static void tile_cfg_init(void) {
    memset(g_tilecfg, 0, 64);
    g_tilecfg[0] = 1;
    for (int t = 0; t < 8; t++) {
        g_tilecfg[16 + 2 * t] = 64;
        g_tilecfg[48 + t] = 16;
    }
}
__attribute__((target("amx-tile,amx-int8"))) static double loop_amx_int8(int64_t it) {
    tile_cfg_init();
    _tile_loadconfig(g_tilecfg);
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    _tile_zero(4); _tile_zero(5); _tile_zero(6); _tile_zero(7);
    for (int64_t n = 0; n < it; n++) {
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 7);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
    }
    _tile_release();
    return (double)it * 4 * 16 * 16 * 64 * 2;
}
__attribute__((target("amx-tile,amx-bf16"))) static double loop_amx_bf16(int64_t it) {
    tile_cfg_init();
    _tile_loadconfig(g_tilecfg);
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    _tile_zero(4); _tile_zero(5); _tile_zero(6); _tile_zero(7);
    for (int64_t n = 0; n < it; n++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_release();
    return (double)it * 4 * 16 * 16 * 32 * 2;
}
#endif

/* ---------------------------------------------------------------- threads */
typedef double (*loop_fn)(int64_t);

typedef struct {
    int index;
    pthread_barrier_t *bar;
    /* peak */
    loop_fn fn;
    int64_t iters;
    double ops, cpu;
    /* bandwidth */
    const char *buf;
    size_t bytes;
} worker;

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

__attribute__((target("avx2"))) static int64_t stream_read(const char *p, size_t bytes) {
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 128 <= bytes; i += 128) {
        s0 = _mm256_add_epi64(s0, _mm256_load_si256((const __m256i *)(p + i)));
        s1 = _mm256_add_epi64(s1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        s2 = _mm256_add_epi64(s2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        s3 = _mm256_add_epi64(s3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    s0 = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
    return _mm256_extract_epi64(s0, 0) + _mm256_extract_epi64(s0, 3);
}

static void *worker_main(void *arg) {
    worker *w = arg;
    pin(w->index);
    pthread_barrier_wait(w->bar);
    if (w->fn) {
        double c0 = thread_cpu();
        w->ops = w->fn(w->iters);
        w->cpu = thread_cpu() - c0;
    }
    else g_sink += stream_read(w->buf, w->bytes);
    return NULL;
}

/* Runs every worker at once on its own pinned thread; returns the wall seconds. */
static double run_workers(worker *ws, int n) {
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)n + 1);
    pthread_t th[64];
    for (int i = 0; i < n; i++) {
        ws[i].index = i;
        ws[i].bar = &bar;
        pthread_create(&th[i], NULL, worker_main, &ws[i]);
    }
    double t0 = qmm_now();
    pthread_barrier_wait(&bar);
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    double t = qmm_now() - t0;
    pthread_barrier_destroy(&bar);
    return t;
}

/* The library's description of engine e (qmm_engine_get_info); 0 if it has no such engine. */
static int engine_info(qmm_engine_id e, qmm_engine_info *out) {
    for (int i = 0; i < qmm_engine_count(); i++)
        if (qmm_engine_get_info(i, out) == QMM_OK && out->id == e) return 1;
    return 0;
}

/* Engine e's peak loop, or NULL with why: the loop needs the CPU features of e's engine
 * (qmm_engine_get_info) and a compiler that can build it. */
static loop_fn loop_of(qmm_engine_id e, char *why, size_t n) {
    loop_fn fn = NULL;
    switch (e) {
    case QMM_ENGINE_AVX512_VNNI: fn = loop_vnni512; break;
    case QMM_ENGINE_AVX_VNNI:
#ifdef QMM_BENCH_HAVE_AVXVNNI
        fn = loop_vnni256;
#endif
        break;
    case QMM_ENGINE_AVX2_INT8: fn = loop_avx2_int8; break;
    case QMM_ENGINE_AVX512_BF16: fn = loop_bf16_512; break;
    case QMM_ENGINE_AVX512_F32: fn = loop_fma512; break;
    case QMM_ENGINE_AVX2_F32: fn = loop_fma256; break;
    case QMM_ENGINE_AMX_INT8:
#ifdef QMM_BENCH_HAVE_AMX
        fn = loop_amx_int8;
#endif
        break;
    case QMM_ENGINE_AMX_BF16:
#ifdef QMM_BENCH_HAVE_AMX
        fn = loop_amx_bf16;
#endif
        break;
    default: snprintf(why, n, "no peak loop for engine %s", qmm_engine_name(e)); return NULL;
    }
    qmm_engine_info info;
    const uint32_t need = engine_info(e, &info) ? info.cpu_features : ~0u;
    if ((qmm_cpu_features() & need) != need) {
        snprintf(why, n, "CPU/OS lacks %s", qmm_peak_instruction(e));
        return NULL;
    }
    if (!fn) snprintf(why, n, "the bench's compiler cannot build %s", qmm_peak_instruction(e));
    return fn;
}

const char *qmm_peak_instruction(qmm_engine_id e) {
    qmm_engine_info info;
    return engine_info(e, &info) ? info.peak_instruction : "-";
}

static double peak_run(qmm_engine_id e, int threads, double seconds, char *why, size_t why_size, int by_cpu) {
    char tmp[QMM_REASON_MAX];
    if (!why) { why = tmp; why_size = sizeof tmp; }
    loop_fn fn = loop_of(e, why, why_size);
    if (!fn) return 0.0;
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    worker ws[64];
    /* calibrate the iteration count on one thread */
    int64_t it = 1000;
    double t = 0;
    for (;;) {
        double t0 = qmm_now();
        fn(it);
        t = qmm_now() - t0;
        if (t > seconds / 8 || it > ((int64_t)1 << 40)) break;
        it *= 4;
    }
    it = (int64_t)((double)it * seconds / (t > 0 ? t : 1e-9));
    if (it < 1) it = 1;
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        memset(ws, 0, sizeof ws);
        for (int i = 0; i < threads; i++) {
            ws[i].fn = fn;
            ws[i].iters = it;
        }
        double wall = run_workers(ws, threads);
        double ops = 0, rate = 0;
        for (int i = 0; i < threads; i++) {
            ops += ws[i].ops;
            rate += ws[i].cpu > 0 ? ws[i].ops / ws[i].cpu : 0;
        }
        double v = by_cpu ? rate : ops / wall;
        if (v > best) best = v;
    }
    return best * 1e-12;
}

double qmm_peak_tops(qmm_engine_id e, int threads, double seconds, char *why, size_t why_size) {
    return peak_run(e, threads, seconds, why, why_size, 0);
}

double qmm_peak_tops_cpu(qmm_engine_id e, int threads, double seconds) {
    return peak_run(e, threads, seconds, NULL, 0, 1);
}

double qmm_dram_read_gbps(int threads, size_t bytes, int reps) {
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    bytes = bytes / ((size_t)threads * 4096) * ((size_t)threads * 4096);
    if (bytes == 0) return 0.0;
    char *buf = aligned_alloc(4096, bytes);
    if (!buf) return 0.0;
    memset(buf, 1, bytes);
    worker ws[64];
    double best = 0;
    size_t share = bytes / (size_t)threads;
    for (int rep = 0; rep < reps; rep++) {
        memset(ws, 0, sizeof ws);
        for (int i = 0; i < threads; i++) {
            ws[i].buf = buf + (size_t)i * share;
            ws[i].bytes = share;
        }
        double wall = run_workers(ws, threads);
        if ((double)bytes / wall > best) best = (double)bytes / wall;
    }
    free(buf);
    return best * 1e-9;
}
