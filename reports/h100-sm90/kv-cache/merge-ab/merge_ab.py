"""A/B of the merge's column cap (decode_plan.MERGE_COLUMNS), graph-timed, with Flex as the fixed reference."""
import json, sys, os
sys.path.insert(0, ".")
from conformance.backends import activate
activate()
import torch
from conformance.bundled.benchmarks import decode, timing
from conformance.bundled.kernels import decode_plan

CELLS = ["bf16:16:1:1:1024", "bf16:16:1:1:4096", "bf16:16:1:1:16384", "bf16:16:1:8:1024", "bf16:16:1:8:4096",
         "bf16:16:4:8:1024", "bf16:16:1:32:4096", "bf16:16:1:8:16384"]
POLICY = timing.RepetitionPolicy(target_ms=60.0, min_reps=10, max_reps=60, warmup_ms=20.0, rounds=3)
out = open(os.path.join(os.environ["OUT"], "merge_ab.jsonl"), "w")
for text in CELLS:
    dtype, *numbers = text.split(":")
    page, seq_q, batch, context = map(int, numbers)
    cell = decode.Cell(dtype, page, seq_q, batch, context)
    problems = [decode.problem(cell, seed=seed) for seed in range(decode.copies_for(cell))]
    calls = {}
    for columns in (16, 32, 64, 128):
        decode_plan.MERGE_COLUMNS = columns
        decode_plan._plan.cache_clear()
        calls[f"columns{columns}"] = decode._timed_callable([decode._bundled(cell, t, check_values=False) for t in problems], "graph")
    calls["flex"] = decode._timed_callable([decode._flex(cell, t) for t in problems], "graph")
    result = timing.interleaved_medians(calls, POLICY)
    row = {name: cell.cache_bytes / (r[0] / len(problems) / 1e3) / 1e9 for name, r in result.items() if not isinstance(r, BaseException)}
    print(cell.label, " ".join(f"{k} {v:.0f}" for k, v in row.items()), flush=True)
    out.write(json.dumps({"cell": cell.label, **row}) + "\n")
    del problems, calls
    torch.cuda.empty_cache()
