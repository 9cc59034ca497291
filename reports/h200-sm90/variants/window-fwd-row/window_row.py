"""Run benchmarks/variants_benchmark.py with a `fwd.window` table injected into the Hopper
tables: usage window_row.py TUNE_JSONL [TUNE_JSONL...] -- variants_benchmark args.
The row per head dim is the sweep's best (TFLOP/s); D 256 keeps the dense row."""
import json, runpy, sys
from conformance.bundled.kernels import tables_nvidia
from conformance.bundled.kernels.launch_tables import LaunchConfig, table

split = sys.argv.index("--")
best = {}
for path in sys.argv[1:split]:
    for line in map(json.loads, open(path)):
        if line.get("tflops") and line["tflops"] > best.get(line["head_dim"], {}).get("tflops", 0):
            best[line["head_dim"]] = line
rows = [(d, LaunchConfig(b["block_m"], b["block_n"], num_warps=b["num_warps"], num_stages=b["num_stages"],
                         descriptors=bool(b.get("descriptors")))) for d, b in sorted(best.items())]
print("fwd.window rows:", rows, flush=True)
tables_nvidia.HOPPER_LAUNCH["fwd.window"] = table(*rows, tables_nvidia._HOPPER_FORWARD.rows[-1])
sys.argv = ["benchmarks/variants_benchmark.py", *sys.argv[split + 1:]]
runpy.run_path("benchmarks/variants_benchmark.py", run_name="__main__")
