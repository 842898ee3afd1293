#!/bin/sh
# run_mpi.sh NP PROGRAM [ARGS...] — runs PROGRAM under `mpirun -np NP` on this host only, for
# CTest (tests/tp.cmake): oversubscribed (more ranks than cores is fine), root-safe, shared
# memory + loopback only (no network), one QMM_SEED for every rank (printed by each), one
# thread per rank unless QMM_NUM_THREADS says otherwise. Exit 77 (skip) if mpirun is missing.
# run_mpi.sh --mpmd -np 1 PROG ARGS : -np 1 PROG OTHER-ARGS — the same environment, mpirun's
# MPMD form (ranks started with different command lines).
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
# ASan builds: Open MPI keeps allocations until exit inside components it has dlclose()d, so
# LeakSanitizer cannot even name them (no suppression matches "<unknown module>"). Leak checking
# of qmm's own code is done by the single-process tests; here ASan/UBSan still check every
# memory access. QMM_TP_LEAKS=1 keeps leak checking on (with the suppressions of lsan.supp).
here=$(cd "$(dirname "$0")" && pwd)
if [ "${QMM_TP_LEAKS:-0}" = 1 ]; then
    export LSAN_OPTIONS="suppressions=$here/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
else
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
if [ "$np" = --mpmd ]; then
    exec "$MPIRUN" --oversubscribe --bind-to none "$@"
fi
exec "$MPIRUN" --oversubscribe --bind-to none -np "$np" "$@"
