#!/usr/bin/env bash
# test-python.sh — the Python side of `make test`: the package `qmm` (pip install . of this
# repository), its comfy-kitchen backend and the ComfyUI node, tested with pytest
# (tests/python) against the real comfy-kitchen package.
#   venv      ${QMM_VENV:-$HOME/.cache/qmm-venv}, created if absent (python3 -m venv)
#   packages  torch, comfy-kitchen, packaging (comfy-kitchen imports it without declaring it),
#             pytest, numpy, safetensors, scikit-build-core — from PyPI by name, each only if
#             the venv lacks it ($QMM_PIP_ARGS are added to that pip call, e.g.
#             "--extra-index-url https://download.pytorch.org/whl/cpu" for a CPU-only torch)
#   build     pip install --no-build-isolation . (scikit-build-core drives CMake with
#             QMM_PYTHON_WHEEL=ON: libqmm.so only)
#   tests     pytest tests/python with QMM_CLI=build/qmm (the end-to-end test writes its
#             checkpoint with `qmm quantize`); "no tests collected" (pytest status 5) fails.
# Extra arguments go to pytest (e.g. scripts/test-python.sh -k parity -x).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${QMM_VENV:-$HOME/.cache/qmm-venv}"
PY="$VENV/bin/python"
if [ ! -x "$PY" ]; then
  echo "test-python: creating the venv $VENV"
  python3 -m venv "$VENV"
fi

need=()
for pair in torch:torch comfy_kitchen:comfy-kitchen packaging:packaging pytest:pytest \
            numpy:numpy safetensors:safetensors scikit_build_core:scikit-build-core; do
  mod=${pair%%:*}
  pkg=${pair#*:}
  "$PY" -c "import $mod" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "test-python: installing ${need[*]} into $VENV"
  # shellcheck disable=SC2086
  "$PY" -m pip install --quiet ${QMM_PIP_ARGS:-} "${need[@]}"
fi

echo "test-python: pip install . (libqmm.so + the qmm package)"
"$PY" -m pip install --quiet --no-build-isolation --force-reinstall --no-deps .

export QMM_CLI="${QMM_CLI:-$PWD/${BUILD:-build}/qmm}"
if [ ! -x "$QMM_CLI" ]; then
  echo "test-python: the qmm CLI $QMM_CLI is missing (run make build first)" >&2
  exit 1
fi
set +e
(cd tests/python && "$PY" -m pytest -q -p no:cacheprovider "$@")
rc=$?
set -e
if [ $rc -eq 5 ]; then
  echo "test-python: pytest collected no tests (status 5): that is a failure" >&2
  exit 1
fi
exit $rc
