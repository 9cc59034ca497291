"""Run benchmarks/variants_benchmark.py with the Hopper `bwd_dq.window` table serving bands up
to WIDEST keys a row (argv[1]); the forward's window table keeps its bound.
usage: dq_band.py WIDEST -- variants_benchmark args"""
import dataclasses, runpy, sys
from conformance.bundled.kernels import tables_nvidia

split = sys.argv.index("--")
widest = int(sys.argv[1])
tables = tables_nvidia.HOPPER_LAUNCH
tables["bwd_dq.window"] = dataclasses.replace(tables["bwd_dq.window"], widest_band=widest)
print("bwd_dq.window widest_band:", tables["bwd_dq.window"].widest_band,
      "fwd.window:", tables["fwd.window"].widest_band, flush=True)
sys.argv = ["benchmarks/variants_benchmark.py", *sys.argv[split + 1:]]
runpy.run_path("benchmarks/variants_benchmark.py", run_name="__main__")
