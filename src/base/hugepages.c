/*
 * hugepages.c — transparent huge pages for the large buffers a call writes (its output), on
 * request only (QMM_HUGEPAGES=1 in the environment): the 2 MiB-aligned interior of
 * [p, p + bytes) is advised MADV_HUGEPAGE before the engine writes it, so that memory the
 * allocator has just mapped afresh (glibc hands large blocks back to the kernel at every free,
 * and torch allocates an output per call) is faulted in 2 MiB at a time instead of 4 KiB.
 * Off by default: with the kernel's default THP defrag ("madvise"), an advised fault compacts
 * memory synchronously when no free 2 MiB page is at hand, which inside a model (memory
 * fragmented by the other ops' 4 KiB pages) costs far more than the 4 KiB faults it saves (SPEC
 * §5). The contents never change. Linux only; elsewhere, for buffers under QMM_HUGE_MIN, or
 * when madvise refuses (a file mapping, THP "never"), nothing happens.
 */
#define _GNU_SOURCE
#include "qmm_base.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

static int enabled(void) {
    static _Atomic int state; /* 0 unknown, 1 on, 2 off */
    int s = atomic_load_explicit(&state, memory_order_relaxed);
    if (!s) {
        const char *e = getenv("QMM_HUGEPAGES");
        s = e && strcmp(e, "1") == 0 ? 1 : 2;
        atomic_store_explicit(&state, s, memory_order_relaxed);
    }
    return s == 1;
}

void qmm_advise_huge(void *p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (!p || bytes < QMM_HUGE_MIN || !enabled()) return;
    const uintptr_t huge = (uintptr_t)2 << 20, b = (uintptr_t)p;
    if (b > UINTPTR_MAX - bytes) return;
    const uintptr_t lo = (b + huge - 1) & ~(huge - 1), hi = (b + bytes) & ~(huge - 1);
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
    (void)p;
    (void)bytes;
#endif
}
