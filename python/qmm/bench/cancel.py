"""python -m qmm.bench.cancel — how fast qmm.cancel() stops a long qmm.attention (SPEC §12):
q, k, v [1, 1, S, D] f32 (one head of S tokens, what ComfyUI hands its attention on a CPU), mode
int8 by default, on --threads workers. It runs the call once whole (the reference bits, and its
time T), then --rounds times: the call on a second thread, qmm.cancel() from this one at a
random moment of [0.1 T, 0.6 T] (seeded: --seed), the time from the request to the moment the
call raised qmm.Cancelled, and the next call, compared bit for bit with the reference.

    python -m qmm.bench.cancel --tokens 79567 --threads 2      # the issue's case (minutes: the
                                                               # reference and each next call
                                                               # run whole)
    python -m qmm.bench.cancel --tokens 8192 --rounds 5
Prints one line per round and the worst latency; exit status 1 if a call was not cancelled or a
next call differs. Not a test: no latency threshold.
"""
import argparse
import random
import sys
import threading
import time


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m qmm.bench.cancel", description=__doc__.split("\n")[0])
    p.add_argument("--tokens", type=int, default=8192, help="S = Skv (default 8192)")
    p.add_argument("--dim", type=int, default=128, help="D (default 128)")
    p.add_argument("--mode", default="int8", choices=("best", "f32", "int8"))
    p.add_argument("--threads", type=int, default=0, help="qmm workers (0: torch's)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    import torch

    import qmm
    if a.threads:
        qmm.configure(n_threads=a.threads)
    g = torch.Generator().manual_seed(a.seed)
    q, k, v = [torch.randn(1, 1, a.tokens, a.dim, generator=g) for _ in range(3)]

    def call():
        return qmm.attention(q, k, v, mode=a.mode)
    qmm.attention(q[:, :, :64], k[:, :, :64], v[:, :, :64], mode=a.mode)   # warm-up: imports, context
    qmm.reset_counters()
    t0 = time.monotonic()
    want = call()
    t_call = time.monotonic() - t0
    c = qmm.counters()["attention"]
    print("qmm.attention [1, 1, %d, %d] f32, mode %s, %d threads, on %s%s: %.2f s whole"
          % (a.tokens, a.dim, a.mode, qmm.threads(), ", ".join(c["calls"]),
             " (a fallback)" if c["fallbacks"] else "", t_call), flush=True)
    rng = random.Random(a.seed)
    worst, bad = 0.0, 0
    for i in range(a.rounds):
        res = {}

        def run():
            try:
                call()
                res["error"] = None
            except qmm.Cancelled as e:
                res["error"] = e
            res["t"] = time.monotonic()
        th = threading.Thread(target=run)
        th.start()
        delay = t_call * rng.uniform(0.1, 0.6)
        time.sleep(delay)
        t0 = time.monotonic()
        qmm.cancel()
        th.join()
        ms = (res["t"] - t0) * 1e3
        cancelled = isinstance(res["error"], qmm.Cancelled)
        t1 = time.monotonic()
        same = torch.equal(call(), want)
        bad += (not cancelled) + (not same)
        worst = max(worst, ms) if cancelled else worst
        print("round %d: cancel at %.2f s: %s %.2f ms after the request; the next call (%.2f s) %s"
              % (i, delay, "Cancelled" if cancelled else "NOT cancelled", ms, time.monotonic() - t1,
                 "bit-identical" if same else "DIFFERS"), flush=True)
    print("worst cancel latency %.2f ms over %d rounds" % (worst, a.rounds))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
