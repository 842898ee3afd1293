/*
 * test_safetensors.c — the safetensors reader and writer (qmm_io.h):
 *   - random files (every dtype, 0-d, empty and 3-D tensors, metadata with quotes/UTF-8)
 *     written and read back: names, dtypes, shapes, bytes and metadata equal; header padded
 *     with spaces to a multiple of 8;
 *   - re-writing a file qmm wrote (data order, metadata order) gives identical bytes;
 *   - the streaming writer: chunked writes, wrong byte counts refused, an unfinished writer
 *     leaves neither the file nor its temporary (PATH.qmm-tmp.<pid>.XXXXXX), nor does
 *     qmm_st_remove_temporaries (the CLI's signal handler) leave it;
 *   - every malformed class returns QMM_ERR_FORMAT (missing file QMM_ERR_IO, missing tensor
 *     QMM_ERR_NOT_FOUND) without crashing;
 *   - what json-c accepts but the reference reader refuses (duplicate keys, lone surrogates,
 *     U+0000 in a name or dtype) is QMM_ERR_FORMAT naming the key; a surrogate pair is accepted;
 *   - the committed fuzz corpus: bad_* files refused, valid_* files opened;
 *   - a FIFO (no writer) and a device are QMM_ERR_IO at once, naming the path (alarm-bounded);
 *   - the reference Python implementation (safetensors + numpy) reads qmm's file and qmm reads
 *     Python's (skipped visibly when python3 cannot import them).
 */
#define _POSIX_C_SOURCE 200809L
#include "qmm_io.h"
#include "testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[256];

static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)sz + 1);
    *n = fread(p, 1, (size_t)sz, f);
    fclose(f);
    return p;
}

static void write_all(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(p, 1, n, f);
    fclose(f);
}

/* A file from a header text and raw data: 8-byte length, header, data. */
static unsigned char *make_file(const char *header, const void *data, size_t nd, uint64_t fake_len, size_t *n) {
    size_t hl = strlen(header);
    *n = 8 + hl + nd;
    unsigned char *p = malloc(*n + 1);
    uint64_t L = fake_len ? fake_len : hl;
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(L >> (8 * i));
    memcpy(p + 8, header, hl);
    if (nd) memcpy(p + 8 + hl, data, nd);
    return p;
}

