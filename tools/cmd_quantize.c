/* cmd_quantize.c — placeholder: `qmm quantize` is not implemented yet. */
#include "commands.h"

#include <stdio.h>

int cmd_quantize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "qmm quantize: not implemented yet\n");
    return 1;
}
