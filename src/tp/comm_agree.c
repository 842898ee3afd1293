/*
 * comm_agree.c — qmm_comm_agree_i64 (qmm_dist.h): every rank checks that all ranks pass the same
 * named values before a sequence of collectives that those values drive (iteration counts,
 * token counts, engines, seeds...). One fixed-size all-gather (QMM_AGREE_MAX values + the count,
 * whatever n each rank passes), so ranks that disagree even on n still meet in the same
 * collective; the verdict is computed from the same gathered bytes on every rank, so every rank
 * returns the same status and message.
 */
#include "tp_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct agree_rec {
    int64_t n;
    int64_t v[QMM_AGREE_MAX];
} agree_rec;

qmm_status qmm_comm_agree_i64(qmm_comm *c, const char *what, int n, const char *const *names, const int64_t *vals) {
    QMM_RETURN_IF(!c, QMM_ERR_INVALID_ARGUMENT, "qmm_comm_agree_i64: comm is NULL");
    const char *w = what && *what ? what : "(unnamed)";
    agree_rec mine;
    memset(&mine, 0, sizeof mine);
    /* a bad local argument still takes part (as n = -1): the others must not wait for it */
    const int bad = n < 0 || n > QMM_AGREE_MAX || (n > 0 && (!vals || !names));
    mine.n = bad ? -1 : n;
    for (int i = 0; !bad && i < n; i++) mine.v[i] = vals[i];
    agree_rec *all = calloc((size_t)c->size, sizeof *all);
    size_t *cnt = calloc((size_t)c->size, sizeof *cnt), *dsp = calloc((size_t)c->size, sizeof *dsp);
    if (!all || !cnt || !dsp) { /* cannot take part: the transport sees the missing rank */
        free(all);
        free(cnt);
        free(dsp);
        return qmm_fail(QMM_ERR_OUT_OF_MEMORY, "%s: agreeing on %d values: out of memory", w, n);
    }
    for (int r = 0; r < c->size; r++) {
        cnt[r] = sizeof(agree_rec);
        dsp[r] = (size_t)r * sizeof(agree_rec);
    }
    qmm_status st = c->allgather(c, &mine, all, cnt, dsp);
    free(cnt);
    free(dsp);
    if (st != QMM_OK) {
        free(all);
        return st;
    }
    st = QMM_OK;
    for (int r = 0; r < c->size && st == QMM_OK; r++)
        if (all[r].n < 0)
            st = qmm_fail(QMM_ERR_DIST, "%s: rank %d of %d passed invalid arguments to qmm_comm_agree_i64", w, r,
                          c->size);
    for (int r = 1; r < c->size && st == QMM_OK; r++)
        if (all[r].n != all[0].n)
            st = qmm_fail(QMM_ERR_DIST, "%s: rank %d agrees on %lld values, rank 0 on %lld (different programs?)", w,
                          r, (long long)all[r].n, (long long)all[0].n);
    for (int i = 0; i < all[0].n && st == QMM_OK; i++) {
        int r = 1;
        while (r < c->size && all[r].v[i] == all[0].v[i]) r++;
        if (r == c->size) continue;
        /* name the value and list every rank's (the first 16 ranks, then how many more) */
        char list[512];
        size_t at = 0;
        for (int q = 0; q < c->size && q < 16 && at < sizeof list; q++) {
            int k = snprintf(list + at, sizeof list - at, "%s rank %d: %lld", q ? "," : "", q, (long long)all[q].v[i]);
            at += k > 0 ? (size_t)k : 0;
        }
        if (c->size > 16 && at < sizeof list) snprintf(list + at, sizeof list - at, ", ... (%d ranks)", c->size);
        const char *nm = names && names[i] ? names[i] : "?";
        st = qmm_fail(QMM_ERR_DIST, "%s: ranks disagree on %s:%s (every rank must pass the same value)", w, nm,
                      list);
    }
    free(all);
    return st;
}
