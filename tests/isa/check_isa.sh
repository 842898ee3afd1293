#!/bin/sh
# check_isa.sh BUILD_DIR — each ISA-specific object of libqmm stays within the CPU features its
# engine checks before running it (the .cpu_features of the engine's qmm_engine, or the features
# the selector of a core pre-pass / float panel kernel checks). Two checks per object:
#   flags        the -m flags it was compiled with (compile_commands.json) are exactly the flags
#                of those features — nothing above (e.g. no -mavxvnni for avx2_int8);
#   instructions objdump -d shows no instruction of a feature outside them (VNNI, BF16, AMX,
#                AVX-512 registers zmm / k / xmm16+, AVX512-DQ, AVX512-VBMI, F16C, FMA).
# AVX-512 implies FMA, F16C and AVX2 here (every AVX-512 CPU has them). Every object under
# src/engines/x86_*/ and src/core/avx2/, src/core/avx512/ must be in the table below, and each engine's signature
# instruction must be found (so that the detection is known to work); "none" is plain C beside an
# engine's kernels (its hooks that run on any CPU): no -m flag, none of these instructions.
# Exit 77 (skipped, said loudly) when objdump is missing.
set -eu
build=${1:?usage: check_isa.sh BUILD_DIR}
objdir=$build/CMakeFiles/qmm_obj.dir
if ! command -v objdump >/dev/null 2>&1; then
    echo "SKIPPED: objdump not found (install binutils): ISA of the engine objects not checked"
    exit 77
fi
[ -d "$objdir" ] || { echo "FAIL: no object directory $objdir"; exit 1; }
cc_json=$build/compile_commands.json
[ -f "$cc_json" ] || echo "note: $cc_json missing: compile flags not checked, disassembly only"

# source (relative to the repository)          allowed features                    signature
table='
src/engines/x86_avx2/avx2_int8.c            avx2,fma,f16c                                -
src/engines/x86_avx2/avx2_int8_w4a8.c       avx2,fma,f16c                                -
src/engines/x86_avx2/avx2_f32.c             avx2,fma                                     fma
src/engines/x86_avx2/avx2_f32_attn.c        avx2,fma                                     fma
src/engines/x86_avx2/avx_vnni.c             avx2,fma,f16c,avx_vnni                       avx_vnni
src/engines/x86_avx2/avx_vnni_w4a8.c        avx2,fma,f16c,avx_vnni                       avx_vnni
src/engines/x86_avx2/avx_vnni_rows.c        avx2,fma,f16c,avx_vnni                       avx_vnni
src/engines/x86_avx2/avx_vnni_attn.c        avx2,fma,f16c,avx_vnni                       avx_vnni
src/core/avx2/prepass_avx2.c                avx2,fma,f16c                                f16c
src/core/avx2/attention_avx2.c              avx2,fma                                     fma
src/core/avx2/float_act_avx2.c              avx2,fma,f16c                                f16c
src/core/avx2/w4a8_avx2.c                   avx2,fma,f16c                                -
src/core/avx2/rowops_avx2.c                 avx2,fma,f16c                                f16c
src/engines/x86_avx512/avx512_vnni.c        avx512f,avx512bw,avx512vl,avx512_vnni        avx512_vnni
src/engines/x86_avx512/avx512_vnni_gemm.c   avx512f,avx512bw,avx512vl,avx512_vnni        avx512_vnni
src/engines/x86_avx512/avx512_vnni_rows.c   avx512f,avx512bw,avx512vl,avx512_vnni        avx512_vnni
src/engines/x86_avx512/avx512_vnni_small.c  avx512f,avx512bw,avx512vl,avx512_vnni        avx512_vnni
src/engines/x86_avx512/avx512_vnni_attn.c   avx512f,avx512bw,avx512vl,avx512_vnni        avx512_vnni
src/engines/x86_avx512/avx512_bf16.c        avx512f,avx512bw,avx512vl,avx512_bf16        avx512_bf16
src/engines/x86_avx512/avx512_f32.c         avx512f,avx512bw,avx512vl,avx512dq           avx512f
src/engines/x86_avx512/avx512_f32_attn.c    avx512f,avx512bw,avx512vl,avx512dq           avx512f
src/engines/x86_avx512/avx512_bf16_attn.c   avx512f,avx512bw,avx512vl,avx512_bf16        avx512_bf16
src/core/avx512/prepass_avx512.c            avx512f,avx512bw,avx512vl,avx512dq           avx512f
src/core/avx512/attention_avx512.c          avx512f,avx512bw,avx512vl,avx512dq           avx512f
src/core/avx512/input_stage_avx512.c        avx512f,avx512bw,avx512vl,avx512dq           avx512f
src/core/avx512/float_act_avx512.c          avx512f,avx512bw,avx512vl,avx512dq           avx512f
src/core/avx512/float_gemm_avx512.c         avx512f,avx512bw,avx512vl,avx512dq           avx512f
src/core/avx512/w4a8_avx512.c               avx512f,avx512bw,avx512vl,avx512dq           avx512f
src/core/avx512/w4a8_avx512vbmi.c           avx512f,avx512bw,avx512vl,avx512dq,avx512_vbmi avx512_vbmi
src/engines/x86_avx512/avx512_vnni_w4a8.c   avx512f,avx512bw,avx512vl,avx512_vnni        avx512_vnni
src/engines/x86_avx512/avx512_vnni_w4a8_vbmi.c avx512f,avx512bw,avx512vl,avx512_vnni,avx512_vbmi avx512_vbmi
src/engines/x86_amx/amx_int8.c              avx512f,avx512bw,avx512vl,avx512dq,amx_tile,amx_int8 amx_int8
src/engines/x86_amx/amx_ladder.c            avx512f,avx512bw,avx512vl,avx512dq,amx_tile,amx_int8 amx_int8
src/engines/x86_amx/amx_bf16.c              avx512f,avx512bw,avx512vl,avx512dq,amx_tile,amx_bf16 amx_bf16
src/engines/x86_amx/amx_bf16_attn.c         avx512f,avx512bw,avx512vl,avx512dq,amx_tile,amx_bf16 amx_bf16
src/engines/x86_amx/amx_int8_attn.c         avx512f,avx512bw,avx512vl,avx512dq,amx_tile,amx_int8 amx_int8
src/engines/x86_amx/amx_common.c            avx512f,avx512bw,avx512vl,avx512dq,amx_tile  amx_tile
src/engines/x86_amx/amx_emu.c               avx512f,avx512bw,avx512vl,avx512dq,amx_tile  -
src/engines/x86_amx/amx_regime.c            none                                         -
'

