/*
 * mapped_read.c — copies out of a file mapping that survive the file shrinking underneath.
 *
 * A mapped page past the end of a file that was truncated after the mmap raises SIGBUS on access
 * (the default action ends the process). Every read qmm makes of mapped tensor bytes goes through
 * qmm_mapped_copy: a SIGBUS handler, installed on first use, siglongjmps back into the copy that
 * faulted (a thread-local jump target is set only for the length of the memcpy) and the copy
 * returns QMM_ERR_IO. A SIGBUS that is not from such a copy is handed to the action that was
 * installed before (a handler is called; SIG_DFL/SIG_IGN: the default action ends the process as
 * it would have without qmm). If someone replaces qmm's handler, the next copy installs it again
 * and remembers theirs as the one to hand other faults to.
 */
#define _POSIX_C_SOURCE 200809L
#include "io_internal.h"
#include "qmm_internal.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>

static _Thread_local sigjmp_buf *volatile t_jump;   /* set while this thread copies from a mapping */
static struct sigaction g_prev;                      /* the SIGBUS action qmm's replaced */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
    sigjmp_buf *j = t_jump;
    if (j) siglongjmp(*j, 1);
    if ((g_prev.sa_flags & SA_SIGINFO) && g_prev.sa_sigaction) {
        g_prev.sa_sigaction(sig, si, uc);
        return;
    }
    if (!(g_prev.sa_flags & SA_SIGINFO) && g_prev.sa_handler != SIG_DFL && g_prev.sa_handler != SIG_IGN) {
        g_prev.sa_handler(sig);
        return;
    }
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGBUS, &dfl, NULL);
    raise(SIGBUS);   /* pending until this handler returns, then the default action */
}

static void install(void) {
    pthread_mutex_lock(&g_mu);
    struct sigaction cur;
    if (sigaction(SIGBUS, NULL, &cur) == 0 && !((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigbus)) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        g_prev = cur;
        sigaction(SIGBUS, &sa, NULL);
    }
    pthread_mutex_unlock(&g_mu);
}

qmm_status qmm_mapped_copy(void *dst, const void *src, size_t n, const char *path, const char *what) {
    if (n == 0) return QMM_OK;
    install();
    sigjmp_buf jb;
    sigjmp_buf *volatile saved = t_jump;
    if (sigsetjmp(jb, 1)) {
        t_jump = saved;
        return qmm_fail(QMM_ERR_IO, "%s: %s: the file shrank after it was opened (SIGBUS reading the mapping): "
                        "truncated or rewritten underneath", path, what);
    }
    t_jump = &jb;
    memcpy(dst, src, n);
    t_jump = saved;
    return QMM_OK;
}
