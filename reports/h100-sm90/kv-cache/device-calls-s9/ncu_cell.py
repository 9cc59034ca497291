"""One decode cell's call, for ncu: python devrun/ncu_cell.py IMPL CELL (IMPL: bundled_unchecked, bundled_contiguous, flex)."""
import sys
sys.path.insert(0, ".")
sys.path.insert(0, "benchmarks")
from conformance.backends import activate
activate()
import torch
from conformance.bundled.benchmarks import decode
import decode_probe

impl, text = sys.argv[1], sys.argv[2]
cell = decode_probe.parse_cell(text)
tensors = decode.problem(cell, seed=0)
call = decode._BUILDERS[impl](cell, tensors)
for _ in range(4):
    call()
torch.cuda.synchronize()
print("done", impl, cell.label)
