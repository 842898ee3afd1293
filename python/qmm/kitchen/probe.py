"""qmm.kitchen.probe — what the loaded libqmm runs on an int8 engine, tried once per feature.

probe(feature) is None when the library runs `feature` on an int8 engine, else the reason (its
error message). Features: "act:<name>", "modulation", "residual", "gs:<g>".
Each is tried once per process on a tiny layer through a private one-thread context (the
process context and its counters stay untouched) and remembered.
"""
import threading

import torch

import qmm
from qmm import _lib as L

from ._common import PAIR_ACTS

_lock = threading.Lock()
_probed = {}
_MISS = object()


def probe(feature):
    why = _probed.get(feature, _MISS)
    if why is not _MISS:
        return why
    with _lock:
        if feature in _probed:
            return _probed[feature]
        try:
            why = _probe_one(feature)
        except qmm.QmmError as e:
            why = str(e)
        _probed[feature] = why
        return why


def _probe_one(feature):
    gs, K, act, extra = 0, 16, "none", None
    if feature.startswith("gs:"):
        gs = int(feature[3:])
        K = gs
    elif feature.startswith("act:"):
        act = feature[4:]
    else:
        extra = feature
    N = 16
    ctx = qmm.Context(n_threads=1)
    w8 = torch.ones((N, K), dtype=torch.int8)
    sc = torch.full((N,), 0.5, dtype=torch.float32)
    w = qmm.Weight.int8(w8.data_ptr(), N, K, sc.data_ptr(), N, convrot_gs=gs,
                        name="probe(%s)" % feature)
    kin = 2 * K if act in PAIR_ACTS else K
    x = torch.linspace(-1, 1, kin, dtype=torch.bfloat16).reshape(1, kin)
    y = torch.empty((1, N), dtype=torch.bfloat16)
    a = qmm.linear_args(1, L.BF16, L.BF16, act, "kitchen")
    a.x, a.y = x.data_ptr(), y.data_ptr()
    keep = []
    if act == "rms_norm":
        aw = torch.ones(K, dtype=torch.bfloat16)
        keep.append(aw)
        a.act_weight, a.act_weight_dtype, a.act_eps = aw.data_ptr(), L.BF16, 1e-6
    if extra == "modulation":
        m = torch.zeros(K, dtype=torch.bfloat16)
        keep.append(m)
        a.modulation = m.data_ptr()
    elif extra == "residual":
        r = torch.ones((1, N), dtype=torch.bfloat16)
        keep.append(r)
        a.residual, a.residual_scale = r.data_ptr(), r.data_ptr()
    p = qmm.plan(w, args=a, ctx=ctx)
    if p.status != "QMM_OK" or p.is_fallback:
        return "no int8 engine runs it: " + "; ".join("%s: %s" % kv for kv in p.reasons.items()
                                                      if kv[0] != "ref")
    w.linear(a, ctx=ctx)
    return None
