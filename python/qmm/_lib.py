"""qmm._lib — the ctypes mirror of include/qmm.h: loads libqmm.so and declares its structs and
functions exactly as the header does (field order, C types). Nothing here needs torch.

Where the library comes from, first match wins:
  1. $QMM_LIBRARY (a path to libqmm.so);
  2. libqmm.so inside this package (what `pip install .` puts there);
  3. build/libqmm.so of the source tree this file sits in (running from a checkout).

ctypes releases the GIL for the duration of every foreign call, so a long qmm_linear never
blocks other Python threads.
"""
import ctypes
import os
from ctypes import (POINTER, Structure, c_char, c_char_p, c_float, c_int, c_int8, c_int32,
                    c_int64, c_size_t, c_uint, c_uint32, c_uint64, c_void_p)

# ---------------------------------------------------------------- enums (pinned in qmm.h)
STATUS_NAMES = ["QMM_OK", "QMM_ERR_INVALID_ARGUMENT", "QMM_ERR_UNSUPPORTED", "QMM_ERR_NO_ENGINE",
                "QMM_ERR_FALLBACK_REFUSED", "QMM_ERR_UNSUPPORTED_HARDWARE",
                "QMM_ERR_OUT_OF_MEMORY", "QMM_ERR_IO", "QMM_ERR_FORMAT", "QMM_ERR_NOT_FOUND",
                "QMM_ERR_DIST", "QMM_ERR_INTERNAL", "QMM_ERR_CANCELLED"]
OK, ERR_INVALID_ARGUMENT, ERR_UNSUPPORTED, ERR_NO_ENGINE, ERR_FALLBACK_REFUSED = 0, 1, 2, 3, 4
ERR_CANCELLED = 12                               # qmm_cancel reached the call (SPEC §12)

F32, F16, BF16, I8, U8, I32, F8_E4M3 = 0, 1, 2, 3, 4, 5, 6
ACT_NONE, ACT_SWIGLU, ACT_GELU_TANH, ACT_RMS_NORM, ACT_SITU, ACT_COUNT = 0, 1, 2, 3, 4, 5
EPILOGUE_FUSED, EPILOGUE_KITCHEN = 0, 1
ENGINE_UNKNOWN, ENGINE_AUTO, ENGINE_REF = -1, 0, 1
KIND_REF, KIND_INT8, KIND_FLOAT = 0, 1, 2
ENGINE_MAX = 32      # capacity of the per-engine arrays (qmm.h, pinned); the engines: ENGINES below
OP_LINEAR, OP_ATTENTION = 0, 1                   # qmm_op
OP_MAX = 8           # capacity of the per-operation arrays (qmm.h, pinned); the operations: OPS below
FALLBACK_ALLOW, FALLBACK_STRICT = 0, 1
REASON_MAX = 160
ATTN_BEST, ATTN_F32, ATTN_INT8, ATTN_MODE_COUNT = 0, 1, 2, 3     # qmm_attn_mode
ATTN_MAX_D = 256                                 # QMM_ATTN_MAX_D


# ---------------------------------------------------------------- structs (same order as qmm.h)
class ContextOptions(Structure):
    _fields_ = [("n_threads", c_int), ("fallback", c_int), ("max_isa", c_int), ("verbose", c_int),
                ("pin_threads", c_int), ("cpu_list", POINTER(c_int)),
                ("disabled_engines", c_uint32)]


class OpCounters(Structure):
    _fields_ = [("calls", c_uint64 * ENGINE_MAX), ("fallbacks", c_uint64), ("errors", c_uint64)]


class Counters(Structure):
    _fields_ = [("op", OpCounters * OP_MAX)]


PHASE_MAX = 16
PHASES = ["call", "setup", "engine", "prepass", "gemm", "threads_tasks", "threads_pack",
          "threads_tiles", "threads_epilogue"]     # qmm_phase, in order (qmm_phase_name)


class Profile(Structure):
    _fields_ = [("calls", c_uint64), ("ns", c_uint64 * PHASE_MAX), ("threads", c_int),
                ("enabled", c_int)]


class WeightDesc(Structure):
    _fields_ = [("name", c_char_p), ("N", c_int64), ("K", c_int64), ("data", c_void_p),
                ("ld", c_int64), ("scale", c_void_p), ("n_scale", c_int64), ("bias", c_void_p),
                ("bias_dtype", c_int), ("convrot_gs", c_int), ("full_precision", c_int)]


class WeightInfo(Structure):
    _fields_ = [("name", c_char_p), ("N", c_int64), ("K", c_int64), ("is_int8", c_int),
                ("dtype", c_int), ("convrot_gs", c_int), ("per_tensor_scale", c_int),
                ("has_bias", c_int), ("full_precision", c_int), ("packed_bytes", c_size_t),
                ("code_bits", c_int), ("group_size", c_int), ("has_codebook", c_int)]


