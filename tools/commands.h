/*
 * commands.h — the qmm CLI's subcommands. Each lives in its own file cmd_<name>.c, takes the
 * arguments after its name and returns the process exit status (0 ok, 1 failure/check failed,
 * 2 usage error). Only the CLI prints and exits; the library never does.
 */
#ifndef QMM_COMMANDS_H
#define QMM_COMMANDS_H

int cmd_info(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_tp(int argc, char **argv);

#endif
