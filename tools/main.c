/*
 * main.c — the command-line tool: `qmm <command> [options]`. See `qmm help`.
 */
#include "commands.h"
#include "qmm.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} k_commands[] = {
    {"info", cmd_info, "this machine's CPU features and qmm engines [--json]"},
    {"demo", cmd_demo, "a video-DiT block's linears + attention: INT8 vs W8A16 vs BF16 vs FP32"},
    {"bench", cmd_bench, "per-kernel benchmarks on real model shapes [--json]"},
    {"quantize", cmd_quantize, "float safetensors checkpoint -> ComfyUI INT8 checkpoint"},
    {"inspect", cmd_inspect, "list a checkpoint's layers, dtypes, quant formats"},
    {"plan", cmd_plan, "which engine runs each quantized layer of a checkpoint, and why"},
    {"run", cmd_run, "run one layer of a checkpoint on an input tensor"},
    {"tp", cmd_tp, "tensor-parallel layers across MPI ranks (under mpirun)"},
};

static void usage(FILE *f) {
    fprintf(f, "qmm %s — INT8 linear layers at the speed of the CPU's integer matrix engine\n\n"
               "usage: qmm <command> [options]   (qmm <command> --help)\n\ncommands:\n",
            qmm_version_string());
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        fprintf(f, "  %-9s %s\n", k_commands[i].name, k_commands[i].help);
    fprintf(f, "\nenvironment: QMM_NUM_THREADS, QMM_MAX_ISA=none|avx2|avx_vnni|avx512|avx512_vnni|avx512_bf16|amx,\n"
               "             QMM_VERBOSE=dispatch\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("qmm %s\n", qmm_version_string());
        return 0;
    }
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        if (!strcmp(argv[1], k_commands[i].name)) return k_commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "qmm: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
