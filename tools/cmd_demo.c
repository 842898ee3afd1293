/* cmd_demo.c — placeholder: `qmm demo` is not implemented yet. */
#include "commands.h"

#include <stdio.h>

int cmd_demo(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "qmm demo: not implemented yet\n");
    return 1;
}
