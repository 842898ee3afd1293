"""qmm.bench — the Python benchmarks, each run as a module on the CPU that will run the model:

  python -m qmm.bench.kitchen     one video-DiT block (qmm.dit) end to end: BF16/FP32 torch,
                                  comfy-kitchen eager INT8, and qmm as the kitchen's backend
  python -m qmm.bench.attention   attention alone: qmm (each engine and mode) against torch's SDPA
  python -m qmm.bench.overhead    what one small INT8 linear call costs from Python

Each module's docstring has its options; the measurements are logged in bench/NOTES.md. Importing
qmm.bench imports nothing else.
"""