class W4A8Desc(Structure):
    _fields_ = [("name", c_char_p), ("N", c_int64), ("K", c_int64), ("bits", c_int),
                ("codes", c_void_p), ("codes_bytes", c_int64), ("s_rel", c_void_p),
                ("s_rel_dtype", c_int), ("n_s_rel", c_int64), ("group_size", c_int),
                ("codebook", c_void_p), ("n_codebook", c_int64), ("s_channel", c_void_p),
                ("bias", c_void_p), ("bias_dtype", c_int), ("convrot_gs", c_int),
                ("full_precision", c_int)]


class QuantOptions(Structure):
    _fields_ = [("convrot_gs", c_int), ("per_tensor", c_int)]


class LinearArgs(Structure):
    _fields_ = [("M", c_int64), ("x", c_void_p), ("x_dtype", c_int), ("ldx", c_int64),
                ("y", c_void_p), ("y_dtype", c_int), ("ldy", c_int64), ("act", c_int),
                ("x_cols", c_int64), ("token_scales", c_void_p), ("token_scales_in", c_void_p),
                ("engine", c_int),
                # the comfy-kitchen extensions (SPEC §1a)
                ("act_weight", c_void_p), ("act_weight_dtype", c_int), ("act_eps", c_float),
                ("modulation", c_void_p), ("epilogue", c_int), ("residual", c_void_p),
                ("ldr", c_int64), ("residual_scale", c_void_p)]


class PlanInfo(Structure):
    _fields_ = [("engine", c_int), ("is_fallback", c_int), ("status", c_int),
                ("admitted", c_int * ENGINE_MAX),
                ("reason", (c_char * REASON_MAX) * ENGINE_MAX),
                ("weight", c_char * REASON_MAX),
                ("regime", c_char * 32)]


class AttentionArgs(Structure):
    """qmm_attention_args (qmm.h, SPEC §10): q [B, H, S, D], k and v [B, Hkv, Skv, D], out
    [B, H, S, D], each with strides in elements between batches, heads and tokens; the mask
    [B, H, S, Skv] with four strides (0 broadcasts)."""
    _fields_ = [("B", c_int64), ("H", c_int64), ("Hkv", c_int64), ("S", c_int64),
                ("Skv", c_int64), ("D", c_int64),
                ("q", c_void_p), ("q_dtype", c_int), ("q_stride", c_int64 * 3),
                ("k", c_void_p), ("v", c_void_p), ("kv_dtype", c_int),
                ("k_stride", c_int64 * 3), ("v_stride", c_int64 * 3),
                ("out", c_void_p), ("out_dtype", c_int), ("out_stride", c_int64 * 3),
                ("scale", c_float),
                ("mask", c_void_p), ("mask_dtype", c_int), ("mask_stride", c_int64 * 4),
                ("mode", c_int),
                ("engine", c_int)]


class EngineInfo(Structure):
    _fields_ = [("id", c_int), ("name", c_char_p), ("kind", c_int), ("isa", c_int),
                ("cpu_features", c_uint32), ("operands", c_int), ("peak_instruction", c_char_p),
                ("verified_on_hardware", c_int), ("built", c_int)]


