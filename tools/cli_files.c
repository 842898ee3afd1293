/*
 * cli_files.c — file guards shared by the writing commands (contract in cli_files.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "cli_files.h"

#include <sys/stat.h>

int cli_same_file(const char *in, const char *out) {
    struct stat a, b;
    if (!in || !out || stat(in, &a) != 0 || stat(out, &b) != 0) return 0;
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}
