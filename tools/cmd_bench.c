/* cmd_bench.c — placeholder: `qmm bench` is not implemented yet. */
#include "commands.h"

#include <stdio.h>

int cmd_bench(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "qmm bench: not implemented yet\n");
    return 1;
}
