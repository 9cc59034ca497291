"""One compile-only worker process: `python -m conformance.compile_only.worker`.

Reads a job (target key, calls, ids to skip, triton cache dir) as JSON on stdin,
makes the target's profile active with tensors standing in on the CPU, points
triton at a driver that only answers "which target" (there is no GPU), routes every
kernel launch of the real operators to `JITFunction.warmup` (compile, never run)
and writes one JSON event per line on stdout:

    {"event": "start", "id": ..., ...}         before each compile: what it compiles
    {"event": "result", "id": ..., ...}        the same, with its measurements or its error
    {"event": "note", "text": ...}             something the whole run should say
    {"event": "skipped", "call": ..., "reason": ...}  a call raised before it compiled (an error line)
    {"event": "compiler", "refused": {dtype: reason}}  the answer to a probe job

A probe job (`"probe": [dtypes]`, no calls) only asks whether the installed triton
compiles a dot of each dtype for the target (probe_kernel.py; the first refused: the
target itself, the others not asked).  A compiler that aborts the process leaves a
"start" without a "result": the parent records that id as an error and starts a new
worker that skips it.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from dataclasses import replace
from pathlib import Path

# Names of the bundled kernels in results ids (the launch-table names of their roles).
KERNEL_NAMES = {
    "flash_forward_kernel": "fwd",
    "delta_kernel": "bwd_preprocess",
    "dkdv_kernel": "bwd_dkdv",
    "dq_kernel": "bwd_dq",
    "total_attention_kernel": "total",
    "piecewise_forward_kernel": "piecewise_fwd",
    "piecewise_dkdv_kernel": "piecewise_bwd_dkdv",
    "piecewise_dq_kernel": "piecewise_bwd_dq",
    "append_kernel": "decode_append",
    "decode_split_kernel": "decode_split",
    "decode_merge_kernel": "decode_merge",
}
# Launch keywords that are not part of a configuration: the head-dim tile is the
# `head_dim` field, STAGES repeats num_stages, first_batch_head and INTERPRETED are the same
# for every GPU launch, and a packed batch's delta pre-pass takes its run-time arguments
# CU_SEQLENS_Q and total_q by keyword.
# Keyword arguments that are not part of a launch's configuration: derived from the call (the
# head-dim tile, the stage count repeated as num_stages), or tensors passed by keyword (a packed
# batch's offsets and tile list, kernels.packed_tiles), which the configuration's JSON cannot hold.
_NOT_CONFIG = ("BLOCK_D", "INTERPRETED", "STAGES", "first_batch_head", "CU_SEQLENS_Q", "total_q", "TILES")


def emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


class CompileOnlyDriver:
    """The part of triton's driver interface a compile needs: the target."""

    def __init__(self, target):
        self.target = target

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0


def launch_config(kwargs: dict) -> dict:
    """Tile sizes, compiler options, then the remaining constexpr flags of a launch."""
    kept = {key: value for key, value in kwargs.items() if key not in _NOT_CONFIG}
    tiles = {key: value for key, value in kept.items() if key.startswith("BLOCK_")}
    options = {key: value for key, value in kept.items() if key.islower()}
    return {**tiles, **options, **{key: value for key, value in kept.items() if key not in tiles and key not in options}}


def compile_id(kernel: str, target: str, dtype: str, head_dim: int, config: dict, swept: str | None = None,
               tiles: bool = False) -> str:
    """`compile.KERNEL[target,dtype,dD,flags]`, with `cfg=...` when the launch is a sweep's
    configuration (`swept`) rather than the launch table's, and with `tiles=MxNxWwSs` where
    `tiles` asks (a second table row for the same flags, e.g. the KV-cache split kernel's
    filled_paged row beside its general one)."""
    flags = [key.lower() for key, value in config.items() if key.isupper() and value is True]
    tags = [*([f"tiles={tile_text(config)}"] if tiles else []), *([f"cfg={swept}"] if swept else [])]
    return f"compile.{kernel}[{','.join([target, dtype, f'd{head_dim}', *flags, *tags])}]"


def tile_text(config: dict) -> str:
    """A launch's tiles and compiler options, e.g. 16x64x4w3s (BLOCK_M x BLOCK_N, warps, stages)."""
    return f"{config.get('BLOCK_M')}x{config.get('BLOCK_N')}x{config.get('num_warps')}w{config.get('num_stages')}s"


