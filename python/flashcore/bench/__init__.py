"""flashcore's benchmark: `python -m flashcore.bench --help`.

Modules, one job each:
  suites     shape lists of the seeds / fa3 / decode suites, FLOP and byte counts
  timing     CUDA-event and CUDA-graph timers, input rotation, machine ceilings
  backends   the contenders (flashcore; on decode also flashcore-kv / flashcore-paged,
             its KV-cache entry point; SDPA flash / cuDNN / efficient)
  reference  float64 correctness gate run before timing
  runner     shape-by-shape loop: every contender checked, then timed in interleaved rounds
  report     result rows, terminal tables, CSV, summary.md
  plot       one PNG per suite
  cpu_demo   what runs when there is no GPU
  env        device / software description, output directory

Importing this package imports neither torch nor the compiled extension, so
the pure-Python parts stay testable on machines without either.
"""
