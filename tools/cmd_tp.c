/* cmd_tp.c — placeholder: `qmm tp` is not implemented yet. */
#include "commands.h"

#include <stdio.h>

int cmd_tp(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "qmm tp: not implemented yet\n");
    return 1;
}
