/* cmd_run.c — placeholder: `qmm run` is not implemented yet. */
#include "commands.h"

#include <stdio.h>

int cmd_run(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "qmm run: not implemented yet\n");
    return 1;
}