def _find_library():
    env = os.environ.get("QMM_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    packaged = os.path.join(here, "libqmm.so")
    if os.path.exists(packaged):
        return packaged
    tree = os.path.normpath(os.path.join(here, "..", "..", "build", "libqmm.so"))
    if os.path.exists(tree):
        return tree
    raise OSError("qmm: libqmm.so not found (set QMM_LIBRARY, `pip install .`, or `make build` "
                  "in the source tree); looked in %s and %s" % (packaged, tree))


PATH = _find_library()
lib = ctypes.CDLL(PATH)


def _fn(name, restype, *argtypes, optional=False):
    f = getattr(lib, name, None)
    if f is None:
        if optional:
            return None
        raise OSError("qmm: %s lacks %s (library older than this package?)" % (PATH, name))
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


qmm_version_string = _fn("qmm_version_string", c_char_p)
qmm_version_number = _fn("qmm_version_number", c_uint)
qmm_status_name = _fn("qmm_status_name", c_char_p, c_int)
qmm_last_error = _fn("qmm_last_error", c_char_p)
qmm_dtype_name = _fn("qmm_dtype_name", c_char_p, c_int)
qmm_act_name = _fn("qmm_act_name", c_char_p, c_int)
qmm_engine_name = _fn("qmm_engine_name", c_char_p, c_int)
qmm_engine_from_name = _fn("qmm_engine_from_name", c_int, c_char_p)
qmm_op_name = _fn("qmm_op_name", c_char_p, c_int)
qmm_engine_is_int8 = _fn("qmm_engine_is_int8", c_int, c_int)
qmm_isa_name = _fn("qmm_isa_name", c_char_p, c_int)
qmm_cpu_features = _fn("qmm_cpu_features", c_uint32)
qmm_cpu_feature_name = _fn("qmm_cpu_feature_name", c_char_p, c_uint32)
qmm_cpu_brand = _fn("qmm_cpu_brand", c_char_p)
qmm_engine_available = _fn("qmm_engine_available", c_int, c_int, c_char_p, c_size_t)

qmm_context_options_default = _fn("qmm_context_options_default", ContextOptions)
qmm_context_create = _fn("qmm_context_create", c_int, POINTER(ContextOptions), POINTER(c_void_p))
qmm_context_destroy = _fn("qmm_context_destroy", None, c_void_p)
qmm_context_threads = _fn("qmm_context_threads", c_int, c_void_p)
# 1: a call was in flight and is told to stop; 0: none (nothing changed); -1: NULL. Newer
# libraries only (None otherwise).
qmm_cancel = _fn("qmm_cancel", c_int, c_void_p, optional=True)
qmm_context_max_isa = _fn("qmm_context_max_isa", c_int, c_void_p)
qmm_get_counters = _fn("qmm_get_counters", None, c_void_p, POINTER(Counters))
qmm_reset_counters = _fn("qmm_reset_counters", None, c_void_p)
qmm_context_set_profile = _fn("qmm_context_set_profile", c_int, c_void_p, c_int)
qmm_phase_name = _fn("qmm_phase_name", c_char_p, c_int)
qmm_get_profile = _fn("qmm_get_profile", None, c_void_p, POINTER(Profile))
qmm_reset_profile = _fn("qmm_reset_profile", None, c_void_p)

# The weight functions take a qmm_context* first that may be None (weight creation uses no
# context, qmm.h): the binding passes None.
qmm_weight_desc_default = _fn("qmm_weight_desc_default", WeightDesc)
qmm_weight_create_int8 = _fn("qmm_weight_create_int8", c_int, c_void_p, POINTER(WeightDesc),
                             POINTER(c_void_p))
qmm_weight_borrow_int8 = _fn("qmm_weight_borrow_int8", c_int, c_void_p, POINTER(WeightDesc),
                             POINTER(c_void_p))
qmm_quantize_weight = _fn("qmm_quantize_weight", c_int, c_void_p, c_int, c_int64, c_int64, c_int64,
                          POINTER(QuantOptions), c_void_p, c_void_p, POINTER(c_int))
qmm_dequantize_weight = _fn("qmm_dequantize_weight", c_int, c_void_p, c_int64, c_int64, c_void_p,
                            c_int64, c_int, c_void_p)
qmm_weight_create_float = _fn("qmm_weight_create_float", c_int, c_void_p, c_char_p, c_void_p, c_int,
                              c_int64, c_int64, c_int64, c_void_p, c_int, POINTER(c_void_p))
qmm_weight_destroy = _fn("qmm_weight_destroy", None, c_void_p)
qmm_w4a8_desc_default = _fn("qmm_w4a8_desc_default", W4A8Desc, optional=True)
qmm_weight_borrow_w4a8 = _fn("qmm_weight_borrow_w4a8", c_int, c_void_p, POINTER(W4A8Desc),
                             POINTER(c_void_p), optional=True)
qmm_weight_int8_rows = _fn("qmm_weight_int8_rows", c_int, c_void_p, c_int64, c_int64, c_void_p,
                           c_int64, optional=True)
qmm_weight_get_info = _fn("qmm_weight_get_info", None, c_void_p, POINTER(WeightInfo))

qmm_linear_args_default = _fn("qmm_linear_args_default", LinearArgs)
qmm_linear = _fn("qmm_linear", c_int, c_void_p, c_void_p, POINTER(LinearArgs))
qmm_last_engine = _fn("qmm_last_engine", c_int, c_void_p)
qmm_plan = _fn("qmm_plan", c_int, c_void_p, c_void_p, POINTER(LinearArgs), POINTER(PlanInfo))
qmm_plan_format = _fn("qmm_plan_format", c_size_t, POINTER(PlanInfo), c_char_p, c_size_t)

# The engine table, read from the library (qmm_engine_count / qmm_engine_get_info): ENGINES is
# one dict per engine in dispatch order (int8 best first, float best first, the reference).
qmm_engine_count = _fn("qmm_engine_count", c_int)
qmm_engine_get_info = _fn("qmm_engine_get_info", c_int, c_int, POINTER(EngineInfo))
qmm_plan_admits = _fn("qmm_plan_admits", c_int, POINTER(PlanInfo), c_int)
qmm_plan_reason = _fn("qmm_plan_reason", c_char_p, POINTER(PlanInfo), c_int)


def _engines():
    out = []
    for i in range(qmm_engine_count()):
        e = EngineInfo()
        if qmm_engine_get_info(i, ctypes.byref(e)) == OK:
            out.append({"id": e.id, "name": e.name.decode(), "kind": e.kind, "isa": e.isa,
                        "cpu_features": e.cpu_features, "operands": e.operands,
                        "peak_instruction": e.peak_instruction.decode(),
                        "verified_on_hardware": bool(e.verified_on_hardware), "built": bool(e.built)})
    return tuple(out)


ENGINES = _engines()
# one past the largest engine id of the library: range(ENGINE_COUNT) walks every id (arrays are
# ENGINE_MAX long); ENGINES is the table itself
ENGINE_COUNT = 1 + max([ENGINE_REF] + [e["id"] for e in ENGINES])
# the library's operations, (id, name) by id: "linear", "attention", ...
OPS = tuple((i, qmm_op_name(i).decode()) for i in range(OP_MAX) if qmm_op_name(i) != b"unknown")

# Kitchen-exact per-row quantization (the kitchen's quantize_* functions); newer libraries only.
qmm_quantize_rows = _fn("qmm_quantize_rows", c_int, c_void_p, c_void_p, c_int, c_int64, c_int64,
                        c_int64, c_int, c_void_p, c_void_p, c_int64, c_void_p)

# Attention (SPEC §10); newer libraries only: None when the loaded library lacks them.
qmm_attention_args_default = _fn("qmm_attention_args_default", AttentionArgs, optional=True)
qmm_attention = _fn("qmm_attention", c_int, c_void_p, POINTER(AttentionArgs), optional=True)
qmm_attention_plan = _fn("qmm_attention_plan", c_int, c_void_p, POINTER(AttentionArgs),
                         POINTER(PlanInfo), optional=True)



class RopeArgs(Structure):
    """qmm_rope_args (qmm.h, SPEC §13): x and out [n0, n1, n2, D] with three strides each (in
    elements), freqs [n0, n1, n2, rot/2, 2, 2] with three strides (0 broadcasts), rot_dim (0 = D),
    split_half, the optional RMSNorm weight [D] and eps."""
    _fields_ = [("n", c_int64 * 3), ("D", c_int64),
                ("x", c_void_p), ("x_dtype", c_int), ("x_stride", c_int64 * 3),
                ("out", c_void_p), ("out_stride", c_int64 * 3),
                ("freqs", c_void_p), ("freqs_dtype", c_int), ("freqs_stride", c_int64 * 3),
                ("rot_dim", c_int64), ("split_half", c_int),
                ("norm_weight", c_void_p), ("norm_weight_dtype", c_int),
                ("eps", c_float)]


# Row ops (SPEC §13); newer libraries only: None when the loaded library lacks them.
qmm_rope_args_default = _fn("qmm_rope_args_default", RopeArgs, optional=True)
qmm_rope = _fn("qmm_rope", c_int, c_void_p, POINTER(RopeArgs), optional=True)
ROPE_MAX_D = 1024


class RmsModArgs(Structure):
    """qmm_rms_mod_args (qmm.h, SPEC §13): x and out [n0, n1, n2, D], a and b read through three
    strides each (0 repeats), the optional weight [D], every tensor of one dtype; kind
    RMS_ADALN (a = scale, b = shift) or RMS_GATED_RESIDUAL (a = gate, b = residual)."""
    _fields_ = [("n", c_int64 * 3), ("D", c_int64), ("dtype", c_int),
                ("x", c_void_p), ("x_stride", c_int64 * 3),
                ("out", c_void_p), ("out_stride", c_int64 * 3),
                ("norm_weight", c_void_p),
                ("a", c_void_p), ("a_stride", c_int64 * 3),
                ("b", c_void_p), ("b_stride", c_int64 * 3),
                ("kind", c_int), ("eps", c_float)]


RMS_ADALN, RMS_GATED_RESIDUAL = 0, 1
qmm_rms_mod_args_default = _fn("qmm_rms_mod_args_default", RmsModArgs, optional=True)
qmm_rms_mod = _fn("qmm_rms_mod", c_int, c_void_p, POINTER(RmsModArgs), optional=True)

__all__ = ["lib", "PATH", "c_int8", "c_int32", "c_float"]
