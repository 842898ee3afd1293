"""qmm.kitchen._declines — the calls the backend refuses, counted and logged.

A refusal is logged on the kitchen's own dispatch logger ("comfy_kitchen.dispatch"): DEBUG every
time, INFO the first time per (function, reason); declines() returns the counts. The message is
formatted only when a call is refused (never on an accepted call).
"""
import logging
import threading

from comfy_kitchen.constraints import ValidationResult

dispatch_log = logging.getLogger("comfy_kitchen.dispatch")

_lock = threading.Lock()
_counts = {}            # (function, "param: reason") -> count; bounded
_MAX = 512
_MSG = "Backend qmm declines %s (%s: %s); the next backend in priority runs it"


def decline(func, param, reason):
    """Count and log a refusal; the kitchen's ValidationResult.fail(param, reason)."""
    with _lock:
        key = (func, "%s: %s" % (param, reason))
        first = key not in _counts
        if first and len(_counts) >= _MAX:
            key = (func, "(other reasons)")
            first = key not in _counts
        _counts[key] = _counts.get(key, 0) + 1
    dispatch_log.debug(_MSG, func, param, reason)
    if first:
        dispatch_log.info(_MSG, func, param, reason)
    return ValidationResult.fail(param, reason)


def declines():
    """{(function, "param: reason"): count} of the calls qmm declined since the last reset."""
    with _lock:
        return dict(_counts)


def reset_declines():
    with _lock:
        _counts.clear()
