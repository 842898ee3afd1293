"""bench/attention_rss.py — the memory qmm.attention takes beyond its tensors (issue 48, item 4):
q, k, v [1, H, S, 128] f32 and out are allocated and touched first; then one call; the process's
peak RSS (getrusage ru_maxrss) before and after the call gives what the call added at its peak —
the library's scratch (per thread: the packed kv head, O(Skv · D), and a tile's rows) and any copy
the Python layer makes — printed beside the tensors' bytes (inputs + output) and as a % of them.
One shape per process (ru_maxrss never goes down):

    python3 bench/attention_rss.py --heads 1 --seq 79567 --mode int8
    python3 bench/attention_rss.py --heads 56 --seq 16384 --mode int8 --json

Not a test: no thresholds. The engine that ran is printed (mode int8 falls back to a float engine,
counted, where the CPU has no int8 engine: its packed head is f32, 4x mode int8's).
"""
import argparse
import json
import resource
import sys
import time


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--heads", type=int, default=1)
    ap.add_argument("--seq", type=int, default=79567)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--mode", default="int8")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    import torch

    import qmm
    if a.threads:
        torch.set_num_threads(a.threads)
    qmm.configure(n_threads=torch.get_num_threads())
    g = torch.Generator().manual_seed(0)
    shape = (1, a.heads, a.seq, a.dim)
    q, k, v = (torch.randn(shape, generator=g) for _ in range(3))
    out = torch.zeros(shape)
    plan = qmm.attention_plan(q, k, v, mode=a.mode)
    qmm.attention(q[:, :1, :64], k[:, :1, :64], v[:, :1, :64], mode=a.mode)  # the library's first-call set-up
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.perf_counter()
    qmm.attention(q, k, v, mode=a.mode, out=out)
    t = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    tensors = 4 * q.numel() * 4
    r = {"heads": a.heads, "S": a.seq, "D": a.dim, "mode": a.mode, "engine": plan.engine,
         "threads": torch.get_num_threads(), "tensors_mb": tensors / 2**20,
         "peak_before_mb": before / 2**20, "peak_after_mb": after / 2**20,
         "added_mb": (after - before) / 2**20, "added_pct": 100.0 * (after - before) / tensors,
         "seconds": t}
    if a.json:
        print(json.dumps(r))
    else:
        print("1 x %d heads x %d tokens x D %d, mode %s on %s, %d threads: q, k, v, out %.0f MiB; "
              "the call added %.1f MiB at its peak (%.1f %% of the tensors), %.1f s" % (
                  a.heads, a.seq, a.dim, a.mode, r["engine"], r["threads"], r["tensors_mb"],
                  r["added_mb"], r["added_pct"], t))
    return 0


if __name__ == "__main__":
    sys.exit(main())
