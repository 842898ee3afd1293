/* cmd_inspect.c — placeholder: `qmm inspect` is not implemented yet. */
#include "commands.h"

#include <stdio.h>

int cmd_inspect(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "qmm inspect: not implemented yet\n");
    return 1;
}
