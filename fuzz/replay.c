/*
 * replay.c — runs a libFuzzer target's LLVMFuzzerTestOneInput on every file of the folders
 * (or files) given, without libFuzzer: the committed corpus is replayed by the normal test
 * command (under ASan/UBSan in the sanitizer build). Exit 0 when every input ran, 1 if a
 * folder cannot be read; a crash is the test failure. Built with -DQMM_REPLAY_DONE=fn, it calls
 * int fn(void) of the target after the last input and exits 1 when that returns non-zero (the
 * target's own verdict on the whole corpus, e.g. that every path it covers ran).
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
#ifdef QMM_REPLAY_DONE
int QMM_REPLAY_DONE(void);
#endif

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "replay: cannot open %s\n", path); return 1; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(n > 0 ? (size_t)n : 1);   /* exactly n bytes: ASan sees any over-read */
    size_t got = p ? fread(p, 1, (size_t)(n > 0 ? n : 0), f) : 0;
    fclose(f);
    if (!p) return 1;
    LLVMFuzzerTestOneInput(p, got);
    free(p);
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    int bad = 0, runs = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) { fprintf(stderr, "replay: %s missing\n", argv[i]); bad = 1; continue; }
        if (!S_ISDIR(sb.st_mode)) { bad |= run_file(argv[i]); runs++; continue; }
        DIR *d = opendir(argv[i]);
        if (!d) { bad = 1; continue; }
        char **names = NULL;
        size_t n = 0;
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            char **nn = realloc(names, (n + 1) * sizeof *names);
            if (!nn) break;
            names = nn;
            size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
            names[n] = malloc(len);
            snprintf(names[n], len, "%s/%s", argv[i], e->d_name);
            n++;
        }
        closedir(d);
        qsort(names, n, sizeof *names, cmp_str);
        for (size_t k = 0; k < n; k++) {
            bad |= run_file(names[k]);
            runs++;
            free(names[k]);
        }
        free(names);
    }
    printf("replay: %d inputs%s\n", runs, bad ? " (some could not be read)" : "");
#ifdef QMM_REPLAY_DONE
    if (QMM_REPLAY_DONE()) bad = 1;
#endif
    return bad || runs == 0;
}
