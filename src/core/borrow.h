/*
 * borrow.h — the per-call view of a borrowed weight (borrow.c).
 */
#ifndef QMM_BORROW_H
#define QMM_BORROW_H

#include "qmm_internal.h"

/* The weight one call runs on: w itself when it is owned; for a borrowed w, *view, with scale [N]
 * and bias [N] fp32 read from the caller's memory as it is now (QMM_SCRATCH_WEIGHT);
 * view->i8.data/colsum stay NULL: the engine reads view->borrow itself. */
qmm_status qmm_weight_for_call(qmm_context *ctx, const qmm_weight *w, qmm_weight *view, const qmm_weight **out);

#endif /* QMM_BORROW_H */
