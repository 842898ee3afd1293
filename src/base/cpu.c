/*
 * cpu.c — identify this machine's engines once per process: CPUID leaves 1, 7.0, 7.1 and the
 * brand string, XCR0 (the OS saves the YMM / ZMM / tile state) and, for AMX, the Linux
 * permission request arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): a refusal means
 * "no AMX". The result is a bitmask of QMM_CPU_* (XNNPACK-style), read by every engine's
 * availability check and by qmm_core_simd (the vector level of core's shared kernels).
 */
#define _GNU_SOURCE
#include "qmm_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define QMM_X86 1
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

static uint32_t g_features;
static char g_brand[49] = "unknown";
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#ifdef QMM_X86
static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static int request_amx_permission(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    const long ARCH_GET_XCOMP_PERM = 0x1022, ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return 0;
    unsigned long bitmask = 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &bitmask) != 0) return 0;
    return (bitmask >> XFEATURE_XTILEDATA) & 1;
#else
    return 0;
#endif
}
#endif

static void identify(void) {
#ifdef QMM_X86
    unsigned a, b, c, d;
    uint32_t f = 0;
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf < 1) return;
    __cpuid(1, a, b, c, d);
    int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    uint64_t xcr0 = osxsave ? read_xcr0() : 0;
    int ymm_ok = (xcr0 & 0x6) == 0x6;          /* SSE + AVX state */
    int zmm_ok = ymm_ok && (xcr0 & 0xe0) == 0xe0; /* opmask + ZMM_Hi256 + Hi16_ZMM */
    int tile_ok = (xcr0 & 0x60000) == 0x60000; /* XTILECFG + XTILEDATA */
    if (ymm_ok && fma) f |= QMM_CPU_FMA;
    if (ymm_ok && f16c) f |= QMM_CPU_F16C;
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        if (ymm_ok && ((b >> 5) & 1)) f |= QMM_CPU_AVX2;
        if (zmm_ok) {
            if ((b >> 16) & 1) f |= QMM_CPU_AVX512F;
            if ((b >> 17) & 1) f |= QMM_CPU_AVX512DQ;
            if ((b >> 30) & 1) f |= QMM_CPU_AVX512BW;
            if ((b >> 31) & 1) f |= QMM_CPU_AVX512VL;
            if ((c >> 11) & 1) f |= QMM_CPU_AVX512_VNNI;
            if ((c >> 1) & 1) f |= QMM_CPU_AVX512_VBMI;
            if ((d >> 23) & 1) f |= QMM_CPU_AVX512_FP16;
        }
        if (tile_ok) {
            if ((d >> 24) & 1) f |= QMM_CPU_AMX_TILE;
            if ((d >> 25) & 1) f |= QMM_CPU_AMX_INT8;
            if ((d >> 22) & 1) f |= QMM_CPU_AMX_BF16;
        }
        unsigned a1, b1, c1, d1;
        __cpuid_count(7, 1, a1, b1, c1, d1);
        (void)b1; (void)c1; (void)d1;
        if (ymm_ok && ((a1 >> 4) & 1)) f |= QMM_CPU_AVX_VNNI;
        if (zmm_ok && ((a1 >> 5) & 1)) f |= QMM_CPU_AVX512_BF16;
    }
    if ((f & QMM_CPU_AMX_TILE) && request_amx_permission()) f |= QMM_CPU_AMX_PERMITTED;
    g_features = f;
    unsigned maxext = __get_cpuid_max(0x80000000u, NULL);
    if (maxext >= 0x80000004u) {
        unsigned regs[12];
        for (unsigned i = 0; i < 3; i++)
            __cpuid(0x80000002u + i, regs[4 * i], regs[4 * i + 1], regs[4 * i + 2], regs[4 * i + 3]);
        memcpy(g_brand, regs, 48);
        g_brand[48] = 0;
        char *s = g_brand;
        while (*s == ' ') s++;
        memmove(g_brand, s, strlen(s) + 1);
    }
#endif
}

uint32_t qmm_cpu_features(void) {
    pthread_once(&g_once, identify);
    return g_features;
}

const char *qmm_cpu_brand(void) {
    pthread_once(&g_once, identify);
    return g_brand;
}

const char *qmm_cpu_feature_name(uint32_t bit) {
    static const char *const names[QMM_CPU_FEATURE_COUNT] = {
        "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni",
        "avx_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16",
        "amx_permitted", "avx512_vbmi"};
    for (int i = 0; i < QMM_CPU_FEATURE_COUNT; i++)
        if (bit == (1u << i)) return names[i];
    return NULL;
}

int qmm_core_simd(const qmm_context *ctx) {
    const uint32_t f = qmm_cpu_features();
    const uint32_t avx512 = QMM_CPU_AVX512F | QMM_CPU_AVX512BW | QMM_CPU_AVX512VL | QMM_CPU_AVX512DQ;
    const uint32_t avx2 = QMM_CPU_AVX2 | QMM_CPU_FMA | QMM_CPU_F16C;
    const int cap = ctx ? ctx->max_isa : -1;
    if ((f & avx512) == avx512 && (cap < 0 || cap >= QMM_ISA_AVX512)) return QMM_ISA_AVX512;
    if ((f & avx2) == avx2 && (cap < 0 || cap >= QMM_ISA_AVX2)) return QMM_ISA_AVX2;
    return QMM_ISA_NONE;
}
