"""How many pytest-xdist workers a run uses, and how they share the GPUs.

A conformance case launches small kernels: one case leaves most of a GPU idle while
its worker builds inputs, compiles, runs the reference and judges. So a GPU run
uses several workers per GPU by default, as many as the GPU's memory and the host's
cores allow (`plan_workers`); worker `gwK` runs on GPU K mod (number of GPUs)
(conformance.running.devices), each with its own isolated case process
(conformance.running.isolation), so a crash or hang still costs one case.

Verdicts do not depend on the count: every case is seeded by its id, and each runs
alone in its worker process (the determinism relaunch included).

    -n N      exactly N workers (`-n 1`: one process runs every case, as before)
    -n 0      no pytest-xdist at all
    -n auto   the plan below (on the CPU: one per core, pytest-xdist's auto)
    (none)    the plan on a GPU; one process on the CPU interpreter
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# GPU memory one worker may need: its CUDA contexts (the pytest process and its isolated
# case process, ~0.5 GiB each) and its largest case. The standard tier's largest case held
# 2.93 GiB at its peak on the H100 (gpu_peak_bytes, reports/h100-sm90/speed); the long
# tier's larger problems stay within it, as the reference is chunked (reference.chunking).
WORKER_GPU_MEMORY_BYTES = 4 * 2**30
# Workers per host core: each worker is a case process (one core while Triton and ptxas
# compile) and a pytest process that mostly waits; a quarter of the cores is left to those,
# the controller and the driver. On the H100 machine (16 cores) the standard tier took 82 s
# cold / 35 s warm with 8 workers and 66 s / 32 s with 12 (reports/h100-sm90/speed).
WORKERS_PER_CORE = 0.75
# More workers than this on one GPU only queue behind each other's launches (the GPU
# time-slices between processes).
MAX_WORKERS_PER_GPU = 16


@dataclass(frozen=True)
class WorkerPlan:
    """The number of workers of a run and why: `describe()` is printed at the start."""

    workers: int
    gpus: int
    per_gpu: int
    limit: str  # what set per_gpu: "memory", "cores", "cap", or "given" (-n)

    def describe(self) -> str:
        if self.limit == "given":
            return f"{self.workers} worker{'s' if self.workers != 1 else ''} (-n {self.workers}) on {_gpus(self.gpus)}"
        return (f"{self.workers} workers, {self.per_gpu} per GPU on {_gpus(self.gpus)} "
                f"(limited by {LIMIT_WORDS[self.limit]}; -n N overrides, -n 1 runs every case in one process)")


LIMIT_WORDS = {"memory": f"GPU memory, {WORKER_GPU_MEMORY_BYTES // 2**30} GiB per worker",
               "cores": f"host cores, {WORKERS_PER_CORE:g} workers per core",
               "cap": f"at most {MAX_WORKERS_PER_GPU} per GPU"}


def _gpus(count: int) -> str:
    return f"{count} GPU{'s' if count != 1 else ''}"


def plan_workers(gpu_count: int, gpu_memory_bytes: int, cpu_count: int) -> WorkerPlan:
    """The default plan for `gpu_count` GPUs of `gpu_memory_bytes` each (the smallest, when
    they differ) on a host of `cpu_count` cores: the most workers per GPU that memory, cores
    and the cap all allow, at least one."""
    gpus = max(1, gpu_count)
    limits = {"memory": gpu_memory_bytes // WORKER_GPU_MEMORY_BYTES,
              "cores": int(cpu_count * WORKERS_PER_CORE) // gpus,
              "cap": MAX_WORKERS_PER_GPU}
    limit = min(limits, key=lambda name: limits[name])
    per_gpu = max(1, limits[limit])
    return WorkerPlan(workers=per_gpu * gpus, gpus=gpus, per_gpu=per_gpu, limit=limit)


def gpu_plan(requested, cuda=None) -> WorkerPlan:
    """The plan of a GPU run: -n's value when a number was given, else `plan_workers` for
    this machine's visible GPUs. cuda: the torch.cuda module (a stand-in in tests)."""
    if cuda is None:
        import torch

        cuda = torch.cuda
    count = max(1, cuda.device_count())
    if isinstance(requested, int):
        return WorkerPlan(workers=requested, gpus=count, per_gpu=max(1, requested // count), limit="given")
    smallest = min(cuda.get_device_properties(index).total_memory for index in range(count))
    return plan_workers(count, smallest, _usable_cores())


def threads_per_worker(workers: int) -> int | None:
    """torch's CPU threads for each of `workers` case processes sharing this host: its cores
    divided among them (inputs are drawn and converted on the CPU; 16 processes each running
    16 threads on 16 cores spend their time switching). None for one worker: torch's default."""
    if workers <= 1:
        return None
    return max(1, _usable_cores() // workers)


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
