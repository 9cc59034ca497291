"""Registers, spills and shared memory of a compiled kernel, read from its binary
without a GPU.

NVIDIA: `cuobjdump -res-usage` on the cubin (the tool ships in triton's NVIDIA
backend): REG is registers per thread, LOCAL the local memory per thread in bytes,
which is where ptxas spills (what triton itself reports as n_spills on a GPU).
AMD: the code object's metadata in the amdgcn assembly: .vgpr_count (+ .agpr_count,
the accumulation registers of CDNA) per work-item, .private_segment_fixed_size the
scratch bytes per work-item (spills), and .vgpr_spill_count / .sgpr_spill_count how many
vector and scalar registers were spilled.  The two kinds cost differently: scalar
registers spill first into lanes of a vector register (no memory traffic) and reach
scratch only in small amounts, vector registers spill to scratch per work-item, inside
the loops.  Shared memory is triton's own figure
(metadata.shared), the amount a launch requests and triton checks against the device.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path


def _cuobjdump() -> str | None:
    import triton

    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return str(bundled) if bundled.exists() else shutil.which("cuobjdump")


def _cuda_usage(cubin: bytes) -> dict:
    tool = _cuobjdump()
    if tool is None:
        return {"measure_note": "no cuobjdump: registers and spills unknown"}
    with tempfile.NamedTemporaryFile(suffix=".cubin") as handle:
        handle.write(cubin)
        handle.flush()
        result = subprocess.run([tool, "-res-usage", handle.name], capture_output=True, text=True)
    registers, local = re.search(r"REG:(\d+)", result.stdout), re.search(r"LOCAL:(\d+)", result.stdout)
    if result.returncode != 0 or registers is None or local is None:
        message = (result.stderr or result.stdout).strip().splitlines()
        return {"measure_note": f"cuobjdump could not read the cubin: {message[-1] if message else '?'}"}
    return {"registers": int(registers.group(1)), "spills_bytes": int(local.group(1))}


def _amd_field(assembly: str, name: str) -> int | None:
    found = re.search(rf"^\s*\.{name}:\s+(\d+)\s*$", assembly, re.MULTILINE)
    return int(found.group(1)) if found else None


def _hip_usage(assembly: str) -> dict:
    vgprs = _amd_field(assembly, "vgpr_count")
    if vgprs is None:
        return {"measure_note": "no .vgpr_count in the code object metadata"}
    spilled = {kind: _amd_field(assembly, f"{kind}_spill_count") for kind in ("vgpr", "sgpr")}
    return {"registers": vgprs + (_amd_field(assembly, "agpr_count") or 0),
            "spills_bytes": _amd_field(assembly, "private_segment_fixed_size"),
            **({"spilled_registers": spilled} if None not in spilled.values() else {})}


def usage(compiled, backend: str) -> dict:
    """registers, spills_bytes, shared_bytes (and measure_note where one is unknown);
    on AMD also spilled_registers: {"vgpr": n, "sgpr": n}."""
    facts = {"registers": None, "spills_bytes": None, "shared_bytes": compiled.metadata.shared}
    if backend == "cuda" and "cubin" in compiled.asm:
        facts.update(_cuda_usage(compiled.asm["cubin"]))
    elif backend == "hip" and "amdgcn" in compiled.asm:
        facts.update(_hip_usage(compiled.asm["amdgcn"]))
    return facts
