/*
 * cmd_tp.c — `qmm tp`, run under `mpirun -np R qmm tp [options]`: builds a layer or a pair
 * (from a seed, the same on every rank; int8, or W4A8 with --w4a8) or loads it from a ComfyUI
 * INT8 or W4A8 checkpoint (each rank reads only its slice of the weights or codes), runs it split
 * across the ranks and once on rank 0 alone with the same
 * engine, and prints each rank's slice and median time, the single-process time and whether
 * the outputs are bit-identical (a NaN matches any NaN: payloads are unspecified). Exit 0 when
 * identical, 1 otherwise or on error, 2 on usage. Every rank must be given the same options (all
 * but --threads and --model's path): they are agreed on before the first collective.
 * Built without MPI it says so and exits 1.
 */
#include "commands.h"

#include <stdio.h>

#ifndef QMM_WITH_MPI
int cmd_tp(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "qmm tp: tensor parallelism is not built (libqmm was built without MPI; install "
                    "libopenmpi-dev and rebuild)\n");
    return 1;
}
#else

#include "qmm.h"
#include "qmm_dist.h"
#include "qmm_io.h"

#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: mpirun -np R qmm tp [options]\n"
            "  --layer column|row|mlp|attn   what to split (default mlp)\n"
            "  --M m            tokens (default 256)\n"
            "  --K k            input width of the (first) layer (default 1024)\n"
            "  --N n            output width of the (last) layer (default 1024)\n"
            "  --F f            pairs: intermediate width per part (default 2048; fc1 is [2F,K], qkv [3F,K])\n"
            "  --head d         attn: head dim = split unit (default 128)\n"
            "  --gs g           convrot group of every layer: 0, 16, 64, 256 (default 0)\n"
            "  --w4a8 b         seeded layers as W4A8 with b-bit codes (4 or 6; group 16, e4m3 s_rel;\n"
            "                   default 0: int8)\n"
            "  --dtype t        x / intermediate / y dtype: bf16, f16, f32 (default bf16)\n"
            "  --engine e       auto (default) or an int8 engine name (ref, avx512_vnni, ...)\n"
            "  --threads t      threads per rank (default QMM_NUM_THREADS, else 1)\n"
            "  --iters n        timed runs, median reported (default 5)\n"
            "  --seed s         data seed (default 1)\n"
            "  --model FILE --first L [--second L2]\n"
            "                   load from a checkpoint: one layer (--layer column|row) or a pair\n"
            "                   (--layer mlp|attn: first = fc1/qkv, second = fc2/out_proj)\n");
}

