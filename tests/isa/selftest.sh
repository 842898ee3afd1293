#!/bin/sh
# selftest.sh BUILD_DIR CC — check_isa.sh must catch what it is there to catch: a copy of the
# build's object tree in which avx2_int8's object holds an AVX-VNNI instruction and avx2_f32's an
# AVX-512 one (compiled here from a few lines of C) must fail, naming both. Exit 77 without
# objdump or when CC cannot build the planted objects.
set -eu
build=${1:?usage: selftest.sh BUILD_DIR CC} cc=${2:?usage: selftest.sh BUILD_DIR CC}
here=$(cd "$(dirname "$0")" && pwd)
command -v objdump >/dev/null 2>&1 || { echo "SKIPPED: objdump not found"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/b/CMakeFiles"
cp -R "$build/CMakeFiles/qmm_obj.dir" "$tmp/b/CMakeFiles/"
d=$tmp/b/CMakeFiles/qmm_obj.dir/src/engines/x86_avx2
cat >"$tmp/vnni.c" <<'C'
#include <immintrin.h>
__m256i planted_vnni(__m256i a, __m256i b, __m256i c) { return _mm256_dpbusd_avx_epi32(a, b, c); }
C
cat >"$tmp/zmm.c" <<'C'
#include <immintrin.h>
__m512 planted_zmm(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
C
"$cc" -O2 -mavx2 -mavxvnni -c "$tmp/vnni.c" -o "$d/avx2_int8.c.o" 2>/dev/null &&
    "$cc" -O2 -mavx512f -c "$tmp/zmm.c" -o "$d/avx2_f32.c.o" 2>/dev/null ||
    { echo "SKIPPED: $cc cannot build the planted objects"; exit 77; }
set +e
out=$(sh "$here/check_isa.sh" "$tmp/b" 2>&1)
rc=$?
set -e
printf '%s\n' "$out" | grep FAIL || true
[ $rc -ne 0 ] || { echo "check_isa.sh passed objects with instructions above their ISA"; exit 1; }
printf '%s\n' "$out" | grep -q "FAIL src/engines/x86_avx2/avx2_int8.c: instructions of avx_vnni" ||
    { echo "the AVX-VNNI instruction in avx2_int8's object was not reported"; exit 1; }
printf '%s\n' "$out" | grep -q "FAIL src/engines/x86_avx2/avx2_f32.c: instructions of avx512f" ||
    { echo "the zmm instruction in avx2_f32's object was not reported"; exit 1; }
echo "check_isa.sh caught both planted instructions"
