"""Shared set-up of the Python tests (pytest): the qmm package from this checkout when it is not
installed, 2 torch threads, the kitchen backend registered once, a seed printed per test."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
try:
    import qmm  # noqa: F401  (installed: pip install .)
except ImportError:
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import qmm  # noqa: F401

import torch  # noqa: E402

torch.set_num_threads(int(os.environ.get("QMM_TEST_THREADS", "2")))
SEED = int(os.environ.get("QMM_TEST_SEED", "1234"))


@pytest.fixture(autouse=True)
def _seed(request):
    torch.manual_seed(SEED)
    print("Seed = %d (QMM_TEST_SEED) for %s" % (SEED, request.node.nodeid))
    yield


@pytest.fixture(scope="session")
def kitchen():
    """The qmm.kitchen module with the backend registered (first for CPU tensors)."""
    import qmm.kitchen as k
    k.register()
    return k


def cli_path():
    """The qmm CLI: $QMM_CLI, else build/qmm of this checkout; None if neither exists."""
    p = os.environ.get("QMM_CLI") or os.path.join(ROOT, "build", "qmm")
    return p if os.path.exists(p) else None


def cli_or_skip():
    """cli_path(), else the test fails when $QMM_CLI names a missing file, and skips (visibly)
    when the CLI is simply not built."""
    cli = cli_path()
    if cli is None:
        if os.environ.get("QMM_CLI"):
            pytest.fail("QMM_CLI=%s does not exist" % os.environ["QMM_CLI"])
        pytest.skip("the qmm CLI is not built (make build, or set QMM_CLI)")
    return cli
