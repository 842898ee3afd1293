"""python -m qmm [--json] — what the installed qmm sees: version, library, CPU, and for every
engine whether it runs here and why not (qmm.info())."""
import json
import sys

import qmm


def main(argv):
    i = qmm.info()
    if "--json" in argv:
        print(json.dumps(i, indent=1))
        return 0
    print("qmm %s (%s)" % (i["version"], i["library"]))
    print("cpu: %s; features: %s" % (i["cpu"], " ".join(i["features"])))
    for name, e in i["engines"].items():
        print("  %-12s %-6s %s" % (name, "int8" if e["int8"] else "", "available" if e["available"]
                                   else "unavailable: " + e["why"]))
    print("threads: %d; attention: %s" % (
        i["threads"], "yes" if qmm.has_attention() else "no (library lacks qmm_attention)"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
