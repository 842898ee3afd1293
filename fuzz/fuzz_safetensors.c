/*
 * fuzz_safetensors.c — libFuzzer target for the safetensors reader: any bytes go through
 * qmm_st_open_memory; an accepted file's every tensor view, metadata entry and by-name lookup
 * is touched (ASan checks the views stay inside the buffer). Replayed on the committed corpus
 * by fuzz/replay.c in the normal tests; see docs/FUZZING.md for long runs.
 */
#include "qmm_io.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qmm_st_file *f = NULL;
    if (qmm_st_open_memory(data, size, &f) != QMM_OK) return 0;
    volatile unsigned sink = 0;
    for (size_t i = 0; i < qmm_st_count(f); i++) {
        const qmm_st_tensor *t = qmm_st_at(f, i);
        if (t->nbytes) sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
        if (qmm_st_get(f, t->name) == NULL) __builtin_trap();   /* every tensor is found by name */
        if ((const uint8_t *)t->data < data || (const uint8_t *)t->data + t->nbytes > data + size) __builtin_trap();
    }
    for (size_t i = 0; i < qmm_st_metadata_count(f); i++) {
        const char *k, *v;
        qmm_st_metadata_at(f, i, &k, &v);
        sink += (unsigned)strlen(k) + (unsigned)strlen(v);
    }
    (void)sink;
    qmm_st_close(f);
    return 0;
}
