#!/bin/sh
# check_install.sh BUILD_DIR SRC_DIR CC CMAKE VERSION [EXTRA_CFLAGS] — installs BUILD_DIR into a
# fresh temporary prefix and checks what a C library user needs: the headers, libqmm.a,
# libqmm.so with its SONAME, the qmm CLI, qmm.pc and the CMake package. Then builds the consumer
# (tests/install/consumer) against the installed tree both ways — pkg-config + cc (shared, and
# static with `pkg-config --static`) and a CMake project with find_package(qmm) (qmm::qmm and
# qmm::qmm_static) — runs each and checks the line it prints. EXTRA_CFLAGS: the sanitizer flags
# of an instrumented build (its objects need the sanitizer runtime at link time).
set -eu
build=$1 src=$2 cc=$3 cmake=$4 version=$5 extra=${6:-}
major=${version%%.*}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/qmm-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "FAIL: $*"; exit 1; }

"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; fail "cmake --install"; }
libdir=$(dirname "$(find "$prefix" -name qmm.pc | head -1)")/..
[ -d "$libdir" ] || fail "no qmm.pc installed"
libdir=$(cd "$libdir" && pwd)
for f in include/qmm.h include/qmm_io.h include/qmm_dist.h bin/qmm; do
    [ -e "$prefix/$f" ] || fail "missing $f"
done
for f in libqmm.a "libqmm.so" "libqmm.so.$major" "libqmm.so.$version" cmake/qmm/qmmConfig.cmake \
         cmake/qmm/qmmConfigVersion.cmake cmake/qmm/qmmTargets.cmake; do
    [ -e "$libdir/$f" ] || fail "missing $libdir/$f"
done
if command -v objdump >/dev/null 2>&1; then
    soname=$(objdump -p "$libdir/libqmm.so.$version" | awk '/SONAME/ {print $2}')
    [ "$soname" = "libqmm.so.$major" ] || fail "SONAME is '$soname', expected libqmm.so.$major"
    echo "SONAME $soname"
else
    echo "objdump missing: SONAME not checked"
fi
"$prefix/bin/qmm" info >/dev/null || fail "installed qmm info"

expect="consumer: qmm $version .* y\[0\]=32.000 y\[31\]=32.000 engine=.* same-as-ref io.min_size=256"
check_run() { # name, command...
    name=$1; shift
    out=$("$@") || fail "$name: exit status $? ($out)"
    echo "$name: $out"
    printf '%s\n' "$out" | grep -q "$expect" || fail "$name: output does not match '$expect'"
}

# 1. pkg-config + cc
export PKG_CONFIG_PATH="$libdir/pkgconfig"
command -v pkg-config >/dev/null 2>&1 || fail "pkg-config missing"
[ "$(pkg-config --modversion qmm)" = "$version" ] || fail "pkg-config --modversion qmm"
cflags=$(pkg-config --cflags qmm)
# shellcheck disable=SC2086
"$cc" $extra $cflags "$src/tests/install/consumer/consumer.c" -o "$tmp/pc_shared" $(pkg-config --libs qmm) \
    || fail "cc with pkg-config (shared)"
check_run "pkg-config shared" env LD_LIBRARY_PATH="$libdir" "$tmp/pc_shared"
if command -v ldd >/dev/null 2>&1; then
    LD_LIBRARY_PATH="$libdir" ldd "$tmp/pc_shared" | grep -q "libqmm.so.$major => $libdir" || fail "pc_shared does not load the installed libqmm.so.$major"
fi
static_libs=$(pkg-config --static --libs qmm | sed 's/-lqmm//')
# shellcheck disable=SC2086
"$cc" $extra $cflags "$src/tests/install/consumer/consumer.c" -o "$tmp/pc_static" "$libdir/libqmm.a" $static_libs \
    || fail "cc with pkg-config --static"
check_run "pkg-config static" "$tmp/pc_static"

# 2. a CMake project with find_package(qmm)
"$cmake" -S "$src/tests/install/consumer" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_BUILD_TYPE=Release "-DCMAKE_C_FLAGS=$extra" "-DCMAKE_EXE_LINKER_FLAGS=$extra" >"$tmp/cm.log" 2>&1 \
    || { cat "$tmp/cm.log"; fail "find_package(qmm) configure"; }
"$cmake" --build "$tmp/cm" >"$tmp/cmb.log" 2>&1 || { cat "$tmp/cmb.log"; fail "find_package(qmm) build"; }
check_run "find_package qmm::qmm" "$tmp/cm/consumer_shared"
check_run "find_package qmm::qmm_static" "$tmp/cm/consumer_static"
if command -v ldd >/dev/null 2>&1; then
    for b in "$tmp/pc_static" "$tmp/cm/consumer_static"; do
        ! ldd "$b" | grep -q libqmm.so || fail "$b links libqmm.so, expected the static library"
    done
    LD_LIBRARY_PATH="" ldd "$tmp/cm/consumer_shared" | grep -q "libqmm.so.$major => $libdir" \
        || fail "consumer_shared does not find the installed libqmm.so.$major (RPATH)"
fi
echo "install tree and both consumers OK"
