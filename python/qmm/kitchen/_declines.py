"""qmm.kitchen._declines — the calls the backend refuses, counted and logged (in qmm._declines,
the store the ComfyUI attention adapter's declines share, as source "kitchen").

A refusal is logged on the kitchen's own dispatch logger ("comfy_kitchen.dispatch"): DEBUG every
time, INFO the first time per (function, reason); declines() returns the counts. The message is
formatted only when a call is refused (never on an accepted call).
"""
import logging

from comfy_kitchen.constraints import ValidationResult

from qmm import _declines as _store

dispatch_log = logging.getLogger("comfy_kitchen.dispatch")

SOURCE = "kitchen"
_MSG = "Backend qmm declines %s (%s: %s); the next backend in priority runs it"


def decline(func, param, reason):
    """Count and log a refusal; the kitchen's ValidationResult.fail(param, reason)."""
    _store.record(SOURCE, (func, "%s: %s" % (param, reason)), (func, "(other reasons)"),
                  dispatch_log, _MSG, func, param, reason)
    return ValidationResult.fail(param, reason)


def declines():
    """{(function, "param: reason"): count} of the calls qmm declined since the last reset."""
    return _store.counts(SOURCE)


def reset_declines():
    _store.reset(SOURCE)
