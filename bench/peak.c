/*
 * peak.c — register-only peak loops and the DRAM read bandwidth (see peak.h). The library's
 * build flags do not reach bench/, so each per-ISA loop is a function with its own
 * __attribute__((target(...))), called only when qmm_cpu_features() says the CPU has the ISA.
 * Each loop runs 12 independent accumulator chains (more than latency × throughput of every
 * instruction here) on values the compiler cannot hoist, and stores its result to a sink.
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

size_t qmm_llc_bytes(void) {
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0) return (size_t)l3;
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > (32l << 20) ? (size_t)l2 : (size_t)32 << 20;
}

static volatile int64_t g_sink;
#define KEEP(v) __asm__ volatile("" : "+x"(v))

/* ---------------------------------------------------------------- loops: return ops done */
__attribute__((target("avx512f,avx512vnni"))) static double loop_vnni512(int64_t it) {
    __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(5), c[12];
    for (int i = 0; i < 12; i++) c[i] = _mm512_setzero_si512();
    for (int64_t n = 0; n < it; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) c[i] = _mm512_dpbusd_epi32(c[i], a, b);
    }
    __m512i s = c[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_epi32(s, c[i]);
    g_sink += _mm_cvtsi128_si32(_mm512_castsi512_si128(s)); /* lane 0: no UB-checked reduction */
    return (double)it * 12 * 64 * 2;
}

#if defined(__GNUC__) && (__GNUC__ >= 11 || defined(__clang__))
#define QMM_BENCH_HAVE_AVXVNNI 1
__attribute__((target("avx2,avxvnni"))) static double loop_vnni256(int64_t it) {
    __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(5), c[12];
    for (int i = 0; i < 12; i++) c[i] = _mm256_setzero_si256();
    for (int64_t n = 0; n < it; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) c[i] = _mm256_dpbusd_avx_epi32(c[i], a, b);
    }
    __m256i s = c[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_epi32(s, c[i]);
    g_sink += _mm256_extract_epi32(s, 0);
    return (double)it * 12 * 32 * 2;
}
#endif

__attribute__((target("avx2"))) static double loop_avx2_int8(int64_t it) {
    __m256i a = _mm256_set1_epi8(-3), w[4], ones = _mm256_set1_epi16(1), c[12];
    for (int i = 0; i < 4; i++) w[i] = _mm256_set1_epi8((char)(5 + i));
    for (int i = 0; i < 12; i++) c[i] = _mm256_setzero_si256();
    __m256i mag = _mm256_abs_epi8(a);
    for (int64_t n = 0; n < it; n++) {
        KEEP(w[0]); KEEP(w[1]); KEEP(w[2]); KEEP(w[3]);
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) {
            __m256i p = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(w[i & 3], a));
            c[i] = _mm256_add_epi32(c[i], _mm256_madd_epi16(p, ones));
        }
    }
    __m256i s = c[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_epi32(s, c[i]);
    g_sink += _mm256_extract_epi32(s, 0);
    return (double)it * 12 * 32 * 2;
}

__attribute__((target("avx512f,avx512bf16"))) static double loop_bf16_512(int64_t it) {
    __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3f80);
    __m512 c[12];
    for (int i = 0; i < 12; i++) c[i] = _mm512_setzero_ps();
    for (int64_t n = 0; n < it; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) c[i] = _mm512_dpbf16_ps(c[i], a, b);
    }
    __m512 s = c[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, c[i]);
    g_sink += (int64_t)_mm_cvtss_f32(_mm512_castps512_ps128(s));
    return (double)it * 12 * 32 * 2;
}

__attribute__((target("avx512f"))) static double loop_fma512(int64_t it) {
    __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(1e-9f), c[12];
    for (int i = 0; i < 12; i++) c[i] = _mm512_setzero_ps();
    for (int64_t n = 0; n < it; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) c[i] = _mm512_fmadd_ps(a, b, c[i]);
    }
    __m512 s = c[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, c[i]);
    g_sink += (int64_t)_mm_cvtss_f32(_mm512_castps512_ps128(s));
    return (double)it * 12 * 16 * 2;
}