class Compiler:
    """The launcher: compiles each launch once, measures it, reports it."""

    def __init__(self, target_key: str, backend: str, skip: set[str]):
        self.target_key, self.backend, self.skip = target_key, backend, set(skip)
        self.dtype = None
        self.config = None  # the call's kernel:configuration (sweep scope)
        self.first_configs: dict[str, dict] = {}  # compile id -> the first launch's configuration under it

    def __call__(self, kernel, grid, *args, **kwargs):
        from conformance.compile_only.resources import usage

        name = KERNEL_NAMES.get(kernel.__name__, kernel.__name__)
        config = launch_config(kwargs)
        # The (padded) head dim a launch covers: BLOCK_D, or for the KV-cache merge, which cuts
        # it into DIM_CHUNKS programs of BLOCK_D columns each, their product -- so that its
        # launches at D 128 and 256 keep ids of their own rather than repeat D 64's.
        head_dim = kwargs["BLOCK_D"] * kwargs.get("DIM_CHUNKS", 1)
        swept_kernel, _, swept = (self.config or "").partition(":")
        swept = swept if swept_kernel == name else None
        case_id = compile_id(name, self.target_key, self.dtype, head_dim, config, swept)
        if self.first_configs.setdefault(case_id, config) != config:  # another table row, the same flags
            case_id = compile_id(name, self.target_key, self.dtype, head_dim, config, swept, tiles=True)
        if case_id in self.skip:
            return
        self.skip.add(case_id)
        described = {"id": case_id, "kernel": name, "dtype": self.dtype, "head_dim": head_dim, "config": config}
        emit({"event": "start", **described})
        result = {"event": "result", **described}
        started = time.perf_counter()
        try:
            compiled = kernel.warmup(*args, grid=grid, **kwargs)
            result["compile_s"] = round(time.perf_counter() - started, 3)
            result.update(usage(compiled, self.backend))
        except Exception as exc:  # the compiler's error is the finding
            from conformance.judging.verdicts import error_fields

            result["compile_s"] = round(time.perf_counter() - started, 3)
            result["error"] = error_fields(exc)
        emit(result)


def _tensors(roles: str, call: dict, torch_dtype) -> list:
    """Random CPU tensors for the operator's inputs: q-like (B=1, H=2, S=64) or k-like
    (one kv head: the GQA loop is compiled too)."""
    import torch

    shapes = {"q": (1, 2, 64, call["head_dim"]), "k": (1, 1, 64, call["head_dim"])}
    return [torch.randn(shapes[role]).to(torch_dtype).requires_grad_(call["backward"]) for role in roles]


def run_call(call: dict) -> None:
    """The operator call; its launches go to the Compiler (outputs are never read)."""
    import torch

    from conformance.bundled import kernels
    from conformance.bundled.kernels.validation import DTYPE_NAMES

    torch_dtype = {name: dtype for dtype, name in DTYPE_NAMES.items()}[call["dtype"]]
    if call["op"] == "kv_cache_attention":
        _kv_cache_call(call, torch_dtype)
        return
    if call.get("variant") or call["op"] == "flash_attention_varlen":
        out = _variant_call(call, torch_dtype)
    elif call["op"] == "flash_attention":
        q, k, v = _tensors("qkk", call, torch_dtype)
        out, _total = kernels.flash_attention(q, k, v, causal=call["causal"], return_total_attention=True,
                                              dropout_p=0.25 if call["dropout"] else 0.0, dropout_seed=1)
    else:
        q1, k1, q2, k2, v = _tensors("qkqkk", call, torch_dtype)
        out = kernels.piecewise_attention(q1, k1, q2, k2, v, 16, causal=call["causal"])
    if call["backward"]:
        out.backward(torch.ones_like(out))


def _variant_options(variant: str | None) -> dict:
    """The operator's keyword arguments for variants such as "window+softcap+alibi" (two heads)."""
    import torch

    chosen = set(variant.split("+")) if variant else set()
    return {**({"window_size": (16, 0)} if "window" in chosen else {}),
            **({"softcap": 30.0} if "softcap" in chosen else {}),
            **({"alibi_slopes": torch.tensor([0.5, 0.25])} if "alibi" in chosen else {})}


def _variant_call(call: dict, torch_dtype):
    """flash_attention (dense) or flash_attention_varlen (two sequences of 40 and 24 tokens
    packed) with the call's attention variants."""
    import torch

    from conformance.bundled import kernels

    options = _variant_options(call.get("variant"))
    if call["op"] == "flash_attention":
        q, k, v = _tensors("qkk", call, torch_dtype)
        return kernels.flash_attention(q, k, v, causal=call["causal"], **options)
    q, k, v = (t[0].transpose(0, 1) for t in _tensors("qkk", call, torch_dtype))  # (64 tokens, heads, D)
    q, k, v = (t.detach().contiguous().requires_grad_(call["backward"]) for t in (q, k, v))
    cu_seqlens = torch.tensor([0, 40, 64], dtype=torch.int32)
    return kernels.flash_attention_varlen(q, k, v, cu_seqlens, cu_seqlens, 40, 40, causal=call["causal"], **options)


