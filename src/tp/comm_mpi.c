/*
 * comm_mpi.c — the MPI implementation of the qmm_comm collective interface (qmm_dist.h).
 * The caller's communicator is duplicated and set to MPI_ERRORS_RETURN, so a failing MPI call
 * becomes QMM_ERR_DIST with MPI's error string instead of aborting the job. Counts above
 * INT_MAX are split into chunks (reductions, broadcast) or refused (all-gather displacements).
 */
#include "qmm_dist.h"
#include "qmm_internal.h"

#include <limits.h>
#include <mpi.h>
#include <stdlib.h>

typedef struct mpi_impl {
    MPI_Comm comm;
    int *counts, *displs; /* [size] scratch for all-gather */
} mpi_impl;

static qmm_status mpi_err(int rc, const char *what) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) len = 0;
    s[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = 0;
    return qmm_fail(QMM_ERR_DIST, "mpi: %s failed: %s", what, s);
}

static MPI_Comm comm_of(qmm_comm *c) { return ((mpi_impl *)c->impl)->comm; }

enum { CHUNK = 1 << 28 }; /* elements per MPI call (well under INT_MAX) */

/* One in-place all-reduce of n elements, in calls of at most CHUNK elements. */
static qmm_status allreduce(qmm_comm *c, void *buf, int64_t n, size_t es, MPI_Datatype t, MPI_Op op,
                            const char *what) {
    for (int64_t i = 0; i < n; i += CHUNK) {
        int k = (int)(n - i < CHUNK ? n - i : CHUNK);
        int rc = MPI_Allreduce(MPI_IN_PLACE, (char *)buf + (size_t)i * es, k, t, op, comm_of(c));
        if (rc != MPI_SUCCESS) return mpi_err(rc, what);
    }
    return QMM_OK;
}

static qmm_status allreduce_max_f32(qmm_comm *c, float *buf, int64_t n) {
    return allreduce(c, buf, n, sizeof *buf, MPI_FLOAT, MPI_MAX, "all-reduce MAX f32");
}

static qmm_status allreduce_sum_i32(qmm_comm *c, int32_t *buf, int64_t n) {
    return allreduce(c, buf, n, sizeof *buf, MPI_INT32_T, MPI_SUM, "all-reduce SUM i32");
}

static qmm_status allgather(qmm_comm *c, const void *send, void *recv, const size_t *counts, const size_t *displs) {
    mpi_impl *m = c->impl;
    for (int r = 0; r < c->size; r++) {
        /* same answer on every rank: counts/displs are the same everywhere */
        QMM_RETURN_IF(counts[r] > INT_MAX || displs[r] > INT_MAX, QMM_ERR_DIST,
                      "mpi: all-gather of %zu bytes at offset %zu from rank %d exceeds INT_MAX (split the call)",
                      counts[r], displs[r], r);
        m->counts[r] = (int)counts[r];
        m->displs[r] = (int)displs[r];
    }
    int rc = MPI_Allgatherv(send, m->counts[c->rank], MPI_BYTE, recv, m->counts, m->displs, MPI_BYTE, m->comm);
    if (rc != MPI_SUCCESS) return mpi_err(rc, "all-gather");
    return QMM_OK;
}

static qmm_status broadcast(qmm_comm *c, void *buf, size_t bytes, int root) {
    for (size_t i = 0; i < bytes; i += CHUNK) {
        int k = (int)(bytes - i < CHUNK ? bytes - i : CHUNK);
        int rc = MPI_Bcast((char *)buf + i, k, MPI_BYTE, root, comm_of(c));
        if (rc != MPI_SUCCESS) return mpi_err(rc, "broadcast");
    }
    return QMM_OK;
}

static qmm_status barrier(qmm_comm *c) {
    int rc = MPI_Barrier(comm_of(c));
    if (rc != MPI_SUCCESS) return mpi_err(rc, "barrier");
    return QMM_OK;
}

static void abort_all(qmm_comm *c, int code) { MPI_Abort(comm_of(c), code); }

static void destroy(qmm_comm *c) {
    mpi_impl *m = c->impl;
    if (m) {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin) MPI_Comm_free(&m->comm);
        free(m->counts);
        free(m->displs);
        free(m);
    }
    free(c);
}

qmm_status qmm_comm_create_mpi(const void *mpi_comm, qmm_comm **out) {
    QMM_RETURN_IF(!out, QMM_ERR_INVALID_ARGUMENT, "qmm_comm_create_mpi: out is NULL");
    *out = NULL;
    int init = 0;
    MPI_Initialized(&init);
    QMM_RETURN_IF(!init, QMM_ERR_DIST, "qmm_comm_create_mpi: MPI is not initialized (call MPI_Init first)");
    MPI_Comm base = mpi_comm ? *(const MPI_Comm *)mpi_comm : MPI_COMM_WORLD;
    qmm_comm *c = calloc(1, sizeof *c);
    mpi_impl *m = calloc(1, sizeof *m);
    if (!c || !m) {
        free(c);
        free(m);
        return qmm_fail(QMM_ERR_OUT_OF_MEMORY, "qmm_comm_create_mpi: out of memory");
    }
    int rc = MPI_Comm_dup(base, &m->comm);
    if (rc != MPI_SUCCESS) {
        free(c);
        free(m);
        return mpi_err(rc, "MPI_Comm_dup");
    }
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m->comm, &c->rank);
    MPI_Comm_size(m->comm, &c->size);
    m->counts = calloc((size_t)c->size, sizeof(int));
    m->displs = calloc((size_t)c->size, sizeof(int));
    c->impl = m;
    c->backend = "mpi";
    c->allreduce_max_f32 = allreduce_max_f32;
    c->allreduce_sum_i32 = allreduce_sum_i32;
    c->allgather = allgather;
    c->broadcast = broadcast;
    c->barrier = barrier;
    c->abort = abort_all;
    c->destroy = destroy;
    if (!m->counts || !m->displs) {
        destroy(c);
        return qmm_fail(QMM_ERR_OUT_OF_MEMORY, "qmm_comm_create_mpi: out of memory");
    }
    *out = c;
    return QMM_OK;
}

void qmm_comm_destroy(qmm_comm *c) {
    if (c && c->destroy) c->destroy(c);
}
