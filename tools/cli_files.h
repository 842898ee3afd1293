/*
 * cli_files.h — file guards the CLI commands that write files share (cli_files.c):
 *   - cli_same_file: is the output path the same file as an input (refused unless --force).
 */
#ifndef QMM_CLI_FILES_H
#define QMM_CLI_FILES_H

/* 1 if OUT names the same file as IN (same device and inode; a path through a symbolic or hard
 * link counts), 0 otherwise (also when either does not exist yet). */
int cli_same_file(const char *in, const char *out);

#endif