typedef struct rng { uint64_t s; } rng;
static uint64_t rnext(rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float runif(rng *r) { return (float)((double)(rnext(r) >> 11) / 9007199254740992.0) * 2.0f - 1.0f; }

/* a random W4A8 layer [N, K] of b-bit codes, groups of 16, e4m3 s_rel in [2, 16) (owned buffers
 * in mem[0..2]) */
static void gen_w4a8(rng *r, const char *name, int64_t N, int64_t K, int gs, int b, qmm_tp_layer *l, void **mem) {
    const int64_t nc = N * K / 8 * b, ns = N * K / 16; /* N*K <= 2^36: layer_fits */
    uint8_t *c = malloc((size_t)nc), *sr = malloc((size_t)ns);
    float *sc = malloc((size_t)N * sizeof(float));
    mem[0] = c;
    mem[1] = sr;
    mem[2] = sc;
    if (!c || !sr || !sc) return;
    for (int64_t i = 0; i < nc; i++) c[i] = (uint8_t)rnext(r);
    for (int64_t i = 0; i < ns; i++) sr[i] = (uint8_t)((8 + rnext(r) % 4) << 3 | rnext(r) % 8); /* 2^(e-7)(1+m/8) */
    for (int64_t n = 0; n < N; n++) sc[n] = 1e-3f * (1.0f + runif(r) * 0.5f);
    memset(l, 0, sizeof *l);
    l->format = QMM_TP_W4A8;
    qmm_w4a8_desc *d = &l->w4a8;
    *d = qmm_w4a8_desc_default();
    d->name = name;
    d->N = N;
    d->K = K;
    d->bits = b;
    d->codes = c;
    d->codes_bytes = nc;
    d->s_rel = sr;
    d->n_s_rel = ns;
    d->s_channel = sc;
    d->convrot_gs = gs;
}

static int64_t lay_N(const qmm_tp_layer *l) { return l->format == QMM_TP_W4A8 ? l->w4a8.N : l->int8.N; }
static int64_t lay_K(const qmm_tp_layer *l) { return l->format == QMM_TP_W4A8 ? l->w4a8.K : l->int8.K; }

/* the single-process weight of a full layer */
static qmm_status single_weight(qmm_context *ctx, const qmm_tp_layer *l, qmm_weight **w) {
    return l->format == QMM_TP_W4A8 ? qmm_weight_borrow_w4a8(ctx, &l->w4a8, w)
                                    : qmm_weight_create_int8(ctx, &l->int8, w);
}

/* a random int8 layer [N, K] (owned buffers in *mem) */
static void gen_layer(rng *r, const char *name, int64_t N, int64_t K, int gs, qmm_weight_desc *d, void **mem) {
    int8_t *w = malloc((size_t)N * (size_t)K); /* N*K <= 2^36: layer_fits */
    float *s = malloc((size_t)N * sizeof(float));
    if (!w || !s) {
        free(w);
        free(s);
        *mem = NULL;
        return;
    }
    for (int64_t i = 0; i < N * K; i++) w[i] = (int8_t)((int)(rnext(r) % 255) - 127);
    for (int64_t n = 0; n < N; n++) s[n] = 1e-3f * (1.0f + runif(r) * 0.5f);
    *d = qmm_weight_desc_default();
    d->name = name;
    d->N = N;
    d->K = K;
    d->data = w;
    d->scale = s;
    d->n_scale = N;
    d->convrot_gs = gs;
    mem[0] = w;
    mem[1] = s;
}

/* element i of p (dtype t) as a float, and v stored there (qmm_convert: SPEC T()) */
static float load_f(const void *p, qmm_dtype t, int64_t i) {
    float v = 0.0f;
    (void)qmm_convert((const char *)p + (size_t)i * qmm_dtype_size(t), t, &v, QMM_F32, 1);
    return v;
}
static void store_f(void *p, qmm_dtype t, int64_t i, float v) {
    (void)qmm_convert(&v, QMM_F32, (char *)p + (size_t)i * qmm_dtype_size(t), t, 1);
}

/* the column-local stand-in for an attention core: out[j] = T(q[j] * k[j] + v[j]) */
static qmm_status toy_core(void *user, int64_t M, const void *in, int64_t ld_in, void *out, int64_t ld_out,
                           int64_t F_r, qmm_dtype t) {
    (void)user;
    for (int64_t r = 0; r < M; r++)
        for (int64_t j = 0; j < F_r; j++) {
            float q = load_f(in, t, r * ld_in + j), k = load_f(in, t, r * ld_in + F_r + j),
                  v = load_f(in, t, r * ld_in + 2 * F_r + j);
            float qk = q * k;
            store_f(out, t, r * ld_out + j, qk + v);
        }
    return QMM_OK;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct opts {
    const char *layer, *model, *first, *second;
    int64_t M, K, N, F, head;
    int gs, threads, iters, w4a8;
    uint64_t seed;
    qmm_dtype t;
    qmm_engine_id engine;
} opts;

/* a whole decimal/hex/octal number in [lo, hi] (strtoll + errno + end), else a message and 0 */
static int num(const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 0);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "qmm tp: %s %s: needs a whole number in [%lld, %lld]\n", opt, v, (long long)lo, (long long)hi);
        return 0;
    }
    *out = x;
    return 1;
}

/* the CLI's limits: each dimension as qmm_weight_create_int8's (<= 2^31) */
#define DIM_MAX ((int64_t)1 << 31)

