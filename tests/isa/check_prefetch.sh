#!/bin/sh
# check_prefetch.sh BUILD_DIR — the streaming rows kernels issue their software prefetches: each
# function below (the rows regime's kernels, int8 and fused W4A8, which read a weight from DRAM
# once per call) holds at least one prefetch instruction in objdump -d of its object. A compiler
# may drop a prefetch without a word (GCC 12 found a helper made only of _mm_prefetch pure and
# removed every call to it), and no result changes: only the speed. Exit 77 (skipped, said
# loudly) when objdump is missing.
set -eu
build=${1:?usage: check_prefetch.sh BUILD_DIR}
objdir=$build/CMakeFiles/qmm_obj.dir
if ! command -v objdump >/dev/null 2>&1; then
    echo "SKIPPED: objdump not found (install binutils): prefetches not checked"
    exit 77
fi

# object (under src/)                        function
table='
engines/x86_avx512/avx512_vnni_rows.c        qmm_qd8_qc8w_rows_ukernel_m1to2__avx512vnni_dot
engines/x86_avx512/avx512_vnni_rows.c        qmm_qd8_qc8w_rows_ukernel_m13to16__avx512vnni_bcast
engines/x86_avx512/avx512_vnni_w4a8.c        qmm_qd8_w4w6_rows_ukernel_m1to8__avx512vnni_fused
engines/x86_avx512/avx512_vnni_w4a8.c        qmm_qd8_w4w6_rows_ukernel_m9to16__avx512vnni_bcast
engines/x86_avx512/avx512_vnni_w4a8.c        qmm_qd8_w4w6_rows_ukernel_m17to64__avx512vnni_groups
engines/x86_avx512/avx512_vnni_w4a8_vbmi.c   qmm_qd8_w6_rows_ukernel_m1to8__avx512vbmi_fused
engines/x86_avx512/avx512_vnni_w4a8_vbmi.c   qmm_qd8_w6_rows_ukernel_m9to16__avx512vbmi_bcast
engines/x86_avx2/avx_vnni_w4a8.c             -
engines/x86_avx2/avx2_int8_w4a8.c            -
'
fail=0 checked=0
tmpf=$(mktemp)
trap 'rm -f "$tmpf"' EXIT
echo "$table" | grep -v '^$' >"$tmpf"
while read -r src fn; do
    obj=$objdir/src/$src.o
    if [ ! -f "$obj" ]; then echo "FAIL $src: no object $obj"; fail=1; continue; fi
    # the prefetches of fn: its body and the parts the compiler split off under names that start
    # with fn (fn.cold, fn.part.0); "-": the whole object
    n=$(objdump -d --no-show-raw-insn "$obj" | awk -v fn="$fn" '
        /^[0-9a-f]+ <.*>:$/ { name = $2; sub(/^</, "", name); sub(/>:$/, "", name)
                              inside = (fn == "-" || index(name, fn) == 1) }
        inside && /prefetch/ { c++ }
        END { print c + 0 }')
    if [ "$n" -eq 0 ]; then
        echo "FAIL $src ${fn}: no prefetch instruction (did the compiler drop them?)"
        fail=1
    else
        echo "ok   $src $fn: $n prefetches"
    fi
    checked=$((checked + 1))
done <"$tmpf"
[ $checked -gt 0 ] || { echo "FAIL: nothing checked"; fail=1; }
exit $fail