__attribute__((target("avx2,fma"))) static double loop_fma256(int64_t it) {
    __m256 a = _mm256_set1_ps(1.0f), b = _mm256_set1_ps(1e-9f), c[12];
    for (int i = 0; i < 12; i++) c[i] = _mm256_setzero_ps();
    for (int64_t n = 0; n < it; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) c[i] = _mm256_fmadd_ps(a, b, c[i]);
    }
    __m256 s = c[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, c[i]);
    float f[8];
    _mm256_storeu_ps(f, s);
    g_sink += (int64_t)f[0];
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
    double ops;
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
    if (w->fn) w->ops = w->fn(w->iters);
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

static loop_fn loop_of(qmm_engine_id e, char *why, size_t n) {
    uint32_t f = qmm_cpu_features();
    const uint32_t avx512 = QMM_CPU_AVX512F | QMM_CPU_AVX512BW | QMM_CPU_AVX512VL | QMM_CPU_AVX512DQ;
    const uint32_t amx = QMM_CPU_AMX_TILE | QMM_CPU_AMX_PERMITTED;
    uint32_t need = 0;
    loop_fn fn = NULL;
    switch (e) {
    case QMM_ENGINE_AVX512_VNNI: need = avx512 | QMM_CPU_AVX512_VNNI; fn = loop_vnni512; break;
    case QMM_ENGINE_AVX_VNNI:
        need = QMM_CPU_AVX2 | QMM_CPU_AVX_VNNI;
#ifdef QMM_BENCH_HAVE_AVXVNNI
        fn = loop_vnni256;
#endif
        break;
    case QMM_ENGINE_AVX2_INT8: need = QMM_CPU_AVX2; fn = loop_avx2_int8; break;
    case QMM_ENGINE_AVX512_BF16: need = avx512 | QMM_CPU_AVX512_BF16; fn = loop_bf16_512; break;
    case QMM_ENGINE_AVX512_F32: need = avx512; fn = loop_fma512; break;
    case QMM_ENGINE_AVX2_F32: need = QMM_CPU_AVX2 | QMM_CPU_FMA; fn = loop_fma256; break;
    case QMM_ENGINE_AMX_INT8:
        need = amx | QMM_CPU_AMX_INT8;
#ifdef QMM_BENCH_HAVE_AMX
        fn = loop_amx_int8;
#endif
        break;
    case QMM_ENGINE_AMX_BF16:
        need = amx | QMM_CPU_AMX_BF16;
#ifdef QMM_BENCH_HAVE_AMX
        fn = loop_amx_bf16;
#endif
        break;
    default: snprintf(why, n, "no peak loop for engine %s", qmm_engine_name(e)); return NULL;
    }
    if ((f & need) != need) {
        snprintf(why, n, "CPU/OS lacks %s", qmm_peak_instruction(e));
        return NULL;
    }
    if (!fn) snprintf(why, n, "the bench's compiler cannot build %s", qmm_peak_instruction(e));
    return fn;
}

const char *qmm_peak_instruction(qmm_engine_id e) {
    switch (e) {
    case QMM_ENGINE_AMX_INT8: return "TDPBSSD";
    case QMM_ENGINE_AVX512_VNNI: return "VPDPBUSD zmm";
    case QMM_ENGINE_AVX_VNNI: return "VPDPBUSD ymm";
    case QMM_ENGINE_AVX2_INT8: return "VPSIGNB+VPMADDUBSW+VPMADDWD ymm";
    case QMM_ENGINE_AMX_BF16: return "TDPBF16PS";
    case QMM_ENGINE_AVX512_BF16: return "VDPBF16PS zmm";
    case QMM_ENGINE_AVX512_F32: return "VFMADD zmm";
    case QMM_ENGINE_AVX2_F32: return "VFMADD ymm";
    default: return "-";
    }
}

double qmm_peak_tops(qmm_engine_id e, int threads, double seconds, char *why, size_t why_size) {
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
        double ops = 0;
        for (int i = 0; i < threads; i++) ops += ws[i].ops;
        if (ops / wall > best) best = ops / wall;
    }
    return best * 1e-12;
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
