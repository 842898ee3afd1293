/*
 * cli_files.h — file guards the CLI commands that write files share (cli_files.c):
 *   - cli_same_file: is the output path the same file as an input (refused unless --force);
 *   - cli_guard_temporaries: on SIGINT/SIGTERM/SIGHUP the process removes the temporary files of
 *     its unfinished writers (qmm_st_remove_temporaries) and then dies of the signal as before;
 *     SIGXFSZ is ignored, so a file size limit (ulimit -f) makes the write fail with EFBIG (an
 *     error message, the temporary file removed) instead of killing the process.
 */
#ifndef QMM_CLI_FILES_H
#define QMM_CLI_FILES_H

/* 1 if OUT names the same file as IN (same device and inode; a path through a symbolic or hard
 * link counts), 0 otherwise (also when either does not exist yet). */
int cli_same_file(const char *in, const char *out);

/* Installs the handlers described above. */
void cli_guard_temporaries(void);

#endif
