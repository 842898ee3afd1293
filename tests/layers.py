#!/usr/bin/env python3
"""layers.py [--selftest] [ROOT] — every #include "..." of the code points down the layers.

The rooms of the tree, bottom to top (LAYERS below is the one place this order is written):

    base < core < engines < dispatch < api < io = tp < tools

A file may include headers of its own room or of a lower one; include/ (the public API) is open
to every room. Three rules more: rooms on one level (io, tp) never include each other; files in
different folders of src/engines/ (ref, x86_avx2, ...) never include each other; tools/ and
bench/ (one room: the CLI and its benchmarks) include only include/ and their own headers.

Each #include "name" is resolved as the compiler does: the includer's folder first, then the
include directories of CMakeLists.txt (INCLUDE_DIRS). An include that names no file of the tree
fails too, so that a typo cannot hide an upward include. Exit 0 when every include points down,
1 with one line per violation (file:line, the header, both rooms). --selftest checks the checker:
planted upward and sideways includes, in a small tree and in a copy of ROOT, must fail.
"""
import os
import re
import shutil
import sys
import tempfile

# The layers, bottom to top; rooms in one entry share a level (and may not include each other).
LAYERS = [["base"], ["core"], ["engines"], ["dispatch"], ["api"], ["io", "tp"], ["tools"]]
ROOM_DIRS = {
    "base": ["src/base"],
    "core": ["src/core"],
    "engines": ["src/engines"],
    "dispatch": ["src/dispatch"],
    "api": ["src/api"],
    "io": ["src/io"],
    "tp": ["src/tp"],
    "tools": ["tools", "bench"],
}
PUBLIC = "include"                      # the installed headers: every room may include them
SEES_ONLY_ITS_OWN = {"tools"}           # rooms that see nothing of src/
SCANNED = ["src", "tools", "bench"]     # the code whose includes are checked
# the quoted-include search path after the includer's folder (CMakeLists.txt: qmm_obj, qmm)
INCLUDE_DIRS = ["include", "src/base", "src/core", "src/dispatch", "src/api", "src/io", "src/tp", "tools", "bench"]

LEVEL = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
SOURCE_EXT = (".c", ".h")


def room_of(rel):
    """(room, engine folder or None) of a path relative to the root; (None, None) outside."""
    parts = rel.split("/")
    if parts[0] == PUBLIC:
        return PUBLIC, None
    for room, dirs in ROOM_DIRS.items():
        for d in dirs:
            if rel.startswith(d + "/"):
                sub = parts[2] if room == "engines" and len(parts) > 3 else None
                return room, sub
    return None, None


def resolve(root, includer_rel, name):
    """The path (relative to root) of the file #include "name" in includer_rel reads, or None."""
    for d in [os.path.dirname(includer_rel)] + INCLUDE_DIRS:
        p = os.path.normpath(os.path.join(root, d, name))
        if os.path.isfile(p):
            return os.path.relpath(p, root).replace(os.sep, "/")
    return None


def verdict(src_rel, hdr_rel):
    """None if src_rel may include hdr_rel, else why not."""
    sroom, ssub = room_of(src_rel)
    hroom, hsub = room_of(hdr_rel)
    if hroom is None:
        return "a file in no room of the layers"
    if hroom == PUBLIC:
        return None
    if sroom in SEES_ONLY_ITS_OWN and hroom != sroom:
        return "%s sees only %s/ and its own headers" % (sroom, PUBLIC)
    if LEVEL[hroom] > LEVEL[sroom]:
        return "a higher layer"
    if LEVEL[hroom] == LEVEL[sroom] and hroom != sroom:
        return "a room beside it (one level)"
    if sroom == "engines" and hroom == "engines" and ssub != hsub:
        return "engines/%s includes engines/%s: engine folders never include each other" % (ssub, hsub)
    return None


def check(root):
    """Every violation under root, as printable lines."""
    problems = []
    for top in SCANNED:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for fn in sorted(filenames):
                if not fn.endswith(SOURCE_EXT):
                    continue
                src_rel = os.path.relpath(os.path.join(dirpath, fn), root).replace(os.sep, "/")
                sroom, _ = room_of(src_rel)
                with open(os.path.join(root, src_rel), encoding="utf-8", errors="replace") as f:
                    lines = f.readlines()
                for lineno, line in enumerate(lines, 1):
                    m = INCLUDE_RE.match(line)
                    if not m:
                        continue
                    name = m.group(1)
                    if sroom is None:
                        problems.append('%s:%d: #include "%s": %s is in no room of the layers (add it to '
                                        'tests/layers.py)' % (src_rel, lineno, name, src_rel))
                        continue
                    hdr_rel = resolve(root, src_rel, name)
                    if hdr_rel is None:
                        problems.append('%s:%d: #include "%s" names no file of the tree (room %s)'
                                        % (src_rel, lineno, name, sroom))
                        continue
                    why = verdict(src_rel, hdr_rel)
                    if why:
                        hroom, _ = room_of(hdr_rel)
                        problems.append('%s:%d: #include "%s" (%s): room %s includes room %s, %s'
                                        % (src_rel, lineno, name, hdr_rel, sroom, hroom, why))
    return problems