/* 0: run, 1: --help, 2: usage error (printed, naming the option) */
static int parse(int argc, char **argv, opts *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
        if (!v) {
            fprintf(stderr, "qmm tp: %s needs a value\n", a);
            return 2;
        }
        i++;
        int64_t x = 0;
        int ok = 1;
        if (!strcmp(a, "--layer")) o->layer = v;
        else if (!strcmp(a, "--M")) ok = num(a, v, 1, DIM_MAX, &o->M);
        else if (!strcmp(a, "--K")) ok = num(a, v, 1, DIM_MAX, &o->K);
        else if (!strcmp(a, "--N")) ok = num(a, v, 1, DIM_MAX, &o->N);
        else if (!strcmp(a, "--F")) ok = num(a, v, 1, DIM_MAX, &o->F);
        else if (!strcmp(a, "--head")) ok = num(a, v, 1, DIM_MAX, &o->head);
        else if (!strcmp(a, "--gs")) ok = num(a, v, 0, 1 << 16, &x), o->gs = (int)x;
        else if (!strcmp(a, "--threads")) ok = num(a, v, 0, 4096, &x), o->threads = (int)x;
        else if (!strcmp(a, "--iters")) ok = num(a, v, 1, 1000000, &x), o->iters = (int)x;
        else if (!strcmp(a, "--w4a8")) {
            ok = num(a, v, 0, 6, &x), o->w4a8 = (int)x;
            if (ok && x != 0 && x != 4 && x != 6)
                ok = 0, fprintf(stderr, "qmm tp: --w4a8 %s: 4 or 6 bits (0: int8)\n", v);
        }
        else if (!strcmp(a, "--seed")) {
            char *end = NULL;
            errno = 0;
            o->seed = strtoull(v, &end, 0);
            if (errno || end == v || *end || strchr(v, '-')) {
                fprintf(stderr, "qmm tp: --seed %s: needs a whole number in [0, 2^64)\n", v);
                ok = 0;
            }
        } else if (!strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--first")) o->first = v;
        else if (!strcmp(a, "--second")) o->second = v;
        else if (!strcmp(a, "--dtype")) {
            if (!strcmp(v, "bf16")) o->t = QMM_BF16;
            else if (!strcmp(v, "f16")) o->t = QMM_F16;
            else if (!strcmp(v, "f32")) o->t = QMM_F32;
            else ok = 0, fprintf(stderr, "qmm tp: --dtype %s: bf16, f16 or f32\n", v);
        } else if (!strcmp(a, "--engine")) {
            o->engine = qmm_engine_from_name(v);
            if (o->engine == QMM_ENGINE_UNKNOWN) ok = 0, fprintf(stderr, "qmm tp: --engine %s: unknown\n", v);
        } else {
            fprintf(stderr, "qmm tp: unknown option %s\n", a);
            return 2;
        }
        if (!ok) return 2;
    }
    if (strcmp(o->layer, "column") && strcmp(o->layer, "row") && strcmp(o->layer, "mlp") && strcmp(o->layer, "attn")) {
        fprintf(stderr, "qmm tp: --layer %s: column, row, mlp or attn\n", o->layer);
        return 2;
    }
    if (o->model && !o->first) {
        fprintf(stderr, "qmm tp: --model needs --first\n");
        return 2;
    }
    return 0;
}

/* a * b * c when it stays <= 2^62 (every byte count and element count here), else -1 */
static int64_t mul3(int64_t a, int64_t b, int64_t c) {
    const int64_t lim = (int64_t)1 << 62;
    if (a < 0 || b < 0 || c < 0) return -1;
    if (a && b > lim / a) return -1;
    if (a * b != 0 && c > lim / (a * b)) return -1;
    return a * b * c;
}

/* a seeded layer [N, K] within qmm_weight_create_int8's limits (N*K <= 2^36), else a message */
static int layer_fits(const char *what, int64_t N, int64_t K) {
    int64_t e = mul3(N, K, 1);
    if (e >= 0 && e <= ((int64_t)1 << 36)) return 1;
    fprintf(stderr, "qmm tp: %s [%lld, %lld] too large (N*K <= 2^36 elements)\n", what, (long long)N, (long long)K);
    return 0;
}

static int64_t layer_id(const char *l) {
    static const char *const k[] = {"column", "row", "mlp", "attn"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(l, k[i])) return i;
    return -1;
}

