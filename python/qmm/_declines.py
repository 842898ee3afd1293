"""qmm._declines — the one store of the calls qmm passes on to another implementation: the
kitchen backend's declines (qmm.kitchen.declines(), source "kitchen") and the ComfyUI attention
adapter's (qmm.comfy.attention.declines(), source "comfyui"). Nothing here needs torch.

record(source, key, other, log, msg, *args) counts the call under (source, key) and logs msg %
args on log: DEBUG every time, INFO the first time per key (the message is formatted only when
a logger emits it). The store is bounded: past MAX keys, a new key is counted under (source,
other). counts(source) and reset(source) read and clear one source's part.
"""
import threading

MAX = 1024

_lock = threading.Lock()
_counts = {}            # (source, key) -> count


def record(source, key, other, log, msg, *args):
    with _lock:
        k = (source, key)
        first = k not in _counts
        if first and len(_counts) >= MAX:
            k = (source, other)
            first = k not in _counts
        _counts[k] = _counts.get(k, 0) + 1
    log.debug(msg, *args)
    if first:
        log.info(msg, *args)


def counts(source):
    """{key: count} of source since its last reset."""
    with _lock:
        return {k: n for (s, k), n in _counts.items() if s == source}


def reset(source):
    with _lock:
        for k in [k for k in _counts if k[0] == source]:
            del _counts[k]
