/*
 * cmd_demo.c — `qmm demo`: the main job. One video-DiT block's matrix work — its linear layers
 * and its attention (SPEC §3/§8/§10: hidden 5376, 56 heads × 128, FFN 14336 with SwiGLU) — with
 * weights built from a fixed seed with the statistics real layers have (heavy-tailed weights, a
 * few outlier input channels in the activations), quantized by the library's SPEC §2 quantizer
 * (the code `qmm quantize` uses; convrot g = 256, per-row scales), then the block's chain run
 * through every path, five parts:
 *
 *   x → qkv_proj → attention → out_proj
 *   x → fc1 → (SwiGLU fused into fc2's input) → fc2
 *
 * attention: q, k, v are the thirds of the path's own qkv_proj output [M, 3 · 56 · 128], read in
 * place as ComfyUI's [B, S, H·D] layout (strides, no copies); its output [M, 56 · 128] is
 * out_proj's input. Self-attention over the M tokens, no mask; ops 4·S·Skv·D·heads (as
 * python/qmm/bench/attention.py counts them).
 *
 *   path           linears                                   attention (qmm_attention)
 *   INT8 convrot   the int8 engine dispatch picks            mode int8 (the kitchen's recipe)
 *   INT8 no rot    same, weights quantized without rotation  mode int8
 *   W8A16          the int8 weights on the best bf16 engine  mode best (bf16 operands where the
 *   BF16           bf16 weights on the best bf16 engine      mode best  CPU runs them faster, else f32)
 *   FP32           f32 weights on the best f32 engine        mode f32
 *
 * The engine of every part is printed. Mode int8 where no int8 engine offers attention runs on a
 * float engine (the library's counted fallback): its engine is marked '*'.
 *
 * FP32 runs its linears on a reduced token count m (--fp32-tokens), their times scaled to M
 * linearly (× M/m), and its attention at the full M tokens, timed as it ran: attention is
 * quadratic in tokens, and m query rows against M keys is no honest stand-in either (each head's
 * setup is shared by fewer rows: scaled up it overstated FP32's time by 1.5× at --small, 2048
 * tokens, m = 256). Its q, k, v for rows [m, M) come from its qkv_proj run once more on those
 * rows, untimed.
 *
 * Accuracy of every path and part is measured against the FP32 path (an fp32 computation with the
 * unquantized weights) on the rows the FP32 path ran: relative Frobenius error and cosine. Each
 * path's attention reads its own qkv_proj's q, k, v, so attention's and out_proj's figures are the
 * whole chain's error up to that part, not the attention kernel's alone.
 */
#define _POSIX_C_SOURCE 200809L
#include "commands.h"
#include "qmm.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { P_INT8, P_INT8_NOROT, P_W8A16, P_BF16, P_FP32, P_COUNT };
static const char *const k_path_names[P_COUNT] = {"INT8 convrot", "INT8 no-rot", "W8A16", "BF16", "FP32"};
static const char *const k_path_keys[P_COUNT] = {"int8_convrot", "int8_norot", "w8a16", "bf16", "fp32"};
/* The block's parts in the order its data flows; attention (L_ATTN) has no weight. */
enum { L_QKV, L_ATTN, L_OUT, L_FC1, L_FC2, L_COUNT };
static const char *const k_layer_names[L_COUNT] = {"qkv_proj", "attention", "out_proj", "fc1", "fc2"};
static const qmm_attn_mode k_attn_mode[P_COUNT] = {QMM_ATTN_INT8, QMM_ATTN_INT8, QMM_ATTN_BEST, QMM_ATTN_BEST,
                                                   QMM_ATTN_F32};
static const char *const k_attn_mode_names[QMM_ATTN_MODE_COUNT] = {"best", "f32", "int8"};
enum { HEAD_DIM = 128 };

typedef struct {
    int64_t N, K; /* attention: N = heads · HEAD_DIM (its output's width), K = HEAD_DIM */
    qmm_act act;
    qmm_weight *w[P_COUNT];
} layer;

typedef struct {
    double ms[L_COUNT];
    double rel[L_COUNT], cos[L_COUNT];
    qmm_engine_id engine[L_COUNT];
    int ok[L_COUNT];
    int fallback[L_COUNT]; /* attention in mode int8 ran on a float engine (SPEC §10's fallback) */
    char err[L_COUNT][256];
} path_result;