flag_of() {
    case $1 in
    avx2) echo -mavx2 ;; fma) echo -mfma ;; f16c) echo -mf16c ;; avx_vnni) echo -mavxvnni ;;
    avx512f) echo -mavx512f ;; avx512bw) echo -mavx512bw ;; avx512vl) echo -mavx512vl ;;
    avx512dq) echo -mavx512dq ;; avx512_vnni) echo -mavx512vnni ;; avx512_bf16) echo -mavx512bf16 ;;
    avx512_vbmi) echo -mavx512vbmi ;;
    none) ;;
    amx_tile) echo -mamx-tile ;; amx_int8) echo -mamx-int8 ;; amx_bf16) echo -mamx-bf16 ;;
    *) echo "?$1" ;;
    esac
}

# the features an object's instructions need, one per line
features_used() {
    objdump -d --no-show-raw-insn "$1" | awk -F'\t' '
    NF >= 3 || (NF == 2 && $2 ~ /^[a-z{]/) {
        ins = $NF; sub(/^ +/, "", ins)
        vex = 0
        if (ins ~ /^\{vex\} /) { vex = 1; sub(/^\{vex\} +/, "", ins) }
        if (ins ~ /^\{evex\} /) sub(/^\{evex\} +/, "", ins)
        split(ins, p, " "); m = p[1]; ops = substr(ins, length(m) + 1)
        evexregs = (ops ~ /%zmm|%k[0-7]|%[xy]mm(1[6-9]|2[0-9]|3[01])/)
        if (m ~ /^tdpb(ss|su|us|uu)d$/) u["amx_int8"] = 1
        else if (m == "tdpbf16ps") u["amx_bf16"] = 1
        else if (m ~ /^(ldtilecfg|sttilecfg|tileloadd|tileloaddt1|tilestored|tilerelease|tilezero)$/) u["amx_tile"] = 1
        if (m ~ /^vpdp(bus|ws)ds?$/) u[vex ? "avx_vnni" : "avx512_vnni"] = 1
        if (m ~ /^(vdpbf16ps|vcvtne2ps2bf16|vcvtneps2bf16)$/ && !vex) u["avx512_bf16"] = 1
        if (m ~ /^(vpermb|vpermi2b|vpermt2b|vpmultishiftqb)$/) u["avx512_vbmi"] = 1
        if (evexregs || m ~ /^k(mov|and|or|xor|xnor|not|test|ortest|shift|add|unpck)/) u["avx512f"] = 1
        if (m ~ /^(vpmullq|vextract[if]64x2|vinsert[if]64x2|vextract[if]32x8|vinsert[if]32x8|vbroadcast[if]32x8|vbroadcast[if]64x2|vbroadcasti32x2|vfpclass[ps][sd]|vrange[ps][sd]|vreduce[ps][sd]|vcvtu?qq2p[sd]|vcvtt?p[sd]2u?qq|vpmovm2[dq]|vpmov[dq]2m|kmovb|kaddb|kaddw|ktestb|ktestw|kandb|kandnb|korb|kxorb|kxnorb|knotb|kshiftlb|kshiftrb|kortestb)$/) u["avx512dq"] = 1
        if (m ~ /^v(and|andn|or|xor)p[sd]$/ && evexregs) u["avx512dq"] = 1
        if (m ~ /^vcvt(ph2ps|ps2ph)$/ && !evexregs) u["f16c"] = 1
        if (m ~ /^vf(n?m(add|sub)|maddsub|msubadd)(132|213|231)[ps][sd]$/ && !evexregs) u["fma"] = 1
    }
    END { for (f in u) print f }'
}

fail=0
checked=0
listed=""
tmpf=$(mktemp)
trap 'rm -f "$tmpf"' EXIT
printf '%s\n' "$table" | while read -r src allowed sig; do
    [ -n "$src" ] || continue
    echo "$src $allowed $sig"
done >"$tmpf"

while read -r src allowed sig; do
    obj=$objdir/$src.o
    listed="$listed $obj"
    if [ ! -f "$obj" ]; then echo "FAIL $src: object $obj not built"; fail=1; continue; fi
    noamx=0
    cmd=""
    if [ -f "$cc_json" ]; then
        # the library's object of this source (the AMX sources are also compiled into the
        # emulated test copies, qmm_amx_emu.dir)
        cmd=$(grep "\"command\": .*qmm_obj\.dir/$src\.o " "$cc_json" | head -1 || true)
        case $cmd in *QMM_NO_AMX_BUILD*) noamx=1 ;; esac
    fi
    if [ $noamx = 1 ]; then allowed=avx512f,avx512bw,avx512vl,avx512dq; sig=-; fi
    want=$(for f in $(echo "$allowed" | tr ',' ' '); do flag_of "$f"; done | sort -u | tr '\n' ' ')
    got="(not recorded) "
    if [ -f "$cc_json" ]; then
        if [ -z "$cmd" ]; then
            echo "FAIL $src: not in compile_commands.json"; fail=1
        else
            # every -m flag but -mtune= (a -march= would enable every ISA for every file: it fails)
            got=$(printf '%s\n' "$cmd" | grep -o ' -m[a-z0-9=_.-]*' | sed 's/^ //' | grep -v '^-mtune=' | sort -u | tr '\n' ' ')
            if [ "$got" != "$want" ]; then
                echo "FAIL $src: compiled with -m flags '$got', its features allow exactly '$want'"; fail=1
            fi
        fi
    fi
    used=$(features_used "$obj" | sort | tr '\n' ' ')
    ok_set=",$allowed,"
    case $ok_set in *,avx512f,*) ok_set="$ok_set,avx2,fma,f16c," ;; esac
    bad=""
    for f in $used; do
        case $ok_set in *,$f,*) ;; *) bad="$bad $f" ;; esac
    done
    if [ -n "$bad" ]; then
        echo "FAIL $src: instructions of$bad, beyond its features ($allowed):"
        objdump -d --no-show-raw-insn "$obj" | grep -E "vpdp|bf16|tdp|tile|zmm|%k[0-7]|vcvtp[sh]2p[sh]|vfn?m" | head -5
        fail=1
    fi
    if [ "$sig" != "-" ]; then
        case " $used " in *" $sig "*) ;; *) echo "FAIL $src: its signature instructions ($sig) were not found: is the detection broken?"; fail=1 ;; esac
    fi
    checked=$((checked + 1))
    echo "ok   $src  flags: $got uses: ${used:-(base x86-64)}"
done <"$tmpf"
[ $checked -gt 0 ] || { echo "FAIL: no object checked"; fail=1; }

# every ISA-specific object is in the table
for obj in "$objdir"/src/engines/x86_*/*.o "$objdir"/src/core/avx2/*.o "$objdir"/src/core/avx512/*.o; do
    [ -f "$obj" ] || continue
    case " $listed " in *" $obj "*) ;; *) echo "FAIL ${obj#$objdir/}: not in check_isa.sh's table (add it with its engine's features)"; fail=1 ;; esac
done
echo "$checked objects checked"
exit $fail
