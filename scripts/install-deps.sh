#!/usr/bin/env bash
# install-deps.sh — installs what building and testing qmm needs, from Debian's archive, only
# if it is missing. Each package and why it is there:
#   cmake, make, gcc, pkg-config   the build (CMake + CTest is the test runner)
#   binutils (objdump)             test isa_objects disassembles each engine's objects
#   clang                          libFuzzer fuzz targets (the corpus replays without it)
#   libjson-c-dev                  the safetensors JSON header and comfy_quant JSON (maintained parser)
#   libsimde-dev                   the tests' portable copies of the AVX-512 / AVX-VNNI attention kernels
#                                  (tests/simde.cmake), so a CPU without them still checks them
#   openmpi-bin, libopenmpi-dev    tensor parallelism over MPI (qmm builds without it; TP is then absent)
#   python3, python3-venv          the Python package's venv (scripts/test-python.sh)
set -euo pipefail

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v make >/dev/null || need+=(make)
command -v gcc >/dev/null || need+=(gcc)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v objdump >/dev/null || need+=(binutils)
command -v clang >/dev/null || need+=(clang)
pkg-config --exists json-c 2>/dev/null || need+=(libjson-c-dev)
[ -e /usr/include/simde/x86/avx512.h ] || need+=(libsimde-dev)
command -v mpirun >/dev/null || need+=(openmpi-bin)
command -v mpicc >/dev/null || need+=(libopenmpi-dev)
command -v python3 >/dev/null || need+=(python3)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
[ -e /usr/lib/x86_64-linux-gnu/libasan.so.8 ] || [ -n "$(ls /usr/lib/gcc/*/*/libasan.so 2>/dev/null)" ] || need+=(libasan8)

# optional: the reference Python safetensors for the interop test (skipped visibly without it)
python3 -c 'import safetensors, numpy' 2>/dev/null || python3 -m pip install --quiet safetensors numpy >/dev/null 2>&1 ||
  echo "install-deps: optional, not installed: python3 -m pip install safetensors numpy (interop test)"

if [ ${#need[@]} -eq 0 ]; then
  echo "install-deps: everything is installed"
  exit 0
fi
echo "install-deps: installing ${need[*]}"
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null; then SUDO=sudo; else
    echo "install-deps: not root and no sudo: please install: ${need[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