/* ---------------------------------------------------------------- deterministic data */
static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Heavy-tailed, roughly normal values: Irwin–Hall of 4 uniforms, 1 in 64 scaled by 4–8. */
static float heavy(uint64_t *s) {
    uint64_t r = mix(*s += 0x9E3779B97F4A7C15ull);
    float u = (float)(r & 0xffff) + (float)((r >> 16) & 0xffff) + (float)((r >> 32) & 0xffff) +
              (float)((r >> 48) & 0xffff);
    float v = (u - 131070.0f) * (1.0f / 37837.0f); /* ~ N(0, 1) */
    if ((mix(r) & 63) == 0) v *= 4.0f + (float)(mix(r + 1) & 3);
    return v;
}

typedef struct {
    float *w;
    int64_t N, K, n0, n1;
    uint64_t seed;
    int8_t *q_rot, *q_plain;
    float *s_rot, *s_plain;
    int status;
    char err[256]; /* qmm_last_error() is per thread: keep the worker's message */
} gen_job;

/* Rows [n0, n1): generate, then quantize with and without rotation (per-row: rows independent). */
static void *gen_rows(void *arg) {
    gen_job *j = arg;
    float std = 1.0f / sqrtf((float)j->K);
    for (int64_t n = j->n0; n < j->n1; n++) {
        uint64_t s = mix(j->seed ^ (uint64_t)(n * 0x100000001b3ull));
        float row_scale = std * (0.5f + (float)(mix(s) % 1000) / 1000.0f);
        for (int64_t k = 0; k < j->K; k++) j->w[n * j->K + k] = heavy(&s) * row_scale;
    }
    int64_t rows = j->n1 - j->n0;
    qmm_quant_options rot = {256, 0}, plain = {0, 0};
    int gs = 0;
    qmm_status st = qmm_quantize_weight(j->w + j->n0 * j->K, QMM_F32, rows, j->K, 0, &rot, j->q_rot + j->n0 * j->K,
                                        j->s_rot + j->n0, &gs);
    if (st == QMM_OK)
        st = qmm_quantize_weight(j->w + j->n0 * j->K, QMM_F32, rows, j->K, 0, &plain, j->q_plain + j->n0 * j->K,
                                 j->s_plain + j->n0, NULL);
    j->status = st;
    if (st != QMM_OK) snprintf(j->err, sizeof j->err, "%.250s", qmm_last_error());
    return NULL;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Builds every path's weight of one layer. Returns 0 on success. */
static int build_layer(qmm_context *ctx, layer *L, const char *name, uint64_t seed, int threads) {
    const int64_t N = L->N, K = L->K;
    size_t nk = (size_t)N * (size_t)K;
    float *w = malloc(nk * sizeof(float));
    int8_t *qr = malloc(nk), *qp = malloc(nk);
    float *sr = malloc((size_t)N * sizeof(float)), *sp = malloc((size_t)N * sizeof(float));
    uint16_t *wb = malloc(nk * sizeof(uint16_t));
    if (!w || !qr || !qp || !sr || !sp || !wb) {
        fprintf(stderr, "qmm demo: out of memory building %s\n", name);
        return 1;
    }
    int nt = threads < 1 ? 1 : threads > 16 ? 16 : threads;
    gen_job jobs[16];
    pthread_t th[16];
    for (int t = 0; t < nt; t++) {
        jobs[t] = (gen_job){w, N, K, N * t / nt, N * (t + 1) / nt, seed, qr, qp, sr, sp, 0, ""};
        pthread_create(&th[t], NULL, gen_rows, &jobs[t]);
    }
    int bad = -1;
    for (int t = 0; t < nt; t++) {
        pthread_join(th[t], NULL);
        if (jobs[t].status != QMM_OK) bad = t;
    }
    if (bad >= 0) {
        fprintf(stderr, "qmm demo: quantizing %s failed: %s\n", name, jobs[bad].err);
        return 1;
    }
    for (size_t i = 0; i < nk; i++) { /* bf16 weights for the BF16 baseline (RNE) */
        uint32_t u;
        memcpy(&u, &w[i], 4);
        wb[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    char nm[96];
    qmm_weight_desc d = qmm_weight_desc_default();
    d.N = N;
    d.K = K;
    d.n_scale = N;
    qmm_status st = QMM_OK;
    snprintf(nm, sizeof nm, "blocks.0.%s", name);
    d.name = nm;
    d.data = qr;
    d.scale = sr;
    d.convrot_gs = 256;
    if (st == QMM_OK) st = qmm_weight_create_int8(ctx, &d, &L->w[P_INT8]);
    L->w[P_W8A16] = L->w[P_INT8]; /* the same int8 weight, run on a float engine */
    d.data = qp;
    d.scale = sp;
    d.convrot_gs = 0;
    if (st == QMM_OK) st = qmm_weight_create_int8(ctx, &d, &L->w[P_INT8_NOROT]);
    if (st == QMM_OK) st = qmm_weight_create_float(ctx, nm, wb, QMM_BF16, N, K, 0, NULL, QMM_F32, &L->w[P_BF16]);
    if (st == QMM_OK) st = qmm_weight_create_float(ctx, nm, w, QMM_F32, N, K, 0, NULL, QMM_F32, &L->w[P_FP32]);
    free(w);
    free(qr);
    free(qp);
    free(sr);
    free(sp);
    free(wb);
    if (st != QMM_OK) {
        fprintf(stderr, "qmm demo: %s: %s\n", name, qmm_last_error());
        return 1;
    }
    return 0;
}

/* The first engine of the list that admits this call. */
static qmm_engine_id pick_engine(qmm_context *ctx, const qmm_weight *w, const qmm_linear_args *a,
                                 const qmm_engine_id *list, int n, char *why, size_t whyn) {
    why[0] = 0;
    qmm_plan_info p;
    if (qmm_plan(ctx, w, a, &p) != QMM_OK) { snprintf(why, whyn, "%.200s", qmm_last_error()); return QMM_ENGINE_AUTO; }
    for (int i = 0; i < n; i++)
        if (p.admitted[list[i]]) return list[i];
    snprintf(why, whyn, "%.20s: %.160s", qmm_engine_name(list[0]), p.reason[list[0]]);
    return QMM_ENGINE_AUTO;
}

static void accuracy(const void *y, qmm_dtype yt, const float *ref, int64_t rows, int64_t N, int64_t ld, double *rel,
                     double *cosine) {
    double num = 0, den = 0, dot = 0, nn = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t n = 0; n < N; n++) {
            double a, b = ref[r * ld + n];
            if (yt == QMM_BF16) {
                uint32_t u = (uint32_t)((const uint16_t *)y)[r * ld + n] << 16;
                float f;
                memcpy(&f, &u, 4);
                a = f;
            } else {
                a = ((const float *)y)[r * ld + n];
            }
            num += (a - b) * (a - b);
            den += b * b;
            dot += a * b;
            nn += a * a;
        }
    *rel = den > 0 ? sqrt(num / den) : 0;
    *cosine = (den > 0 && nn > 0) ? dot / sqrt(den * nn) : 0;
}

typedef struct {
    int64_t M, M32;
    int repeats, threads, json, small;
} demo_opts;

/* One run of the block: its parts, every path's buffers and results. */
typedef struct {
    qmm_context *ctx;
    demo_opts o;
    int64_t H, HD, QKV, heads;
    layer L[L_COUNT];
    const void *x[P_COUNT]; /* the block's input: bf16 [M, H], FP32's f32 [M, H] */
    /* per path: qkv [M, QKV] and attention [M, HD] (FP32 too: its attention runs all M tokens),
     * out_proj [rows, H], fc1 [rows, 2FF], fc2 [rows, H]; rows = M, FP32's M32 */
    void *buf[P_COUNT][L_COUNT];
    qmm_engine_id bf16_engines[QMM_ENGINE_MAX], f32_engines[QMM_ENGINE_MAX];
    int n_bf16, n_f32;
    double *times; /* [repeats] */
    path_result res[P_COUNT];
} demo;

/* The rows part l of path p runs: M, FP32's linears M32. */
static int64_t rows_of(const demo *d, int p, int l) { return p == P_FP32 && l != L_ATTN ? d->o.M32 : d->o.M; }

/* Multiply-adds × 2 of a linear, 4·S·Skv·D·heads of the attention, at the full M tokens. */
static double part_ops(const demo *d, int l) {
    const double M = (double)d->o.M;
    if (l == L_ATTN) return 4.0 * M * M * (double)HEAD_DIM * (double)d->heads;
    return 2.0 * M * (double)d->L[l].N * (double)d->L[l].K;
}

/* Times part l of path p: repeats calls, the median scaled to M tokens (FP32's linears linearly:
 * see the opening comment), then its accuracy against FP32's output of the part on its M32 rows. */
static void time_part(demo *d, int p, int l, const void *args) {
    path_result *r = &d->res[p];
    for (int i = 0; i < d->o.repeats; i++) {
        const double ts = now_ms();
        const qmm_status st = l == L_ATTN ? qmm_attention(d->ctx, args) : qmm_linear(d->ctx, d->L[l].w[p], args);
        if (st != QMM_OK) { snprintf(r->err[l], sizeof r->err[l], "%.250s", qmm_last_error()); return; }
        d->times[i] = now_ms() - ts;
    }
    qsort(d->times, (size_t)d->o.repeats, sizeof(double), cmp_double);
    r->ms[l] = d->times[d->o.repeats / 2] * (double)d->o.M / (double)rows_of(d, p, l);
    r->ok[l] = 1;
    const qmm_dtype dt = p == P_FP32 ? QMM_F32 : QMM_BF16;
    if (d->res[P_FP32].ok[l])
        accuracy(d->buf[p][l], dt, d->buf[P_FP32][l], d->o.M32, d->L[l].N, d->L[l].N, &r->rel[l], &r->cos[l]);
}

static void run_linear(demo *d, int p, int l) {
    const int64_t rows = rows_of(d, p, l);
    const qmm_dtype dt = p == P_FP32 ? QMM_F32 : QMM_BF16;
    path_result *r = &d->res[p];
    qmm_linear_args a = qmm_linear_args_default();
    a.M = rows;
    a.x_dtype = dt;
    a.y_dtype = dt;
    a.act = d->L[l].act;
    a.y = d->buf[p][l];
    switch (l) {
    case L_QKV:
    case L_FC1: a.x = d->x[p]; break;
    case L_OUT: a.x = d->buf[p][L_ATTN]; break; /* the attention's output: its first rows of [M, HD] */
    case L_FC2: a.x = d->buf[p][L_FC1]; break;
    }
    char why[256] = "";
    if (p == P_W8A16 || p == P_BF16)
        a.engine = pick_engine(d->ctx, d->L[l].w[p], &a, d->bf16_engines, d->n_bf16, why, sizeof why);
    else if (p == P_FP32)
        a.engine = pick_engine(d->ctx, d->L[l].w[p], &a, d->f32_engines, d->n_f32, why, sizeof why);
    if (p != P_INT8 && p != P_INT8_NOROT && a.engine == QMM_ENGINE_AUTO) {
        snprintf(r->err[l], sizeof r->err[l], "no engine: %.200s", why);
        return;
    }
    qmm_plan_info plan;
    qmm_plan(d->ctx, d->L[l].w[p], &a, &plan);
    r->engine[l] = a.engine != QMM_ENGINE_AUTO ? a.engine : plan.engine;
    if ((p == P_INT8 || p == P_INT8_NOROT) && (plan.engine == QMM_ENGINE_AUTO || plan.is_fallback)) {
        snprintf(r->err[l], sizeof r->err[l], "no int8 engine admits it here (%s)",
                 plan.engine == QMM_ENGINE_AUTO ? "none at all" : "would fall back");
        return;
    }
    time_part(d, p, l, &a);
    if (p == P_FP32 && l == L_QKV && r->ok[l] && d->o.M > rows) {
        /* the k and v of the tokens FP32's timed rows did not cover, for its attention: once, untimed */
        const size_t es = 4;
        a.M = d->o.M - rows;
        a.x = (const char *)d->x[p] + (size_t)(rows * d->H) * es;
        a.y = (char *)d->buf[p][l] + (size_t)(rows * d->QKV) * es;
        if (qmm_linear(d->ctx, d->L[l].w[p], &a) != QMM_OK) {
            snprintf(r->err[l], sizeof r->err[l], "%.250s", qmm_last_error());
            r->ok[l] = 0;
        }
    }
}

/* Attention over the M tokens (every path, FP32 too), its q, k, v the thirds of the path's
 * qkv_proj output read in place ([B, S, H·D]: strides {S·QKV, D, QKV}). */
static void run_attention(demo *d, int p) {
    const int64_t M = d->o.M;
    const qmm_dtype dt = p == P_FP32 ? QMM_F32 : QMM_BF16;
    const size_t es = p == P_FP32 ? 4 : 2;
    path_result *r = &d->res[p];
    if (!d->res[p].ok[L_QKV]) { snprintf(r->err[L_ATTN], sizeof r->err[L_ATTN], "qkv_proj did not run"); return; }
    const char *qkv = d->buf[p][L_QKV];
    qmm_attention_args a = qmm_attention_args_default();
    a.B = 1;
    a.H = a.Hkv = d->heads;
    a.S = M;
    a.Skv = M;
    a.D = HEAD_DIM;
    a.q = qkv;
    a.k = qkv + (size_t)d->HD * es;
    a.v = qkv + (size_t)(2 * d->HD) * es;
    a.q_dtype = a.kv_dtype = a.out_dtype = dt;
    const int64_t st[3] = {M * d->QKV, HEAD_DIM, d->QKV}, so[3] = {M * d->HD, HEAD_DIM, d->HD};
    memcpy(a.q_stride, st, sizeof st);
    memcpy(a.k_stride, st, sizeof st);
    memcpy(a.v_stride, st, sizeof st);
    memcpy(a.out_stride, so, sizeof so);
    a.out = d->buf[p][L_ATTN];
    a.mode = k_attn_mode[p];
    qmm_plan_info plan;
    if (qmm_attention_plan(d->ctx, &a, &plan) == QMM_OK) {
        r->engine[L_ATTN] = plan.engine;
        r->fallback[L_ATTN] = plan.is_fallback;
    }
    time_part(d, p, L_ATTN, &a); /* an engine-less call fails there, with the library's reasons */
}

static void usage(void) {
    printf("usage: qmm demo [--tokens M] [--fp32-tokens M] [--threads T] [--repeats R] [--small] [--json]\n"
           "  --tokens M       tokens through the block (default 1024; a 480P clip is about 15400)\n"
           "  --fp32-tokens M  tokens for the FP32 path's linears, whose times are scaled to M\n"
           "                   linearly (default min(M, 256)); its attention runs all M tokens\n"
           "  --small          a smaller block (hidden 1536, 16 heads, FFN 4096) for quick runs\n");
}

static void json_string(const char *s) {
    putchar('"');
    for (const char *c = s; *c; c++) {
        if (*c == '"' || *c == '\\') putchar('\\');
        putchar(*c);
    }
    putchar('"');
}

static void report_json(const demo *d, int T, double t_build, const double *tot, const int *all_ok, double ops_total) {
    const int64_t M = d->o.M, M32 = d->o.M32;
    const path_result *res = d->res;
    printf("{\"tokens\": %lld, \"fp32_tokens\": %lld, \"threads\": %d, \"hidden\": %lld, \"heads\": %lld, "
           "\"head_dim\": %d, \"cpu\": \"%s\", \"build_ms\": %.1f, \"fp32_attention_tokens\": %lld, \"parts\": [",
           (long long)M, (long long)M32, T, (long long)d->H, (long long)d->heads, HEAD_DIM, qmm_cpu_brand(), t_build,
           (long long)M);
    for (int l = 0; l < L_COUNT; l++) printf("%s\"%s\"", l ? ", " : "", k_layer_names[l]);
    printf("], \"rows\": [");
    int first = 1;
    for (int l = 0; l <= L_COUNT; l++)
        for (int p = 0; p < P_COUNT; p++) {
            const int is_total = l == L_COUNT;
            const int ok = is_total ? all_ok[p] : res[p].ok[l];
            const double ms = is_total ? tot[p] : res[p].ms[l];
            const double ops = is_total ? ops_total : part_ops(d, l);
            printf("%s\n  {\"layer\": \"%s\", \"kind\": \"%s\", \"path\": \"%s\", ", first ? "" : ",",
                   is_total ? "total" : k_layer_names[l], is_total ? "total" : l == L_ATTN ? "attention" : "linear",
                   k_path_keys[p]);
            if (l == L_ATTN)
                printf("\"heads\": %lld, \"head_dim\": %d, \"S\": %lld, \"Skv\": %lld, \"mode\": \"%s\", "
                       "\"fallback\": %s, ",
                       (long long)d->heads, HEAD_DIM, (long long)M, (long long)M,
                       k_attn_mode_names[k_attn_mode[p]], res[p].fallback[l] ? "true" : "false");
            else
                printf("\"N\": %lld, \"K\": %lld, ", (long long)(is_total ? 0 : d->L[l].N),
                       (long long)(is_total ? 0 : d->L[l].K));
            printf("\"M\": %lld, \"engine\": \"%s\", \"ok\": %s, \"ops\": %.6g", (long long)rows_of(d, p, l),
                   is_total ? "" : qmm_engine_name(res[p].engine[l]), ok ? "true" : "false", ops);
            first = 0;
            if (ok) {
                printf(", \"median_ms\": %.3f, \"tops\": %.4f", ms, ops / (ms * 1e9));
                if (all_ok[P_BF16] || (!is_total && res[P_BF16].ok[l]))
                    printf(", \"speedup_vs_bf16\": %.3f", (is_total ? tot[P_BF16] : res[P_BF16].ms[l]) / ms);
                if (all_ok[P_FP32] || (!is_total && res[P_FP32].ok[l]))
                    printf(", \"speedup_vs_fp32\": %.3f", (is_total ? tot[P_FP32] : res[P_FP32].ms[l]) / ms);
                if (!is_total) printf(", \"rel_err\": %.6g, \"cosine\": %.8f", res[p].rel[l], res[p].cos[l]);
            } else if (!is_total) {
                printf(", \"error\": ");
                json_string(res[p].err[l]);
            }
            printf("}");
        }
    printf("\n]}\n");
}

static void report_text(const demo *d, int T, double t_build, const double *tot, const int *all_ok, double ops_total) {
    const int64_t M = d->o.M, M32 = d->o.M32;
    const path_result *res = d->res;
    printf("\nqmm demo — one video-DiT block's matrix work: linears and attention (hidden %lld, %lld heads x %d, "
           "FFN %lld, SwiGLU)\n",
           (long long)d->H, (long long)d->heads, HEAD_DIM, (long long)d->L[L_FC2].K);
    printf("%lld tokens, %d threads, %s; median of %d; built + quantized in %.1f s\n", (long long)M, T,
           qmm_cpu_brand(), d->o.repeats, t_build / 1e3);
    printf("FP32 ran its linears on %lld of the %lld tokens (times scaled to %lld linearly) and its attention on\n"
           "all %lld (timed as run: attention is quadratic in tokens); accuracy is against FP32 on those %lld rows\n",
           (long long)M32, (long long)M, (long long)M, (long long)M, (long long)M32);
    printf("attention: q, k, v from each path's own qkv_proj (so its error is the chain's so far); ops 4*S*S*%d*%lld;\n"
           "mode int8 (INT8 paths), best (W8A16, BF16: bf16 operands where the CPU has them, else f32), f32 (FP32)\n\n",
           HEAD_DIM, (long long)d->heads);
    printf("%-9s %-12s %-13s %-12s %10s %9s %8s %8s %10s %10s\n", "part", "shape", "path", "engine", "median ms",
           "T(FL)OP/s", "vs BF16", "vs FP32", "rel err", "cosine");
    int any_fallback = 0;
    for (int l = 0; l <= L_COUNT; l++) {
        for (int p = 0; p < P_COUNT; p++) {
            const int is_total = l == L_COUNT;
            char shape[32] = "";
            if (!is_total && p == 0) {
                if (l == L_ATTN) snprintf(shape, sizeof shape, "%lldh x %d", (long long)d->heads, HEAD_DIM);
                else snprintf(shape, sizeof shape, "%lldx%lld", (long long)d->L[l].N, (long long)d->L[l].K);
            }
            const char *lname = p == 0 ? (is_total ? "total" : k_layer_names[l]) : "";
            const int ok = is_total ? all_ok[p] : res[p].ok[l];
            if (!ok) {
                printf("%-9s %-12s %-13s %s\n", lname, shape, k_path_names[p], is_total ? "(incomplete)" : res[p].err[l]);
                continue;
            }
            const double ms = is_total ? tot[p] : res[p].ms[l];
            const double ops = is_total ? ops_total : part_ops(d, l);
            const double bf = is_total ? (all_ok[P_BF16] ? tot[P_BF16] : 0) : (res[P_BF16].ok[l] ? res[P_BF16].ms[l] : 0);
            const double f3 = is_total ? (all_ok[P_FP32] ? tot[P_FP32] : 0) : (res[P_FP32].ok[l] ? res[P_FP32].ms[l] : 0);
            char sb[16] = "-", sf[16] = "-", re[16] = "", co[16] = "", eng[40] = "";
            if (bf > 0) snprintf(sb, sizeof sb, "%.2fx", bf / ms);
            if (f3 > 0) snprintf(sf, sizeof sf, "%.2fx", f3 / ms);
            if (!is_total && p != P_FP32) {
                snprintf(re, sizeof re, "%.2e", res[p].rel[l]);
                snprintf(co, sizeof co, "%.6f", res[p].cos[l]);
            } else if (!is_total) {
                snprintf(re, sizeof re, "(ref)");
            }
            if (!is_total)
                snprintf(eng, sizeof eng, "%s%s", qmm_engine_name(res[p].engine[l]), res[p].fallback[l] ? "*" : "");
            any_fallback |= !is_total && res[p].fallback[l];
            printf("%-9s %-12s %-13s %-12s %10.1f %9.3f %8s %8s %10s %10s\n", lname, shape, k_path_names[p], eng, ms,
                   ops / (ms * 1e9), sb, sf, re, co);
        }
        printf("\n");
    }
    if (any_fallback)
        printf("* mode int8 ran on a float engine: no int8 engine offers attention here (a counted fallback)\n");
    if (all_ok[P_INT8] && all_ok[P_BF16] && all_ok[P_FP32])
        printf("INT8 (convrot) block, linears + attention: %.2fx faster than BF16, %.2fx faster than FP32 on this "
               "machine.\n",
               tot[P_BF16] / tot[P_INT8], tot[P_FP32] / tot[P_INT8]);
    if (all_ok[P_INT8] && all_ok[P_BF16] && all_ok[P_FP32])
        printf("attention's share of the block's time: INT8 %.0f %%, BF16 %.0f %%, FP32 %.0f %%.\n",
               100 * res[P_INT8].ms[L_ATTN] / tot[P_INT8], 100 * res[P_BF16].ms[L_ATTN] / tot[P_BF16],
               100 * res[P_FP32].ms[L_ATTN] / tot[P_FP32]);
    const double r0 = res[P_INT8].rel[L_QKV] + res[P_INT8].rel[L_FC1];
    const double r1 = res[P_INT8_NOROT].rel[L_QKV] + res[P_INT8_NOROT].rel[L_FC1];
    if (r0 > 0 && r1 > 0)
        printf("ConvRot on inputs with outlier channels (qkv_proj, fc1): rel err %.2e with rotation vs %.2e "
               "without (%.1fx lower).\n",
               r0 / 2, r1 / 2, r1 / r0);
    qmm_counters c;
    qmm_get_counters(d->ctx, &c);
    printf("fallbacks during the run: linear %llu, attention %llu (W8A16 rows name their float engine explicitly)\n",
           (unsigned long long)c.op[QMM_OP_LINEAR].fallbacks, (unsigned long long)c.op[QMM_OP_ATTENTION].fallbacks);
}

int cmd_demo(int argc, char **argv) {
    demo D;
    demo *d = &D;
    memset(d, 0, sizeof *d);
    demo_opts o = {1024, 0, 3, 0, 0, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(); return 0; }
        else if (!strcmp(a, "--json")) o.json = 1;
        else if (!strcmp(a, "--small")) o.small = 1;
        else if (!strcmp(a, "--tokens") && v) { o.M = atoll(v); i++; }
        else if (!strcmp(a, "--fp32-tokens") && v) { o.M32 = atoll(v); i++; }
        else if (!strcmp(a, "--threads") && v) { o.threads = atoi(v); i++; }
        else if (!strcmp(a, "--repeats") && v) { o.repeats = atoi(v); i++; }
        else { fprintf(stderr, "qmm demo: unknown or incomplete option '%s'\n", a); usage(); return 2; }
    }
    if (o.M < 1 || o.repeats < 1 || o.threads < 0) { fprintf(stderr, "qmm demo: bad option value\n"); return 2; }
    if (o.M32 <= 0) o.M32 = o.M < 256 ? o.M : 256;
    if (o.M32 > o.M) o.M32 = o.M;
    d->o = o;
    /* SPEC §3: hidden H = 5376, 56 heads x 128 = HD = 7168 for each of q, k, v (qkv_proj is
     * [3 HD, H] = [21504, 5376]), FFN FF = 14336 (fc1 is [2 FF, H]: gate and up).
     * --small: 16 heads, hidden 1536 (every width stays a multiple of the convrot group 256). */
    const int64_t H = o.small ? 1536 : 5376, HD = o.small ? 2048 : 7168, QKV = 3 * HD, FF = o.small ? 4096 : 14336;
    d->H = H;
    d->HD = HD;
    d->QKV = QKV;
    d->heads = HD / HEAD_DIM;
    const layer L[L_COUNT] = {{QKV, H, QMM_ACT_NONE, {0}}, {HD, HEAD_DIM, QMM_ACT_NONE, {0}},
                              {H, HD, QMM_ACT_NONE, {0}}, {2 * FF, H, QMM_ACT_NONE, {0}}, {H, FF, QMM_ACT_SWIGLU, {0}}};
    memcpy(d->L, L, sizeof L);
    qmm_context_options co = qmm_context_options_default();
    co.n_threads = o.threads;
    co.pin_threads = 1;
    if (qmm_context_create(&co, &d->ctx) != QMM_OK) { fprintf(stderr, "qmm demo: %s\n", qmm_last_error()); return 1; }
    const int T = qmm_context_threads(d->ctx);
    double t0 = now_ms();
    if (!o.json)
        fprintf(stderr, "qmm demo: building and quantizing one video-DiT block (hidden %lld, FFN %lld, seed 2026)...\n",
                (long long)H, (long long)FF);
    /* the seeds of the four linears as they were before attention joined the parts */
    const int seed_index[L_COUNT] = {0, -1, 1, 2, 3};
    for (int l = 0; l < L_COUNT; l++)
        if (l != L_ATTN &&
            build_layer(d->ctx, &d->L[l], k_layer_names[l], 2026u + (uint64_t)seed_index[l] * 7919u, T))
            return 1;
    const double t_build = now_ms() - t0;

    /* x [M, H] bf16 (and the same values in f32 for the FP32 path, all M rows: its qkv_proj gives
     * every token's k and v): heavy tails + outlier channels */
    const int64_t M = o.M;
    uint16_t *xb = malloc((size_t)(M * H) * 2);
    float *xf = malloc((size_t)(M * H) * 4);
    if (!xb || !xf) { fprintf(stderr, "qmm demo: out of memory\n"); return 1; }
    uint64_t s = 77;
    int outliers[8];
    for (int i = 0; i < 8; i++) outliers[i] = (int)(mix(1000 + (uint64_t)i) % (uint64_t)H);
    for (int64_t r = 0; r < M; r++)
        for (int64_t k = 0; k < H; k++) {
            float v = heavy(&s);
            for (int i = 0; i < 8; i++)
                if (k == outliers[i]) v = 40.0f + 20.0f * (float)(i % 3) + v;
            uint32_t u;
            memcpy(&u, &v, 4);
            xb[r * H + k] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
            uint32_t back = (uint32_t)xb[r * H + k] << 16;
            memcpy(&xf[r * H + k], &back, 4);
        }
    for (int p = 0; p < P_COUNT; p++) {
        d->x[p] = p == P_FP32 ? (const void *)xf : (const void *)xb;
        const size_t es = p == P_FP32 ? 4 : 2;
        for (int l = 0; l < L_COUNT; l++) {
            const int64_t rows = l == L_QKV ? M : rows_of(d, p, l);
            d->buf[p][l] = calloc((size_t)(rows * d->L[l].N), es);
            if (!d->buf[p][l]) { fprintf(stderr, "qmm demo: out of memory\n"); return 1; }
        }
    }
    /* the float engines best first (the engine table's order), and those of them that multiply in f32 */
    for (int i = 0; i < qmm_engine_count() && d->n_bf16 < QMM_ENGINE_MAX; i++) {
        qmm_engine_info e;
        if (qmm_engine_get_info(i, &e) != QMM_OK || e.kind != QMM_KIND_FLOAT) continue;
        d->bf16_engines[d->n_bf16++] = e.id;
        if (e.operands == QMM_F32) d->f32_engines[d->n_f32++] = e.id;
    }
    /* FP32 first: it is the accuracy reference */
    const int order[P_COUNT] = {P_FP32, P_INT8, P_INT8_NOROT, P_W8A16, P_BF16};
    d->times = malloc(sizeof(double) * (size_t)o.repeats);
    if (!d->times) { fprintf(stderr, "qmm demo: out of memory\n"); return 1; }
    for (int oi = 0; oi < P_COUNT; oi++)
        for (int l = 0; l < L_COUNT; l++) {
            if (l == L_ATTN) run_attention(d, order[oi]);
            else run_linear(d, order[oi], l);
        }
    free(d->times);

    /* ---------------------------------------------------------------- report */
    double tot[P_COUNT] = {0};
    int all_ok[P_COUNT];
    for (int p = 0; p < P_COUNT; p++) {
        all_ok[p] = 1;
        for (int l = 0; l < L_COUNT; l++) { tot[p] += d->res[p].ms[l]; all_ok[p] &= d->res[p].ok[l]; }
    }
    double ops_total = 0;
    for (int l = 0; l < L_COUNT; l++) ops_total += part_ops(d, l);
    if (o.json) report_json(d, T, t_build, tot, all_ok, ops_total);
    else report_text(d, T, t_build, tot, all_ok, ops_total);
    for (int l = 0; l < L_COUNT; l++)
        for (int p = 0; p < P_COUNT; p++)
            if (p != P_W8A16) qmm_weight_destroy(d->L[l].w[p]);
    for (int p = 0; p < P_COUNT; p++)
        for (int l = 0; l < L_COUNT; l++) free(d->buf[p][l]);
    free(xb);
    free(xf);
    qmm_context_destroy(d->ctx);
    return all_ok[P_INT8] ? 0 : 1;
}
