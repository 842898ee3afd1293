/*
 * scratch.c — a context's scratch arenas (qmm_internal.h, QMM_SCRATCH_*): one block per slot,
 * grown to the largest request and reused across calls.
 */
#include "qmm_internal.h"

qmm_status qmm_context_scratch(qmm_context *ctx, int slot, size_t bytes, void **out) {
    if (bytes > ctx->scratch_bytes[slot]) {
        void *p = qmm_aligned_alloc(bytes);
        QMM_RETURN_IF(!p, QMM_ERR_OUT_OF_MEMORY, "scratch: cannot allocate %zu bytes", bytes);
        qmm_aligned_free(ctx->scratch[slot]);
        ctx->scratch[slot] = p;
        ctx->scratch_bytes[slot] = bytes;
    }
    *out = ctx->scratch[slot];
    return QMM_OK;
}
