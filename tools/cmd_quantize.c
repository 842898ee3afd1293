/*
 * cmd_quantize.c — `qmm quantize IN OUT [--convrot auto|off|G] [--per-tensor]
 * [--min-size N] [--include GLOB]... [--exclude GLOB]... [--format int8] [--force]`: a float (F32/F16/BF16) safetensors
 * checkpoint → a ComfyUI INT8 checkpoint (SPEC §2, §3) through qmm_quantize_file, which streams
 * one layer at a time. A progress bar (layers, bytes, ETA) is drawn on stderr only when stderr
 * is a terminal. OUT the same file as IN is refused unless --force. --format w4a8 is refused with
 * the reason (exit 1): comfy-kitchen's W4A8 quantizer cannot be matched bit for bit (SPEC §11).
 * Exit 0 ok, 1 failure, 2 usage.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli_files.h"
#include "commands.h"
#include "qmm_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: qmm quantize IN.safetensors OUT.safetensors [options]\n"
            "  --convrot auto|off|G          rotation group G, a power of 4 (auto: largest of 256/64/16 dividing K;\n"
            "                                default auto)\n"
            "  --per-tensor                  one weight scale per layer (default: one per output row)\n"
            "  --min-size N                  keep layers with min(N, K) < N in float (default 256)\n"
            "  --include GLOB                only layers whose name matches (repeatable; also admits embeddings)\n"
            "  --exclude GLOB                never these layers (repeatable)\n"
            "  --force                       write OUT even when it is the same file as IN\n"
            "  --format int8                 the only format written (int8_tensorwise). --format w4a8 is refused:\n"
            "                                comfy-kitchen's W4A8 quantizer cannot be matched bit for bit (its\n"
            "                                ConvRot is a float matmul, its group-scale refinement sums in torch's\n"
            "                                reduction order, its codebook gate samples with torch's RNG; SPEC §11),\n"
            "                                and qmm writes no look-alike: quantize W4A8 with the kitchen\n"
            "                                (AsymW4A8Int8Layout.quantize); qmm inspects and runs the file.\n"
            "Layers are L for each 2-D float tensor L.weight; embeddings and norms stay float by default.\n"
            "Writes L.weight I8 [N,K], L.weight_scale F32 [N,1], L.comfy_quant (JSON as json.dumps writes it);\n"
            "everything else and __metadata__ are copied unchanged.\n");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct bar { double t0; } bar;

static void progress(void *user, int64_t ld, int64_t lt, uint64_t bd, uint64_t bt) {
    bar *b = user;
    double el = now_s() - b->t0, frac = bt ? (double)bd / (double)bt : 1.0;
    int w = 30, fill = (int)(frac * w + 0.5);
    char line[w + 1];
    for (int i = 0; i < w; i++) line[i] = i < fill ? '#' : '.';
    line[w] = 0;
    double eta = frac > 0 ? el * (1 - frac) / frac : 0;
    fprintf(stderr, "\r[%s] %lld/%lld layers  %.2f/%.2f GiB  ETA %dm%02ds ", line, (long long)ld, (long long)lt,
            (double)bd / (1 << 30), (double)bt / (1 << 30), (int)eta / 60, (int)eta % 60);
    if (bd == bt) fputc('\n', stderr);
    fflush(stderr);
}

/* "4", "16", "64", ...: digits spelling a power of 4 */
static int power_of_4(const char *v) {
    if (!*v || strlen(v) > 9 || strspn(v, "0123456789") != strlen(v)) return 0;
    long g = atol(v);
    while (g > 1 && g % 4 == 0) g /= 4;
    return g == 1 && atol(v) >= 4;
}

int cmd_quantize(int argc, char **argv) {
    qmm_quantize_file_options o = qmm_quantize_file_options_default();
    const char *in = NULL, *out = NULL;
    const char **inc = calloc((size_t)argc + 1, sizeof *inc), **exc = calloc((size_t)argc + 1, sizeof *exc);
    int ni = 0, ne = 0, rc = 2, force = 0;
    if (!inc || !exc) { fprintf(stderr, "qmm quantize: out of memory\n"); rc = 1; goto done; }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); rc = 0; goto done; }
        else if (!strcmp(a, "--per-tensor")) o.per_tensor = 1;
        else if (!strcmp(a, "--force")) force = 1;
        else if (!strcmp(a, "--format") && has) {
            const char *v = argv[++i];
            if (!strcmp(v, "w4a8") || !strcmp(v, "asym_w4a8_int8")) {
                fprintf(stderr, "qmm quantize: --format %s is not written by qmm: comfy-kitchen's W4A8 quantizer cannot "
                                "be matched bit for bit (see qmm quantize --help, SPEC §11); quantize with the kitchen's "
                                "AsymW4A8Int8Layout.quantize and run the file with qmm\n", v);
                rc = 1;
                goto done;
            }
            if (strcmp(v, "int8") != 0 && strcmp(v, "int8_tensorwise") != 0) {
                fprintf(stderr, "qmm quantize: --format %s (int8)\n", v);
                goto done;
            }
        }
        else if (!strcmp(a, "--convrot") && has) {
            const char *v = argv[++i];
            if (!strcmp(v, "auto")) o.convrot = -1;
            else if (!strcmp(v, "off") || !strcmp(v, "0")) o.convrot = 0;
            else if (power_of_4(v)) o.convrot = atoi(v); /* the library checks its range */
            else { fprintf(stderr, "qmm quantize: --convrot %s (auto, off or a power of 4: 4, 16, 64, 256, 1024...)\n", v); goto done; }
        } else if (!strcmp(a, "--min-size") && has) {
            char *end;
            long long v = strtoll(argv[++i], &end, 10);
            if (*end || v < 0) { fprintf(stderr, "qmm quantize: --min-size %s\n", argv[i]); goto done; }
            o.min_size = v;
        } else if (!strcmp(a, "--include") && has) inc[ni++] = argv[++i];
        else if (!strcmp(a, "--exclude") && has) exc[ne++] = argv[++i];
        else if (a[0] == '-' && a[1]) { fprintf(stderr, "qmm quantize: unknown option '%s'\n", a); usage(stderr); goto done; }
        else if (!in) in = a;
        else if (!out) out = a;
        else { fprintf(stderr, "qmm quantize: extra argument '%s'\n", a); goto done; }
    }
    if (!in || !out) { usage(stderr); goto done; }
    if (!force && cli_same_file(in, out)) {
        fprintf(stderr, "qmm quantize: %s is the same file as %s: refusing to replace the input (--force to do it)\n",
                out, in);
        rc = 1;
        goto done;
    }
    o.include = ni ? inc : NULL;
    o.exclude = ne ? exc : NULL;
    bar b = {now_s()};
    if (isatty(2)) {
        o.progress = progress;
        o.progress_user = &b;
    }
    int64_t n = 0;
    cli_guard_temporaries();   /* a signal or ulimit -f leaves no OUT.qmm-tmp.* behind */
    qmm_status st = qmm_quantize_file(in, out, &o, &n);
    if (st != QMM_OK) {
        fprintf(stderr, "qmm quantize: %s: %s\n", qmm_status_name(st), qmm_last_error());
        rc = 1;
        goto done;
    }
    printf("quantized %lld layer%s: %s -> %s (%.1f s)\n", (long long)n, n == 1 ? "" : "s", in, out, now_s() - b.t0);
    rc = 0;
done:
    free(inc);
    free(exc);
    return rc;
}