static void test_roundtrip(void) {
    const qmm_st_dtype dts[] = {QMM_ST_F32, QMM_ST_F16, QMM_ST_BF16, QMM_ST_I8, QMM_ST_U8, QMM_ST_I32,
                                QMM_ST_F64, QMM_ST_BOOL, QMM_ST_I64, QMM_ST_F8_E4M3, QMM_ST_F4};
    enum { NT = 12 };
    qmm_st_tensor t[NT];
    void *bufs[NT];
    char names[NT][64];
    memset(t, 0, sizeof t);
    for (int i = 0; i < NT; i++) {
        qmm_st_tensor *x = &t[i];
        snprintf(names[i], sizeof names[i], "layer.%d.w\xc3\xa9ight \"q\"", (int)tu_rand_int(0, 1000) * NT + i);
        x->name = names[i];
        x->dtype = dts[tu_rand_int(0, sizeof dts / sizeof dts[0] - 1)];
        x->ndim = (int)tu_rand_int(x->dtype == QMM_ST_F4 ? 1 : 0, 3);   /* F4: whole bytes need even numel */
        int64_t numel = 1;
        for (int d = 0; d < x->ndim; d++) {
            x->shape[d] = tu_rand_int(i == 3 ? 0 : 1, 9) * 2;
            numel *= x->shape[d];
        }
        x->nbytes = (size_t)numel * (size_t)qmm_st_dtype_bits(x->dtype) / 8;
        bufs[i] = malloc(x->nbytes + 1);
        for (size_t b = 0; b < x->nbytes; b++) ((unsigned char *)bufs[i])[b] = (unsigned char)tu_rand_u64();
        x->data = bufs[i];
    }
    /* metadata comes from a file: write one with metadata first through the streaming writer */
    qmm_st_writer *w;
    const char *p1 = tmp_path("rt1.safetensors");
    TU_CHECK_OK(qmm_st_writer_create(p1, &w));
    TU_CHECK_OK(qmm_st_writer_set_metadata(w, "format", "pt"));
    TU_CHECK_OK(qmm_st_writer_set_metadata(w, "quote\"back\\slash", "line\nfeed \xe2\x82\xac"));
    for (int i = 0; i < NT; i++) TU_CHECK_OK(qmm_st_writer_declare(w, t[i].name, t[i].dtype, t[i].ndim, t[i].shape));
    TU_CHECK(qmm_st_writer_declare(w, t[0].name, QMM_ST_F32, 0, NULL) == QMM_ERR_INVALID_ARGUMENT,
             "duplicate name refused");
    TU_CHECK_OK(qmm_st_writer_begin(w));
    for (int i = 0; i < NT; i++) { /* in random chunks */
        size_t off = 0;
        while (off < t[i].nbytes) {
            size_t k = (size_t)tu_rand_int(1, (int64_t)(t[i].nbytes - off));
            TU_CHECK_OK(qmm_st_writer_write(w, (const char *)t[i].data + off, k));
            off += k;
        }
    }
    TU_CHECK_OK(qmm_st_writer_finish(w));
    qmm_st_writer_destroy(w);

    qmm_st_file *f;
    TU_CHECK_OK(qmm_st_open(p1, &f));
    if (!f) return;
    TU_CHECK(qmm_st_count(f) == NT, "count %zu", qmm_st_count(f));
    TU_CHECK(qmm_st_header_size(f) % 8 == 0, "header %llu not a multiple of 8", (unsigned long long)qmm_st_header_size(f));
    for (int i = 0; i < NT; i++) {
        const qmm_st_tensor *r = qmm_st_get(f, t[i].name);
        TU_CHECK(r != NULL, "tensor %s found", t[i].name);
        if (!r) continue;
        int same = r->dtype == t[i].dtype && r->ndim == t[i].ndim && r->nbytes == t[i].nbytes &&
                   !memcmp(r->data, t[i].data, t[i].nbytes);
        for (int d = 0; d < r->ndim; d++) same &= r->shape[d] == t[i].shape[d];
        TU_CHECK(same, "tensor %s round trip (dtype %s ndim %d bytes %zu)", t[i].name, qmm_st_dtype_name(r->dtype),
                 r->ndim, r->nbytes);
        TU_CHECK(qmm_st_at(f, (size_t)i) == r, "data order = declared order at %d", i);
    }
    TU_CHECK(qmm_st_metadata_count(f) == 2, "metadata count");
    const char *v = qmm_st_metadata_get(f, "quote\"back\\slash");
    TU_CHECK(v && !strcmp(v, "line\nfeed \xe2\x82\xac"), "metadata with escapes");
    const qmm_st_tensor *nf;
    TU_CHECK(qmm_st_find(f, "nope", &nf) == QMM_ERR_NOT_FOUND, "missing tensor -> NOT_FOUND");
    size_t n1;
    unsigned char *raw = read_all(p1, &n1);
    int pad_ok = raw != NULL;
    if (raw) {
        uint64_t e = 8 + qmm_st_header_size(f), last = e - 1;
        while (last > 8 && raw[last] == ' ') last--;
        pad_ok = raw[last] == '}' && e - 1 - last < 8;
    }
    TU_CHECK(pad_ok, "header ends with '}' and fewer than 8 padding spaces");

    /* re-write from the views in data order: identical bytes */
    qmm_st_tensor views[NT];
    for (int i = 0; i < NT; i++) views[i] = *qmm_st_at(f, (size_t)i);
    const char *p2 = tmp_path("rt2.safetensors");
    TU_CHECK_OK(qmm_st_save(p2, views, NT, f));
    size_t n2;
    unsigned char *raw2 = read_all(p2, &n2);
    TU_CHECK(raw && raw2 && n1 == n2 && !memcmp(raw, raw2, n1), "re-writing gives identical bytes (%zu vs %zu)", n1, n2);
    free(raw);
    free(raw2);
    qmm_st_close(f);
    for (int i = 0; i < NT; i++) free(bufs[i]);

    /* an unfinished or failing writer leaves nothing behind */
    const char *p3 = tmp_path("never.safetensors");
    TU_CHECK_OK(qmm_st_writer_create(p3, &w));
    int64_t sh[1] = {4};
    TU_CHECK_OK(qmm_st_writer_declare(w, "x", QMM_ST_F32, 1, sh));
    TU_CHECK_OK(qmm_st_writer_begin(w));
    float four[5] = {1, 2, 3, 4, 5};
    TU_CHECK(qmm_st_writer_write(w, four, 20) == QMM_ERR_INVALID_ARGUMENT, "bytes past the last tensor refused");
    qmm_st_writer_destroy(w);
    TU_CHECK(access(p3, F_OK) != 0, "no file after an aborted writer");
    TU_CHECK_OK(qmm_st_writer_create(p3, &w));
    TU_CHECK_OK(qmm_st_writer_declare(w, "x", QMM_ST_F32, 1, sh));
    TU_CHECK_OK(qmm_st_writer_begin(w));
    TU_CHECK_OK(qmm_st_writer_write(w, four, 8));
    TU_CHECK(qmm_st_writer_finish(w) == QMM_ERR_INVALID_ARGUMENT, "finish with missing bytes refused");
    qmm_st_writer_destroy(w);
    TU_CHECK(access(p3, F_OK) != 0, "no file after an unfinished writer");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp", g_dir);
    TU_CHECK(system(cmd) != 0, "no temporary files left in %s", g_dir);

    /* the temporary file is named PATH.qmm-tmp.<pid>.XXXXXX; qmm_st_remove_temporaries (what the
     * CLI's signal handler calls) removes it, and the writer then fails cleanly */
    TU_CHECK_OK(qmm_st_writer_create(p3, &w));
    snprintf(cmd, sizeof cmd, "ls %s | grep -q '^never.safetensors.qmm-tmp.%ld.......$'", g_dir, (long)getpid());
    TU_CHECK(system(cmd) == 0, "temporary file named never.safetensors.qmm-tmp.<pid>.XXXXXX");
    qmm_st_remove_temporaries();
    snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp", g_dir);
    TU_CHECK(system(cmd) != 0, "qmm_st_remove_temporaries removed it");
    TU_CHECK_OK(qmm_st_writer_declare(w, "x", QMM_ST_F32, 1, sh));
    TU_CHECK_OK(qmm_st_writer_begin(w));
    TU_CHECK_OK(qmm_st_writer_write(w, four, 16));
    TU_CHECK(qmm_st_writer_finish(w) == QMM_ERR_IO && access(p3, F_OK) != 0, "finish after the removal: IO, no file");
    qmm_st_writer_destroy(w);
}