def selftest(root):
    """The checker must fail on planted violations; returns the list of what it missed."""
    missed = []

    def write(base, rel, text):
        p = os.path.join(base, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)

    def expect(base, what, must_contain):
        out = check(base)
        if not any(all(s in line for s in must_contain) for line in out):
            missed.append("%s: not reported (got: %s)" % (what, out or "no violation"))

    tmp = tempfile.mkdtemp(prefix="qmm_layers_")
    try:
        # a tiny tree, clean
        t = os.path.join(tmp, "tiny")
        write(t, "include/qmm.h", "")
        write(t, "src/base/qmm_internal.h", '#include "qmm.h"\n')
        write(t, "src/core/numerics.h", '#include "qmm_internal.h"\n')
        write(t, "src/core/numerics.c", '#include "numerics.h"\n')
        write(t, "src/engines/x86_avx2/a.c", '#include "numerics.h"\n#include "a.h"\n')
        write(t, "src/engines/x86_avx2/a.h", "")
        write(t, "src/engines/x86_avx512/b.h", "")
        write(t, "src/dispatch/dispatch.h", '#include "qmm_internal.h"\n')
        write(t, "src/api/linear.c", '#include "dispatch.h"\n#include "numerics.h"\n')
        write(t, "src/io/io.c", '#include "qmm_internal.h"\n')
        write(t, "src/tp/tp.h", "")
        write(t, "tools/main.c", '#include "qmm.h"\n#include "peak.h"\n')
        write(t, "bench/peak.h", '#include "qmm.h"\n')
        if check(t):
            missed.append("the clean tiny tree fails: %s" % check(t))
        plants = [
            ("src/core/numerics.c", '#include "dispatch.h"\n', "a core file including a dispatch header",
             ["src/core/numerics.c:2:", "dispatch.h", "room core includes room dispatch", "higher layer"]),
            ("src/base/qmm_internal.h", '#include "numerics.h"\n', "a base header including a core header",
             ["src/base/qmm_internal.h:2:", "room base includes room core"]),
            ("src/engines/x86_avx2/a.c", '#include "../x86_avx512/b.h"\n', "an ISA folder including another",
             ["src/engines/x86_avx2/a.c:3:", "room engines includes room engines", "engines/x86_avx2 includes engines/x86_avx512"]),
            ("src/io/io.c", '#include "../tp/tp.h"\n', "io including tp (one level)",
             ["src/io/io.c:2:", "room io includes room tp", "beside"]),
            ("tools/main.c", '#include "qmm_internal.h"\n', "tools including a library header",
             ["tools/main.c:3:", "room tools includes room base"]),
            ("src/core/numerics.c", '#include "no_such.h"\n', "an include of no file",
             ["src/core/numerics.c:2:", "names no file"]),
        ]
        for rel, line, what, must in plants:
            p = os.path.join(t, rel)
            with open(p) as f:
                before = f.read()
            with open(p, "a") as f:
                f.write(line)
            expect(t, what, must)
            with open(p, "w") as f:
                f.write(before)
        # a copy of the real tree with a core file including the plan's header
        c = os.path.join(tmp, "copy")
        for top in SCANNED + [PUBLIC]:
            if os.path.isdir(os.path.join(root, top)):
                shutil.copytree(os.path.join(root, top), os.path.join(c, top))
        victim = "src/core/numerics.c"
        if not os.path.isfile(os.path.join(c, victim)) or not os.path.isfile(os.path.join(c, "src/dispatch/dispatch.h")):
            missed.append("the copy of %s has no %s or src/dispatch/dispatch.h to plant into" % (root, victim))
        else:
            with open(os.path.join(c, victim)) as f:
                n = len(f.readlines())
            with open(os.path.join(c, victim), "a") as f:
                f.write('#include "dispatch.h"\n')
            expect(c, "the copy of the tree with %s including dispatch.h" % victim,
                   ["%s:%d:" % (victim, n + 1), "src/dispatch/dispatch.h", "room core includes room dispatch"])
    finally:
        shutil.rmtree(tmp)
    return missed


def main(argv):
    args = [a for a in argv[1:] if a != "--selftest"]
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), ".."))
    if "--selftest" in argv[1:]:
        missed = selftest(root)
        for m in missed:
            print("FAIL selftest: " + m)
        if missed:
            return 1
        print("layers.py fails on every planted upward or sideways include")
        return 0
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print("%d include(s) point up or sideways; the layers, bottom to top: %s"
              % (len(problems), " < ".join(" = ".join(l) for l in LAYERS)))
        return 1
    print("every include points down: %s" % " < ".join(" = ".join(l) for l in LAYERS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