def _kv_cache_call(call: dict, cache_dtype) -> None:
    """kv_cache_attention on a paged cache (pages of 16, a 40-key context, 4 new tokens
    appended, two query heads per kv head, two splits): the append, split and merge kernels;
    then the same cache in one split, whose split kernel writes the output itself (ONE_SPLIT),
    for one sequence and for a batch of them that fills the stand-in processors (the launch
    tables' filled_paged row, kernels.decode_plan).  An 8-bit cache is read by fp16 queries
    with per-tensor descales."""
    import torch

    from conformance.bundled import kernels
    from conformance.bundled.kernels import decode_plan

    eight_bit = cache_dtype.itemsize == 1
    query_dtype = torch.float16 if eight_bit else cache_dtype
    dim = call["head_dim"]
    q = torch.randn(1, 4, 2, dim).to(query_dtype)
    k_cache, v_cache = (torch.randn(4, 16, 1, dim).to(cache_dtype) for _ in range(2))
    k_new, v_new = (torch.randn(1, 4, 1, dim).to(cache_dtype) for _ in range(2))
    descales = dict(k_descale=0.5, v_descale=0.5) if eight_bit else {}
    table = torch.tensor([[2, 0, 3, 1]], dtype=torch.int32)
    kernels.kv_cache_attention(q, k_cache, v_cache, torch.tensor([36], dtype=torch.int32), block_table=table,
                               k_new=k_new, v_new=v_new, causal=call["causal"], num_splits=2, **descales)
    kernels.kv_cache_attention(q, k_cache, v_cache, torch.tensor([40], dtype=torch.int32), block_table=table,
                               causal=call["causal"], num_splits=1, **descales)
    filled = decode_plan.FILLED_PROGRAMS_PER_PROCESSOR * decode_plan.STAND_IN_PROCESSORS  # one program a sequence
    kernels.kv_cache_attention(q.expand(filled, -1, -1, -1), k_cache, v_cache,
                               torch.full((filled,), 40, dtype=torch.int32), block_table=table.expand(filled, -1),
                               causal=call["causal"], num_splits=1, **descales)


# triton 3.2 links AMD code objects with ROCm's ld.lld (later releases link in-process).
# A compile-only check reads the assembly and never loads the code object, so where
# no ld.lld is installed a stand-in that copies the assembled object is enough.
_LLD_STANDIN = """#!/bin/sh
# Stand-in for ROCm's ld.lld in compile-only checks: copies the object, links nothing.
[ "$1" = "--version" ] && { echo "ld.lld stand-in (FA Conformance compile-only)"; exit 0; }
while [ $# -gt 0 ]; do case "$1" in -o) out="$2"; shift;; -*) ;; *) in="$1";; esac; shift; done
cp "$in" "$out"
"""


def provide_hip_linker(directory: str) -> None:
    """Point triton at the ld.lld stand-in if it wants ROCm's linker and finds none."""
    from triton.backends.amd.compiler import HIPBackend

    find_linker = getattr(HIPBackend, "path_to_rocm_lld", None)
    try:
        if find_linker is not None:
            find_linker()
        return
    except Exception:
        pass
    standin = Path(directory) / "ld.lld-standin"
    standin.write_text(_LLD_STANDIN)
    standin.chmod(standin.stat().st_mode | stat.S_IEXEC)
    os.environ["TRITON_HIP_LLD_PATH"] = str(standin)
    emit({"event": "note", "text": "no ROCm ld.lld: AMD code objects were assembled but not linked "
                                   "(triton 3.2 links externally; registers and LDS come from the assembly)"})


def compiler_refusal(exc: Exception) -> str:
    """The compiler's reason in one line: its exception's type and the message's last line
    (a CompilationError's first lines point at the kernel's source, its last says why)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"


def answer_probe(dtypes: list[str]) -> int:
    """Which of `dtypes` the probe kernel does not compile for on the active target, and why;
    after a refused first dtype (the target itself) nothing else is asked."""
    from conformance.compile_only.probe_kernel import compile_probe

    refused = {}
    for dtype in dtypes:
        try:
            compile_probe(dtype)
        except Exception as exc:  # the compiler's refusal is the answer
            refused[dtype] = compiler_refusal(exc)
            if dtype == dtypes[0]:
                break
    emit({"event": "compiler", "refused": refused})
    return 0


def main() -> int:
    job = json.loads(sys.stdin.read())
    os.environ.pop("TRITON_INTERPRET", None)  # before the kernels are defined
    os.environ["TRITON_CACHE_DIR"] = job["cache_dir"]
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver

    from conformance import backends

    profile = backends.profile_by_key(job["target"])
    driver.set_active(CompileOnlyDriver(GPUTarget(*profile.compile_target)))
    if profile.compile_target[0] == "hip":
        provide_hip_linker(job["cache_dir"])
    backends.activate(replace(profile, device="cpu"))  # tensors stand in on the CPU
    if job.get("probe"):
        return answer_probe(job["probe"])
    from conformance.bundled.kernels import launch

    compiler = Compiler(profile.key, profile.compile_target[0], set(job["skip"]))
    launch.set_launcher(compiler)
    from conformance.bundled.kernels.tuning_space import configured, parse_config

    for call in job["calls"]:
        compiler.dtype, compiler.config = call["dtype"], call.get("config")
        kernel, _, text = (call.get("config") or "").partition(":")
        try:
            if call.get("config"):
                with configured(kernel, parse_config(text)):
                    run_call(call)
            else:
                run_call(call)
        except (TypeError, ValueError) as exc:  # refused by the operator, or a fault of the worker's
            emit({"event": "skipped", "call": call, "reason": f"{type(exc).__name__}: {exc}"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
