/*
 * qmm_io.h — files: safetensors reading (mmap, zero-copy, fully validated) and writing
 * (streamed, tmp file + rename), the ComfyUI INT8 checkpoint convention (SPEC §3) — int8_tensorwise
 * and the W4A8 asym_w4a8_int8 layers — as a model object that gives a qmm_weight per layer, and
 * checkpoint quantization (SPEC §2).
 *
 * Statuses (besides QMM_ERR_INVALID_ARGUMENT / QMM_ERR_OUT_OF_MEMORY for caller bugs / memory):
 *   QMM_ERR_IO           open/stat/mmap/read/write/rename failed (the message has errno's text)
 *   QMM_ERR_FORMAT       a malformed file: truncated, header length beyond the file or over
 *                        QMM_ST_MAX_HEADER, header not UTF-8, invalid JSON, unknown dtype, bad
 *                        shape, byte count != shape × dtype, ranges past the end or overlapping;
 *                        a checkpoint layer with a missing/misshaped weight_scale, a comfy_quant
 *                        that is not a JSON object, a bad convrot group, a bias (int8 or float
 *                        layer) that is not F32/F16/BF16 [N]; a W4A8 layer whose codes, s_rel,
 *                        s_channel, codebook or comfy_quant keys break SPEC §3/§11 (named); when
 *                        a layer is packed (qmm_model_check_layer): a weight scale or s_channel
 *                        that is NaN/±Inf/±0/negative/denormal, a non-finite s_rel or codebook
 *                        value, or a bias that is not finite; quantize: a row holding NaN/Inf
 *   QMM_ERR_NOT_FOUND    a named tensor/layer is not in the file/model
 *   QMM_ERR_UNSUPPORTED  well-formed but not runnable by qmm: a quant format other than
 *                        int8_tensorwise and asym_w4a8_int8 (float8_e4m3fn, nvfp4, mxfp8, ...),
 *                        an asymmetric W4A8 layer (L.weight_correction), named with its layer
 * Messages name the file, the tensor/layer and the problem (qmm_last_error()).
 *
 * Thread safety: an open qmm_st_file and a qmm_model are read-only after opening except
 * qmm_model_weight (lazy packing; see there). A writer is used by one thread.
 */
#ifndef QMM_IO_H
#define QMM_IO_H

#include "qmm.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ================================================================ safetensors */
/* The dtypes of the safetensors format (names as they appear in the header). */
typedef enum qmm_st_dtype {
    QMM_ST_BOOL = 0, QMM_ST_U8, QMM_ST_I8, QMM_ST_I16, QMM_ST_U16, QMM_ST_F16, QMM_ST_BF16,
    QMM_ST_I32, QMM_ST_U32, QMM_ST_F32, QMM_ST_F64, QMM_ST_I64, QMM_ST_U64,
    QMM_ST_F8_E4M3, QMM_ST_F8_E5M2, QMM_ST_F8_E8M0,
    QMM_ST_F4, QMM_ST_F6_E2M3, QMM_ST_F6_E3M2,   /* sub-byte, packed: bytes = numel·bits/8 */
    QMM_ST_DTYPE_COUNT
} qmm_st_dtype;
const char *qmm_st_dtype_name(qmm_st_dtype t);   /* "F32", ...; "?" if unknown */
int qmm_st_dtype_bits(qmm_st_dtype t);           /* 32, 16, 8, 4, 6; 0 if unknown */
/* The library dtype of a safetensors dtype (F32, F16, BF16, I8, U8, I32), or -1. */
int qmm_st_dtype_to_qmm(qmm_st_dtype t);
qmm_st_dtype qmm_st_dtype_from_qmm(qmm_dtype t);

/* Header length limit (bytes of JSON) the reader accepts: 100 MiB. */
#define QMM_ST_MAX_HEADER (100u << 20)
#define QMM_ST_MAX_DIMS 16

/* A view of one tensor of an open file. data points into the mapping (zero-copy); it is only
 * as aligned as the file makes it (qmm's writer and Python's keep offsets as they are: copy
 * before typed access if ((uintptr_t)data % element size) != 0).
 * A file truncated after it was opened: reading data directly then raises SIGBUS (the process
 * dies); qmm_st_read returns QMM_ERR_IO instead, and qmm itself (model weights, quantize, the
 * CLI) reads mapped bytes only through it — except a W4A8 layer's codes, which its weight reads
 * in place at every call (qmm_model_weight). */
