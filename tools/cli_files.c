/*
 * cli_files.c — file guards shared by the writing commands (contract in cli_files.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "cli_files.h"
#include "qmm_io.h"

#include <signal.h>
#include <string.h>
#include <sys/stat.h>

int cli_same_file(const char *in, const char *out) {
    struct stat a, b;
    if (!in || !out || stat(in, &a) != 0 || stat(out, &b) != 0) return 0;
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Async-signal-safe: unlink the temporaries, then die of the same signal (default action). */
static void on_fatal_signal(int sig) {
    qmm_st_remove_temporaries();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
    raise(sig);   /* blocked while this handler runs: delivered when it returns */
}

void cli_guard_temporaries(void) {
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaddset(&sa.sa_mask, sigs[i]);
    sa.sa_handler = on_fatal_signal;
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old;
        /* a signal the caller ignored (nohup, `&` in a non-interactive shell) stays ignored */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        sigaction(sigs[i], &sa, NULL);
    }
    signal(SIGXFSZ, SIG_IGN);
}
