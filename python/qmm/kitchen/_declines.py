"""qmm.kitchen._declines — the calls the backend refuses, counted and logged (in qmm._declines,
the store the ComfyUI attention adapter's declines share, as source "kitchen").

A refusal is logged on the kitchen's own dispatch logger ("comfy_kitchen.dispatch"): DEBUG every
time, INFO the first time per (function, reason); declines() returns the counts. The message is
formatted only when a call is refused (never on an accepted call).

hand_on(func, kwargs, error): a call the kitchen gave qmm (its call rule accepted it) that qmm
cannot run after all — qmm.configure() changed the options between the rule and the call, or
the library failed at call time — is declined then: counted and logged as above, and run on the
next backend in the kitchen's priority whose constraints take it (as the kitchen would have
chosen had the rule refused), so that no qmm error reaches the kitchen's caller.
"""
import logging

from comfy_kitchen.constraints import ValidationResult

from qmm import _declines as _store

from ._common import Refused

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


def hand_on(func, kw, error):
    """Decline a call qmm accepted but cannot run (error: a Refused or a qmm.QmmError) and return
    what the next backend that takes kw gives; error itself when none does."""
    from comfy_kitchen.registry import registry

    from . import BACKEND, _current_priority
    if isinstance(error, Refused):
        decline(func, error.param, error.reason)
    else:
        decline(func, error.call or "qmm", "%s: %s" % (error.status_name, error.message))
    for b in _current_priority():
        if b != BACKEND and registry.validate_backend_for_call(b, func, kw).success:
            return registry.get_implementation(func, backend=b)(**kw)
    raise error