typedef struct qmm_st_tensor {
    const char *name;
    qmm_st_dtype dtype;
    int ndim;
    int64_t shape[QMM_ST_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end;     /* data_offsets, relative to the end of the header */
    const void *data;        /* end - begin bytes */
    size_t nbytes;
} qmm_st_tensor;

typedef struct qmm_st_file qmm_st_file;
/* Opens and validates a file (mmap, read-only). Only a regular file: a FIFO, device, socket or
 * folder is QMM_ERR_IO naming the path and what it is, found without blocking (a FIFO with no
 * writer does not hang the open). */
qmm_status qmm_st_open(const char *path, qmm_st_file **out);
/* Same on bytes in memory (not copied: they must outlive the handle). For tests and fuzzing. */
qmm_status qmm_st_open_memory(const void *bytes, size_t size, qmm_st_file **out);
void qmm_st_close(qmm_st_file *f);   /* NULL-safe */

/* Tensors in data order (ascending begin, then name): index 0 .. count-1. */
size_t qmm_st_count(const qmm_st_file *f);
const qmm_st_tensor *qmm_st_at(const qmm_st_file *f, size_t i);
/* By name: NULL if absent. */
const qmm_st_tensor *qmm_st_get(const qmm_st_file *f, const char *name);
/* Same, as a status: QMM_ERR_NOT_FOUND naming the file and the tensor. */
qmm_status qmm_st_find(const qmm_st_file *f, const char *name, const qmm_st_tensor **out);
/* Copies bytes [offset, offset + n) of tensor t into dst. For a mapped file that shrank after it
 * was opened (truncated, or rewritten in place by `cp`), QMM_ERR_IO naming file and tensor instead
 * of a SIGBUS: on first use qmm installs a SIGBUS handler that acts only on faults inside these
 * copies and hands every other SIGBUS to the action installed before it (the default ends the
 * process as before). Bytes rewritten in place without a size change are read as they are now. */
qmm_status qmm_st_read(const qmm_st_file *f, const qmm_st_tensor *t, uint64_t offset, size_t n, void *dst);
/* __metadata__ entries in header order; get returns NULL if the key is absent. */
size_t qmm_st_metadata_count(const qmm_st_file *f);
void qmm_st_metadata_at(const qmm_st_file *f, size_t i, const char **key, const char **value);
const char *qmm_st_metadata_get(const qmm_st_file *f, const char *key);
size_t qmm_st_file_size(const qmm_st_file *f);
uint64_t qmm_st_header_size(const qmm_st_file *f);   /* JSON bytes incl. padding */
const char *qmm_st_path(const qmm_st_file *f);        /* "<memory>" for memory files */
/* Hint that a tensor's pages will not be needed again (madvise DONTNEED on mapped files; a
 * no-op otherwise): keeps the resident set of a streaming pass at about one tensor. */
void qmm_st_release(const qmm_st_file *f, const qmm_st_tensor *t);

/* ---------------------------------------------------------------- writer
 * Two phases: declare every tensor (name, dtype, shape) and the metadata, then qmm_st_writer_begin
 * writes the header, then the data of each tensor is streamed in the declared order (any number
 * of qmm_st_writer_write calls per tensor), then qmm_st_writer_finish fsyncs and renames the
 * temporary file onto PATH. Destroying an unfinished writer removes the temporary file: an
 * interrupted run never leaves a broken PATH.
 * The temporary file is PATH.qmm-tmp.<pid>.XXXXXX in PATH's folder (pid: the writing process,
 * XXXXXX: mkstemp's letters): a process killed outright (SIGKILL, power loss) leaves one, and a
 * file of that pattern whose pid is not running is safe to delete.
 * The file: 8-byte little-endian header length; the header JSON, compact, with "__metadata__"
 * first (keys in the order they were set) then the tensors in declared order, each
 * {"dtype":..,"shape":[..],"data_offsets":[b,e]}, data packed back to back in declared order;
 * the header padded with spaces to a multiple of 8 bytes. The same declarations give the same
 * bytes: re-writing a file that qmm wrote (tensors in its data order, metadata in header order)
 * reproduces it byte for byte. */
typedef struct qmm_st_writer qmm_st_writer;
qmm_status qmm_st_writer_create(const char *path, qmm_st_writer **out);
qmm_status qmm_st_writer_set_metadata(qmm_st_writer *w, const char *key, const char *value);
qmm_status qmm_st_writer_declare(qmm_st_writer *w, const char *name, qmm_st_dtype dtype, int ndim,
                                 const int64_t *shape);
qmm_status qmm_st_writer_begin(qmm_st_writer *w);
qmm_status qmm_st_writer_write(qmm_st_writer *w, const void *data, size_t nbytes);
qmm_status qmm_st_writer_finish(qmm_st_writer *w);
void qmm_st_writer_destroy(qmm_st_writer *w);   /* NULL-safe; aborts an unfinished file */

/* Removes (unlink) the temporary file of every unfinished writer of this process, for a signal
 * handler that is about to end the process (SIGINT/SIGTERM/SIGHUP): async-signal-safe — no
 * allocation, no locks. The writers stay valid but their files are gone (finish then fails).
 * Up to 32 writers at once are tracked (paths < 4096 bytes). */
void qmm_st_remove_temporaries(void);

/* One call: write `n` tensors (data in the views) and the metadata of `meta_from` (may be NULL). */
qmm_status qmm_st_save(const char *path, const qmm_st_tensor *tensors, size_t n, const qmm_st_file *meta_from);

/* ================================================================ the ComfyUI INT8 convention */
typedef enum qmm_layer_kind {
    QMM_LAYER_INT8 = 0,        /* int8_tensorwise: L.weight I8 [N,K], L.weight_scale, L.comfy_quant */
    QMM_LAYER_FLOAT = 1,       /* L.weight F32/F16/BF16 [N,K] with no quant marker */
    QMM_LAYER_UNSUPPORTED = 2, /* a quant format qmm does not run (only with allow_unsupported) */
    QMM_LAYER_W4A8 = 3         /* asym_w4a8_int8 (SPEC §3, §11): L.weight codes I8/U8 [N, K·bits/8],
                                  L.weight_s_rel, L.weight_s_channel, optional L.weight_codebook */
} qmm_layer_kind;

typedef struct qmm_layer_info {
    const char *name;            /* "blocks.0.attn.qkv_proj"; any length the header holds */
    qmm_layer_kind kind;
    const char *format;          /* "int8_tensorwise", "nvfp4", ...; NULL for float layers */
    const char *source;          /* "comfy_quant", "_quantization_metadata" or NULL */
    int64_t N, K;                /* from L.weight (0 for an unsupported layer whose weight is not 2-D) */
    int convrot_gs;              /* 0 or 16/64/256 */
    int full_precision;          /* full_precision_matrix_mult */
    int64_t n_scale;             /* 1 (per-tensor) or N (int8, W4A8: s_channel); 0 for float layers */
    const qmm_st_tensor *weight, *weight_scale, *bias, *comfy_quant;   /* NULL where absent */
    /* W4A8 (QMM_LAYER_W4A8; 0/NULL otherwise): weight holds the codes, weight_scale is NULL */
    int code_bits;               /* 4 or 6 (from the codes' row width: K/2 or 3K/4 bytes) */
    int group_size;              /* the s_rel group ("group_size", default 16) */
    const qmm_st_tensor *s_rel, *s_channel, *codebook;  /* codebook NULL where absent */
} qmm_layer_info;

typedef struct qmm_model_options {
    int allow_unsupported;  /* 0: a layer in an unsupported format fails the open (UNSUPPORTED,
                               naming it); 1: it is listed as QMM_LAYER_UNSUPPORTED */
    int float_layers;       /* 1 (default): plain float 2-D L.weight tensors are float layers */
} qmm_model_options;
qmm_model_options qmm_model_options_default(void);

typedef struct qmm_model qmm_model;
/* Opens PATH and reads the convention: validates every layer (shapes, scale shapes, JSON) before
 * returning; on any error nothing is returned (no partial model). Touches no tensor data except
 * the small comfy_quant tensors. */
qmm_status qmm_model_open(const char *path, const qmm_model_options *opt, qmm_model **out);
qmm_status qmm_model_open_memory(const void *bytes, size_t size, const qmm_model_options *opt,
                                 qmm_model **out);
void qmm_model_close(qmm_model *m);   /* NULL-safe; destroys the weights it packed */

const qmm_st_file *qmm_model_file(const qmm_model *m);
size_t qmm_model_layer_count(const qmm_model *m);
const qmm_layer_info *qmm_model_layer(const qmm_model *m, size_t i);    /* sorted by name */
qmm_status qmm_model_find(const qmm_model *m, const char *layer, const qmm_layer_info **out);
/* The packed weight of a layer (int8: qmm_weight_create_int8, with its bias and convrot; float:
 * qmm_weight_create_float; W4A8: qmm_weight_borrow_w4a8 over the codes in the file, SPEC §3).
 * Packed on first request and cached in the model (owned by it: do not destroy). Reads only that
 * layer's bytes, copied out of the mapping with qmm_st_read (a file truncated since the open is
 * QMM_ERR_IO); once packed, an int8 or float layer no longer reads the file, so after
 * qmm_model_load_all later changes to the file cannot affect them. A W4A8 layer's weight is the
 * exception: it owns copies of s_rel, s_channel, codebook and bias, but reads the codes where they
 * lie in the mapping (or the memory of qmm_model_open_memory) at every call — no copy, no int8
 * weight — so the model must stay open while the weight is used, and a file shrunk after packing
 * is a SIGBUS at the next call (as for any mmap reader). Not thread-safe for the first request of
 * a layer; after qmm_model_load_all the model may be shared across threads. ctx may be NULL here,
 * in qmm_model_load_all and in qmm_model_create_weight (weight creation uses no context, qmm.h). */
qmm_status qmm_model_weight(qmm_model *m, qmm_context *ctx, const char *layer, const qmm_weight **out);
qmm_status qmm_model_load_all(qmm_model *m, qmm_context *ctx);
/* The numbers of a layer, checked before it is packed (qmm_model_weight and
 * qmm_model_create_weight run this check and fail with its status): every weight_scale value must
 * be a positive normal float (NaN, ±Inf, ±0, negative and denormal scales are refused: they give
 * all-NaN/Inf/0 or sign-flipped rows), every bias value finite. QMM_ERR_FORMAT naming the layer,
 * the tensor and the first bad row; QMM_OK for an unsupported layer (nothing is read). Refusing
 * rather than warning: a checkpoint with such a layer is broken, and running it gives silent
 * garbage. Reads only the small scale and bias tensors (qmm inspect reports every layer with it). */
qmm_status qmm_model_check_layer(const qmm_model *m, const char *layer);
/* A new weight the caller owns and destroys (the cache is not used). A W4A8 layer's weight reads
 * the model's file (see qmm_model_weight): destroy it before qmm_model_close. */
qmm_status qmm_model_create_weight(const qmm_model *m, qmm_context *ctx, const char *layer, qmm_weight **out);
/* The W4A8 desc of an asym_w4a8_int8 layer (what qmm_model_create_weight borrows): codes pointing
 * into the file's mapping (the last byte read first: a file truncated since the open is
 * QMM_ERR_IO), s_rel, s_channel, the codebook (widened to F32) and the bias copied into one block
 * that *owned holds (free it with qmm_model_desc_release once no weight reads it), their values
 * checked as qmm_model_check_layer checks them. The desc's name points into the model. Another
 * kind of layer: QMM_ERR_UNSUPPORTED. */
qmm_status qmm_model_w4a8_desc(const qmm_model *m, const char *layer, qmm_w4a8_desc *desc, void **owned);
void qmm_model_desc_release(void *owned); /* NULL-safe */

/* The comfy_quant JSON bytes qmm writes, exactly as Python's json.dumps writes them:
 * {"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256}, or without rotation
 * {"format": "int8_tensorwise"}. Returns the length (snprintf-like). */
size_t qmm_comfy_quant_json(int convrot_gs, char *buf, size_t size);

/* ================================================================ checkpoint quantization */
typedef struct qmm_quantize_file_options {
    int convrot;            /* -1 auto (largest of 256/64/16 dividing K, else none); 0 off;
                               16/64/256: that group (a layer with K % g != 0 is an error) */
    int per_tensor;         /* 1: one scale per layer, stored [1] */
    int64_t min_size;       /* layers with min(N, K) < min_size stay float (default 256) */
    const char *const *include;  /* NULL-terminated glob lists (fnmatch) on the layer name; */
    const char *const *exclude;  /*   NULL = all / none. An explicit include also admits names the
                                      default skip list (embeddings) would keep float. */
    size_t chunk_bytes;     /* per-row scales: rows are quantized and written in blocks of about
                               this many input bytes, each block's input pages released after
                               (0: 64 MiB). The output does not depend on it. Per-tensor scales
                               take the whole layer at once. */
    /* progress: called after each tensor with layers done/total and bytes done/total */
    void (*progress)(void *user, int64_t layers_done, int64_t layers_total, uint64_t bytes_done,
                     uint64_t bytes_total);
    void *progress_user;
} qmm_quantize_file_options;
qmm_quantize_file_options qmm_quantize_file_options_default(void);

/* Would qmm_quantize_file quantize tensor t of f? 1, or 0 with the reason in why (may be NULL). */
int qmm_quantize_file_selects(const qmm_st_file *f, const qmm_st_tensor *t, const qmm_quantize_file_options *o,
                              char *why, size_t why_size);
/* IN (float checkpoint) → OUT (ComfyUI INT8 checkpoint): each selected float L.weight [N,K]
 * becomes L.weight I8 [N,K], L.weight_scale F32 [N,1] (per-tensor [1]) and L.comfy_quant U8
 * (right after it, in IN's data order); everything else and __metadata__ are carried over
 * unchanged. Streams: memory ≈ one block of rows (one layer with --per-tensor). *n_quantized (may be NULL) = layers quantized. */
qmm_status qmm_quantize_file(const char *in, const char *out, const qmm_quantize_file_options *o,
                             int64_t *n_quantized);

#ifdef __cplusplus
}
#endif
#endif /* QMM_IO_H */