static int64_t hash_str(const char *s) { /* FNV-1a, 0 for NULL: strings agreed on by hash */
    if (!s) return 0;
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (int64_t)(h >> 1);
}

/* Collective, before any other: every rank must run the same command line, except --threads
 * (per rank) and --model's path (per host; the checkpoint's content is checked at create by
 * the weight fingerprints). usage: 0 ok, 1 --help, 2 usage error on this rank. */
static qmm_status agree_options(qmm_comm *comm, const opts *o, int usage) {
    static const char *const names[] = {"a valid command line (0 ok, 1 --help, 2 usage error)",
                                        "--layer (0 column, 1 row, 2 mlp, 3 attn)", "--M", "--K",
                                        "--N", "--F", "--head", "--gs", "--dtype", "--engine", "--iters", "--seed",
                                        "--model (given or not)", "--first (hash)", "--second (hash)", "--w4a8"};
    const int64_t vals[] = {usage,
                            layer_id(o->layer),
                            o->M,
                            o->K,
                            o->N,
                            o->F,
                            o->head,
                            o->gs,
                            (int64_t)o->t,
                            (int64_t)o->engine,
                            o->iters,
                            (int64_t)o->seed,
                            o->model != NULL,
                            hash_str(o->first),
                            hash_str(o->second),
                            o->w4a8};
    return qmm_comm_agree_i64(comm, "qmm tp options", (int)(sizeof vals / sizeof vals[0]), names, vals);
}

/* everything one run needs; the split and the single-process versions share x and y shapes */
typedef struct job {
    opts o;
    int pair, attn;
    qmm_tp_layer d1, d2;     /* full layers (first, second) */
    int64_t K_in, N_out, F;
    qmm_tp_linear *T;
    qmm_tp_pair *P;
    qmm_weight *w1, *w2;     /* rank 0: the single-process weights */
    void *x, *y, *yref, *mid, *core;
} job;

static qmm_status run_split(job *j, qmm_context *ctx) {
    const opts *o = &j->o;
    if (j->pair) return qmm_tp_pair_run(j->P, ctx, o->M, j->x, o->t, 0, o->t, j->y, o->t, 0, o->engine);
    qmm_linear_args a = qmm_linear_args_default();
    a.M = o->M;
    a.x = j->x;
    a.x_dtype = o->t;
    a.y = j->y;
    a.y_dtype = o->t;
    a.engine = o->engine;
    return qmm_tp_linear_run(j->T, ctx, &a, strcmp(o->layer, "row") ? 0 : QMM_TP_X_FULL);
}

static qmm_status run_single(job *j, qmm_context *ctx) {
    const opts *o = &j->o;
    qmm_linear_args a = qmm_linear_args_default();
    a.M = o->M;
    a.x = j->x;
    a.x_dtype = o->t;
    a.y = j->pair ? j->mid : j->yref;
    a.y_dtype = o->t;
    a.engine = o->engine;
    qmm_status st = qmm_linear(ctx, j->w1, &a);
    if (st != QMM_OK || !j->pair) return st;
    if (j->attn) {
        st = toy_core(NULL, o->M, j->mid, 3 * j->F, j->core, j->F, j->F, o->t);
        if (st != QMM_OK) return st;
    }
    a.x = j->attn ? j->core : j->mid;
    a.act = j->attn ? QMM_ACT_NONE : QMM_ACT_SWIGLU;
    a.y = j->yref;
    return qmm_linear(ctx, j->w2, &a);
}

/* median seconds of iters runs (after one warm-up), each started together (barrier) */
static qmm_status timed(qmm_status (*fn)(job *, qmm_context *), job *j, qmm_context *ctx, int sync, double *med) {
    double *t = calloc((size_t)j->o.iters, sizeof *t);
    if (!t) return QMM_ERR_OUT_OF_MEMORY;
    qmm_status st = fn(j, ctx);
    for (int i = 0; st == QMM_OK && i < j->o.iters; i++) {
        if (sync) MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        st = fn(j, ctx);
        t[i] = MPI_Wtime() - t0;
    }
    qsort(t, (size_t)j->o.iters, sizeof *t, cmp_double);
    *med = t[j->o.iters / 2];
    free(t);
    return st;
}

