#!/bin/sh
# run_mpi.sh NP PROGRAM [ARGS...] — runs PROGRAM under `mpirun -np NP` on this host only, for
# CTest (tests/tp.cmake): oversubscribed (more ranks than cores is fine), root-safe, shared
# memory + loopback only (no network), one QMM_SEED for every rank (printed by each), one
# thread per rank unless QMM_NUM_THREADS says otherwise. Exit 77 (skip) if mpirun is missing.
np=$1
shift
MPIRUN=${QMM_MPIEXEC:-mpirun}
if ! command -v "$MPIRUN" >/dev/null 2>&1; then
    echo "skipped: tp: mpirun not found (install openmpi-bin)"
    exit 77
fi
if [ -z "$QMM_SEED" ]; then
    QMM_SEED=$(od -An -N4 -tu4 /dev/urandom | tr -d ' \n')
fi
export QMM_SEED
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader
export OMPI_MCA_btl_vader_single_copy_mechanism=none   # containers without ptrace/CMA
export OMPI_MCA_oob_tcp_if_include=lo
export OMPI_MCA_rmaps_base_oversubscribe=1
export QMM_NUM_THREADS="${QMM_NUM_THREADS:-1}"
# Open MPI's own allocations at exit are not qmm's leaks (ASan builds)
here=$(cd "$(dirname "$0")" && pwd)
export LSAN_OPTIONS="suppressions=$here/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
exec "$MPIRUN" --oversubscribe --bind-to none -np "$np" "$@"
