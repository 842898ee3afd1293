"""qmm.bench — the Python benchmarks, each run as a module on the CPU that will run the model:

  python -m qmm.bench.kitchen     one video-DiT block (qmm.dit) end to end: BF16/FP32 torch,
                                  comfy-kitchen eager INT8, and qmm as the kitchen's backend
  python -m qmm.bench.attention   attention alone: qmm (each engine and mode) against torch's SDPA
  python -m qmm.bench.overhead    what one small INT8 linear call costs from Python
  python -m qmm.bench.w4a8        a W4A8 layer against the INT8 layer of its shape, both through
                                  the kitchen on backend qmm

Each module's docstring has its options; the measurements are logged in bench/NOTES.md. Importing
qmm.bench imports nothing else.
"""


def kitchen_backend(threads):
    """torch's (and so qmm's) threads set to `threads` where given, then qmm registered as the
    kitchen's backend: True, or False after printing why the backend is unavailable."""
    import torch
    import qmm.kitchen as kitchen

    if threads:
        torch.set_num_threads(threads)
    if not kitchen.register():
        print("backend qmm unavailable: %s" % kitchen.unavailable_reason())
        return False
    return True