/* rank-0-prints an error and returns 1 everywhere once every rank knows (collective) */
static int all_ok(qmm_status st, int rank, const char *what) {
    int bad = st != QMM_OK, any = 0;
    if (bad) fprintf(stderr, "qmm tp: rank %d: %s: %s: %s\n", rank, what, qmm_status_name(st), qmm_last_error());
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return !any;
}

int cmd_tp(int argc, char **argv) {
    opts o = {"mlp", NULL, NULL, NULL, 256, 1024, 1024, 2048, 128, 0, 0, 5, 0, 1, QMM_BF16, QMM_ENGINE_AUTO};
    int pr = parse(argc, argv, &o);
    /* under a launcher a rank with a usage error (or --help) still meets the others in the option
     * agreement, so they stop with an error instead of waiting for it */
    const int launched = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_SIZE");
    if (pr && !launched) {
        usage(pr == 1 ? stdout : stderr);
        return pr == 1 ? 0 : 2;
    }
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) MPI_Init(&argc, &argv);
    int rc = 1;
    qmm_comm *comm = NULL;
    qmm_context *ctx = NULL;
    qmm_model *model = NULL;
    void *mem[6] = {0}, *own1 = NULL, *own2 = NULL;
    job j;
    memset(&j, 0, sizeof j);
    j.o = o;
    j.pair = !strcmp(o.layer, "mlp") || !strcmp(o.layer, "attn");
    j.attn = !strcmp(o.layer, "attn");
    qmm_status st = qmm_comm_create_mpi(NULL, &comm);
    if (st != QMM_OK) {
        fprintf(stderr, "qmm tp: %s\n", qmm_last_error());
        MPI_Finalize();
        return 1;
    }
    const int rank = comm->rank, size = comm->size;
    st = agree_options(comm, &o, pr);
    if (st != QMM_OK || pr) { /* the same verdict on every rank */
        if (st != QMM_OK && rank == 0) fprintf(stderr, "qmm tp: %s: %s\n", qmm_status_name(st), qmm_last_error());
        if (st == QMM_OK && rank == 0) usage(pr == 1 ? stdout : stderr);
        qmm_comm_destroy(comm);
        MPI_Finalize();
        return st != QMM_OK ? 1 : pr == 1 ? 0 : 2;
    }
    qmm_context_options co = qmm_context_options_default();
    co.n_threads = o.threads > 0 ? o.threads : getenv("QMM_NUM_THREADS") ? 0 : 1;
    st = qmm_context_create(&co, &ctx);
    /* the layers: from the checkpoint or from the seed (the same on every rank) */
    if (st == QMM_OK && o.model) {
        st = qmm_model_open(o.model, NULL, &model);
        if (st == QMM_OK) st = qmm_tp_layer_from_model(model, o.first, &j.d1, &own1);
        if (st == QMM_OK && j.pair) {
            if (!o.second) {
                fprintf(stderr, "qmm tp: --layer %s needs --second\n", o.layer);
                st = QMM_ERR_INVALID_ARGUMENT;
            } else {
                st = qmm_tp_layer_from_model(model, o.second, &j.d2, &own2);
            }
        }
    } else if (st == QMM_OK) {
        rng r = {o.seed * 0x9E3779B97F4A7C15ull + 7};
        const int64_t rows1 = j.pair ? (j.attn ? 3 : 2) * o.F : o.N;
        if (!layer_fits("first layer", rows1, o.K) || (j.pair && !layer_fits("second layer", o.N, o.F)))
            st = QMM_ERR_UNSUPPORTED;
        else if (o.w4a8 && (o.K % (o.w4a8 == 6 ? 32 : 16) || (j.pair && o.F % (o.w4a8 == 6 ? 32 : 16)))) {
            fprintf(stderr, "qmm tp: --w4a8 %d needs --K%s a multiple of %d\n", o.w4a8, j.pair ? " and --F" : "",
                    o.w4a8 == 6 ? 32 : 16);
            st = QMM_ERR_INVALID_ARGUMENT;
        } else {
            const char *n1 = !j.pair ? (strcmp(o.layer, "row") ? "column" : "row") : j.attn ? "attn.qkv" : "mlp.fc1";
            const int64_t N1 = j.pair ? (j.attn ? 3 : 2) * o.F : o.N;
            if (o.w4a8) {
                gen_w4a8(&r, n1, N1, o.K, o.gs, o.w4a8, &j.d1, mem);
                if (j.pair) gen_w4a8(&r, j.attn ? "attn.out_proj" : "mlp.fc2", o.N, o.F, o.gs, o.w4a8, &j.d2, mem + 3);
            } else {
                gen_layer(&r, n1, N1, o.K, o.gs, &j.d1.int8, mem);
                if (j.pair) gen_layer(&r, j.attn ? "attn.out_proj" : "mlp.fc2", o.N, o.F, o.gs, &j.d2.int8, mem + 3);
            }
            const int per = o.w4a8 ? 3 : 2;
            for (int i = 0; i < (j.pair ? 2 : 1) * 3; i++)
                if (i % 3 < per && !mem[i]) st = QMM_ERR_OUT_OF_MEMORY;
        }
    }
    if (!all_ok(st, rank, "setup")) goto done;
    if (j.pair) {
        j.F = lay_K(&j.d2);
        j.K_in = lay_K(&j.d1);
        j.N_out = lay_N(&j.d2);
        qmm_tp_pair_options po;
        memset(&po, 0, sizeof po);
        po.act = j.attn ? QMM_ACT_NONE : QMM_ACT_SWIGLU;
        po.parts = j.attn ? 3 : 2;
        po.unit = j.attn ? o.head : 1;
        po.core = j.attn ? toy_core : NULL;
        st = qmm_tp_pair_create_layers(ctx, comm, &j.d1, &j.d2, &po, &j.P);
    } else {
        j.K_in = lay_K(&j.d1);
        j.N_out = lay_N(&j.d1);
        qmm_tp_options to = qmm_tp_options_default();
        to.kind = strcmp(o.layer, "row") ? QMM_TP_COLUMN : QMM_TP_ROW;
        st = qmm_tp_linear_create_layer(ctx, comm, &j.d1, &to, &j.T);
    }
    if (st != QMM_OK) { /* collective: the same error on every rank */
        if (rank == 0) fprintf(stderr, "qmm tp: %s: %s\n", qmm_status_name(st), qmm_last_error());
        goto done;
    }
    const int64_t es = (int64_t)qmm_dtype_size(o.t);
    /* byte counts of x, y and the single-process intermediates (the same on every rank) */
    const int64_t nx = mul3(o.M, j.K_in, es), ny = mul3(o.M, j.N_out, es), nmid = mul3(o.M, lay_N(&j.d1), es),
                  ncore = mul3(o.M, j.F, es);
    if (nx < 0 || ny < 0 || nmid < 0 || ncore < 0) {
        if (rank == 0)
            fprintf(stderr, "qmm tp: --M %lld tokens with these layers: buffer sizes overflow (at most 2^62 bytes)\n",
                    (long long)o.M);
        goto done;
    }
    j.x = malloc((size_t)nx);
    j.y = malloc((size_t)ny);
    j.yref = malloc((size_t)ny);
    st = j.x && j.y && j.yref ? QMM_OK : QMM_ERR_OUT_OF_MEMORY;
    if (st == QMM_OK) {
        rng r = {o.seed * 31 + 5};
        for (int64_t i = 0; i < nx / es; i++) store_f(j.x, o.t, i, runif(&r));
    }
    if (st == QMM_OK && rank == 0) { /* the single-process weights */
        st = single_weight(ctx, &j.d1, &j.w1);
        if (st == QMM_OK && j.pair) {
            st = single_weight(ctx, &j.d2, &j.w2);
            j.mid = malloc((size_t)nmid);
            j.core = malloc((size_t)ncore);
            if (st == QMM_OK && (!j.mid || !j.core)) st = QMM_ERR_OUT_OF_MEMORY;
        }
    }
    if (!all_ok(st, rank, "buffers")) goto done;
    double t_split = 0, t_one = 0;
    st = timed(run_split, &j, ctx, 1, &t_split);
    if (st != QMM_OK) {
        if (rank == 0) fprintf(stderr, "qmm tp: %s: %s\n", qmm_status_name(st), qmm_last_error());
        goto done;
    }
    if (rank == 0) st = timed(run_single, &j, ctx, 0, &t_one);
    if (!all_ok(st, rank, "single-process run")) goto done;
    /* compare every rank's split output with rank 0's single-process output */
    if (!all_ok(comm->broadcast(comm, j.yref, (size_t)ny, 0), rank, "broadcast")) goto done;
    /* the first differing element: bits, except that a NaN matches any NaN (NaN payloads and signs
     * are unspecified: engines may return the bias's NaN or the default one) */
    long long diff = -1;
    for (int64_t i = 0; i < ny / es && diff < 0; i++)
        if (memcmp((const char *)j.y + i * es, (const char *)j.yref + i * es, (size_t)es) &&
            !(isnan(load_f(j.y, o.t, i)) && isnan(load_f(j.yref, o.t, i))))
            diff = (long long)i;
    double *times = rank == 0 ? calloc((size_t)size, sizeof *times) : NULL;
    long long *diffs = rank == 0 ? calloc((size_t)size, sizeof *diffs) : NULL;
    MPI_Gather(&t_split, 1, MPI_DOUBLE, times, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Gather(&diff, 1, MPI_LONG_LONG, diffs, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    int same = diff < 0, all_same = 0;
    MPI_Allreduce(&same, &all_same, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0) {
        qmm_counters cn;
        qmm_get_counters(ctx, &cn);
        const char *ran = "?";
        for (int e = 0; e < QMM_ENGINE_MAX; e++)
            if (cn.op[QMM_OP_LINEAR].calls[e]) ran = qmm_engine_name((qmm_engine_id)e);
        printf("qmm tp: %s, %d ranks x %d threads, M=%lld, %s%s, engine %s (rank 0 ran %s), dtype %s, gs %d\n",
               o.layer, size, qmm_context_threads(ctx), (long long)o.M, o.model ? "checkpoint " : "seeded ",
               j.pair ? "pair" : "layer", qmm_engine_name(o.engine), ran, qmm_dtype_name(o.t), o.gs);
        const char *f1 = j.d1.format == QMM_TP_W4A8 ? (j.d1.w4a8.bits == 6 ? "W6A8 " : "W4A8 ") : "int8 ",
                   *f2 = j.d2.format == QMM_TP_W4A8 ? (j.d2.w4a8.bits == 6 ? "W6A8 " : "W4A8 ") : "int8 ";
        if (j.pair) printf("  first %s[%lld, %lld] -> second %s[%lld, %lld]\n", f1, (long long)lay_N(&j.d1),
                           (long long)lay_K(&j.d1), f2, (long long)lay_N(&j.d2), (long long)lay_K(&j.d2));
        else printf("  layer %s[%lld, %lld]\n", f1, (long long)lay_N(&j.d1), (long long)lay_K(&j.d1));
        for (int r = 0; r < size; r++)
            printf("  rank %d: split run median %.3f ms%s\n", r, times[r] * 1e3,
                   diffs[r] < 0 ? "" : "  (output differs)");
        printf("  one process (rank 0): median %.3f ms (%d iters)\n", t_one * 1e3, o.iters);
        printf("bit-identical: %s\n", all_same ? "yes" : "NO");
        for (int r = 0; r < size && !all_same; r++)
            if (diffs[r] >= 0) printf("  rank %d: first differing element %lld\n", r, diffs[r]);
    }
    free(times);
    free(diffs);
    rc = all_same ? 0 : 1;
done:
    qmm_tp_linear_destroy(j.T);
    qmm_tp_pair_destroy(j.P);
    qmm_weight_destroy(j.w1);
    qmm_weight_destroy(j.w2);
    free(j.x);
    free(j.y);
    free(j.yref);
    free(j.mid);
    free(j.core);
    for (int i = 0; i < 6; i++) free(mem[i]);
    qmm_tp_desc_release(own1);
    qmm_tp_desc_release(own2);
    qmm_model_close(model);
    qmm_context_destroy(ctx);
    qmm_comm_destroy(comm);
    MPI_Finalize();
    return rc;
}
#endif