typedef struct bad_case {
    const char *what, *header;
    size_t data_bytes;
    uint64_t fake_len;
    size_t cut;     /* bytes removed from the end */
} bad_case;

static void test_malformed(void) {
    const bad_case cases[] = {
        {"invalid JSON", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4, 0, 0},
        {"invalid JSON (trailing comma)", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},}", 4, 0, 0},
        {"not an object", "[1, 2, 3]                 ", 0, 0, 0},
        {"invalid UTF-8", "{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, 0},
        {"overlong UTF-8", "{\"a\xc0\xaf\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, 0},
        {"unknown dtype", "{\"a\":{\"dtype\":\"F12\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, 0},
        {"byte count not matching shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, 0, 0},
        {"offset past the end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 8, 0, 0},
        {"overlapping ranges",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, 0, 0},
        {"end before begin", "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4, 0, 0},
        {"negative shape", "{\"a\":{\"dtype\":\"U8\",\"shape\":[-4],\"data_offsets\":[0,4]}}", 4, 0, 0},
        {"float shape", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4.0],\"data_offsets\":[0,4]}}", 4, 0, 0},
        {"shape overflow",
         "{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,4]}}", 4, 0, 0},
        {"huge offsets", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[18446744073709551615,0]}}", 4, 0, 0},
        {"metadata not strings", "{\"__metadata__\":{\"k\":1}}", 0, 0, 0},
        {"missing data_offsets", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, 0, 0},
        {"bytes after the JSON", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}} x", 1, 0, 0},
        {"header length beyond the file", "{}      ", 0, 4096, 0},
        {"header length over the limit", "{}      ", 0, (uint64_t)QMM_ST_MAX_HEADER + 8, 0},
        {"truncated data", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16, 0, 5},
        {"truncated header", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16, 0, 30},
        /* what json-c accepts and the reference reader (serde_json) refuses */
        {"duplicate tensor key", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                                 "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, 0, 0},
        {"duplicate tensor key (escaped)", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                                           "\"\\u0061\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2, 0, 0},
        {"duplicate __metadata__", "{\"__metadata__\":{\"x\":\"1\"},\"__metadata__\":{\"y\":\"2\"},"
                                   "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, 0, 0},
        {"duplicate field", "{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, 0, 0},
        {"dtype with U+0000", "{\"a\":{\"dtype\":\"F32\\u0000junk\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, 0},
        {"name with U+0000", "{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, 0, 0},
        {"lone low surrogate", "{\"\\udc00\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, 0, 0},
        {"lone high surrogate", "{\"\\ud800x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, 0, 0},
        {"high surrogate then a non-surrogate escape",
         "{\"\\ud800\\u0041\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, 0, 0},
        {"lone surrogate in a metadata value", "{\"__metadata__\":{\"k\":\"\\udfff\"}}", 0, 0, 0},
        {"metadata value with U+0000", "{\"__metadata__\":{\"k\":\"a\\u0000b\"}}", 0, 0, 0},
    };
    unsigned char data[64] = {0};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t n;
        unsigned char *p = make_file(cases[c].header, data, cases[c].data_bytes, cases[c].fake_len, &n);
        n -= cases[c].cut;
        qmm_st_file *f = (qmm_st_file *)1;
        qmm_status st = qmm_st_open_memory(p, n, &f);
        TU_CHECK(st == QMM_ERR_FORMAT && f == NULL, "%s: %s (%s)", cases[c].what, qmm_status_name(st), qmm_last_error());
        /* the same through a real file (mmap path) */
        const char *path = tmp_path("bad.safetensors");
        write_all(path, p, n);
        st = qmm_st_open(path, &f);
        TU_CHECK(st == QMM_ERR_FORMAT && f == NULL, "%s (file): %s", cases[c].what, qmm_status_name(st));
        free(p);
    }
    /* tiny files */
    for (size_t n = 0; n < 8; n++) {
        qmm_st_file *f;
        qmm_status st = qmm_st_open_memory(data, n, &f);
        TU_CHECK(st == QMM_ERR_FORMAT, "%zu-byte file: %s", n, qmm_status_name(st));
    }
    qmm_st_file *f;
    TU_CHECK(qmm_st_open(tmp_path("does-not-exist"), &f) == QMM_ERR_IO, "missing file -> IO");
    TU_CHECK(qmm_st_open(g_dir, &f) == QMM_ERR_IO, "directory -> IO");
    /* the message names the tensor */
    size_t n;
    unsigned char *p = make_file("{\"blocks.7.w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,4]}}", data, 4, 0, &n);
    qmm_st_open_memory(p, n, &f);
    TU_CHECK(strstr(qmm_last_error(), "blocks.7.w") != NULL, "message names the tensor: %s", qmm_last_error());
    free(p);
    /* accepted: gaps between tensors, zero-size tensors anywhere, empty header object */
    p = make_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]},\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[5,5]}}",
                  data, 8, 0, &n);
    TU_CHECK_OK(qmm_st_open_memory(p, n, &f));
    qmm_st_close(f);
    free(p);
    p = make_file("{}      ", data, 0, 0, &n);
    TU_CHECK_OK(qmm_st_open_memory(p, n, &f));
    TU_CHECK(qmm_st_count(f) == 0, "empty file has no tensors");
    qmm_st_close(f);
    free(p);
    /* accepted: a surrogate pair (one character), escapes that decode to distinct names */
    p = make_file("{\"\\ud83d\\ude00\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                  "\"a\\n\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]},"
                  "\"a\\\\n\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[2,3]}}", data, 3, 0, &n);
    TU_CHECK_OK(qmm_st_open_memory(p, n, &f));
    TU_CHECK(f && qmm_st_get(f, "\xf0\x9f\x98\x80") && qmm_st_get(f, "a\n") && qmm_st_get(f, "a\\n"),
             "surrogate pair and escaped names decode");
    qmm_st_close(f);
    free(p);
    /* the messages name the duplicate key and the surrogate */
    p = make_file("{\"blocks.3.w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                  "\"blocks.3.w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", data, 1, 0, &n);
    qmm_st_open_memory(p, n, &f);
    TU_CHECK(strstr(qmm_last_error(), "\"blocks.3.w\" appears more than once") != NULL, "duplicate named: %s",
             qmm_last_error());
    free(p);
    p = make_file("{\"x\\udc00\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", data, 1, 0, &n);
    qmm_st_open_memory(p, n, &f);
    TU_CHECK(strstr(qmm_last_error(), "lone surrogate escape \\udc00") != NULL, "lone surrogate named: %s",
             qmm_last_error());
    free(p);
}

/* The committed fuzz corpus (fuzz/corpus/safetensors, beside this file's folder): every bad_*
 * file is refused with QMM_ERR_FORMAT, every valid_* file opens. */
static void test_corpus(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", __FILE__);
    char *slash = strrchr(dir, '/');
    if (!slash) { tu_skip("corpus", "source path unknown"); return; }
    snprintf(slash, sizeof dir - (size_t)(slash - dir), "/../fuzz/corpus/safetensors");
    DIR *d = opendir(dir);
    if (!d) { tu_skip("corpus", "fuzz/corpus/safetensors not found beside tests/"); return; }
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        int bad = !strncmp(e->d_name, "bad_", 4), valid = !strncmp(e->d_name, "valid_", 6);
        if (!bad && !valid) continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t len;
        unsigned char *p = read_all(path, &len);
        if (!p) continue;
        qmm_st_file *f = NULL;
        qmm_status st = qmm_st_open_memory(p, len, &f);
        TU_CHECK(bad ? st == QMM_ERR_FORMAT : st == QMM_OK, "corpus %s: %s (%s)", e->d_name, qmm_status_name(st),
                 st ? qmm_last_error() : "");
        qmm_st_close(f);
        free(p);
        n++;
    }
    closedir(d);
    TU_CHECK(n >= 20, "%d corpus files checked", n);
}

/* Not regular files: refused with QMM_ERR_IO naming the path, and a FIFO with no writer must not
 * block the open (alarm: a hang kills the test with SIGALRM instead of hanging it). */
static void test_special_files(void) {
    const char *fifo = tmp_path("fifo.safetensors");
    if (mkfifo(fifo, 0600) != 0) {
        tu_skip("FIFO", "mkfifo failed");
        return;
    }
    alarm(20);
    qmm_st_file *f = (qmm_st_file *)1;
    qmm_status st = qmm_st_open(fifo, &f);
    alarm(0);
    TU_CHECK(st == QMM_ERR_IO && f == NULL, "FIFO -> IO without blocking: %s", qmm_status_name(st));
    TU_CHECK(strstr(qmm_last_error(), fifo) && strstr(qmm_last_error(), "FIFO"), "message names the path and the FIFO: %s",
             qmm_last_error());
    st = qmm_st_open("/dev/null", &f);
    TU_CHECK(st == QMM_ERR_IO && strstr(qmm_last_error(), "character device"), "/dev/null -> IO: %s", qmm_last_error());
    unlink(fifo);
}

static int have_python(void) {
    return system("python3 -c 'import safetensors.numpy, numpy' >/dev/null 2>&1") == 0;
}

static void test_python(void) {
    if (!have_python()) {
        tu_skip("python interop", "python3 cannot import safetensors and numpy (pip install safetensors numpy)");
        return;
    }
    /* qmm writes, Python reads */
    enum { R = 5, C = 7 };
    float a[R * C];
    int8_t q[R * C];
    uint16_t h[C];
    for (int i = 0; i < R * C; i++) { a[i] = (float)i * 0.5f - 3.0f; q[i] = (int8_t)(i * 7 - 100); }
    for (int i = 0; i < C; i++) h[i] = (uint16_t)(0x3c00 + i);  /* f16 1.0, 1.0009765625, ... */
    qmm_st_tensor t[3] = {{0}};
    t[0] = (qmm_st_tensor){.name = "a", .dtype = QMM_ST_F32, .ndim = 2, .shape = {R, C}, .data = a, .nbytes = sizeof a};
    t[1] = (qmm_st_tensor){.name = "b.q", .dtype = QMM_ST_I8, .ndim = 2, .shape = {R, C}, .data = q, .nbytes = sizeof q};
    t[2] = (qmm_st_tensor){.name = "c", .dtype = QMM_ST_F16, .ndim = 1, .shape = {C}, .data = h, .nbytes = sizeof h};
    const char *p = tmp_path("py_in.safetensors");
    TU_CHECK_OK(qmm_st_save(p, t, 3, NULL));
    const char *po = tmp_path("py_out.safetensors");
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "python3 -c '\n"
             "import numpy as np, safetensors.numpy as sn, sys\n"
             "d = sn.load_file(\"%s\")\n"
             "a = np.arange(%d, dtype=np.float32).reshape(%d, %d) * 0.5 - 3\n"
             "q = (np.arange(%d) * 7 - 100).astype(np.int8).reshape(%d, %d)\n"
             "ok = (d[\"a\"] == a).all() and (d[\"b.q\"] == q).all() and d[\"c\"].dtype == np.float16 and d[\"c\"][0] == 1.0\n"
             "sn.save_file({\"y\": (a * 2).astype(np.float32), \"z.i\": np.arange(6, dtype=np.int32).reshape(2, 3)}, \"%s\", metadata={\"who\": \"python\"})\n"
             "sys.exit(0 if ok else 1)' 2>&1",
             p, R * C, R, C, R * C, R, C, po);
    TU_CHECK(system(cmd) == 0, "python reads qmm's file with the same values");
    qmm_st_file *f;
    TU_CHECK_OK(qmm_st_open(po, &f));
    if (!f) return;
    const qmm_st_tensor *y = qmm_st_get(f, "y"), *z = qmm_st_get(f, "z.i");
    int ok = y && z && y->dtype == QMM_ST_F32 && y->ndim == 2 && y->shape[0] == R && z->dtype == QMM_ST_I32;
    for (int i = 0; ok && i < R * C; i++) {
        float v;
        memcpy(&v, (const char *)y->data + 4 * i, 4);
        ok &= v == a[i] * 2;
    }
    const char *who = qmm_st_metadata_get(f, "who");
    TU_CHECK(ok && who && !strcmp(who, "python"), "qmm reads python's file");
    qmm_st_close(f);
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_safetensors");
    snprintf(g_dir, sizeof g_dir, "/tmp/qmm_test_st_XXXXXX");
    if (!mkdtemp(g_dir)) { printf("cannot create a temp dir\n"); return 1; }
    test_roundtrip();
    test_malformed();
    test_special_files();
    test_corpus();
    test_python();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", g_dir);
    return tu_finish();
}
