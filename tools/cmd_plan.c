/* cmd_plan.c — placeholder: `qmm plan` is not implemented yet. */
#include "commands.h"

#include <stdio.h>

int cmd_plan(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "qmm plan: not implemented yet\n");
    return 1;
}
