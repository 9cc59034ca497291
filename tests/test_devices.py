"""One GPU per pytest-xdist worker, simulated with a stand-in torch.cuda; `-n auto` on the CPU."""

from types import SimpleNamespace

import pytest

from conformance import backends
from conformance.running import plugin
from conformance.running.devices import device_for_worker, pin_xdist_worker, record_device, xdist_worker_number
from conformance.running import parallelism
from conformance.running.parallelism import plan_workers
from conformance.running.run_options import distribution_mode, worker_plan_text, xdist_workers
from tests.test_cli import run_cli


class FakeCuda:
    """torch.cuda as far as pinning uses it."""

    def __init__(self, count: int):
        self.count = count
        self.current = None

    def is_available(self) -> bool:
        return self.count > 0

    def device_count(self) -> int:
        return self.count

    def set_device(self, index: int) -> None:
        self.current = index


def test_worker_numbers():
    assert [xdist_worker_number(name) for name in ("gw0", "gw13", "master", "", None, "gwx")] == \
        [0, 13, None, None, None, None]


def test_workers_spread_over_the_gpus_round_robin():
    assert [device_for_worker(f"gw{n}", 4) for n in range(10)] == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert device_for_worker("gw3", 1) == 0
    assert device_for_worker(None, 8) is None and device_for_worker("gw1", 0) is None


@pytest.mark.parametrize("worker, backend, interpreter, count, expected", [
    ("gw5", None, False, 4, 1),            # detected GPU: pinned
    ("gw2", "cuda:sm_90", True, 8, 2),     # an explicit cuda backend wins over TRITON_INTERPRET
    ("gw2", "interpreter", False, 8, None),  # the interpreter never touches CUDA
    ("gw2", None, True, 8, None),
    (None, None, False, 8, None),          # not an xdist worker (plain run, or the controller)
    ("gw0", None, False, 0, None),         # no GPU
])
def test_pinning(worker, backend, interpreter, count, expected):
    cuda = FakeCuda(count)
    assert pin_xdist_worker(worker, backend, interpreter, cuda=cuda) == expected
    assert cuda.current == expected


def _worker_config(worker_id: str, **given) -> SimpleNamespace:
    """What pytest_configure reads of an xdist worker's config (options as `given`)."""
    options = {"conformance_tier": "auto", "conformance_case": [], "conformance_seeds": None,
               "conformance_kernel": [], "conformance_backend": "cuda:sm_90", "conformance_distribution": None,
               "conformance_resume": None, "conformance_out": None, "conformance_isolate": "auto",
               "conformance_case_timeout": None, "conformance_determinism": "auto",
               "conformance_capabilities": None, "conformance_dropout_mask": [], "conformance_op": [],
               "conformance_config": None, "conformance_shard": None, **given}
    return SimpleNamespace(stash=pytest.Stash(), workerinput={"workerid": worker_id},
                           getoption=options.__getitem__, addinivalue_line=lambda *args: None)


def test_an_xdist_worker_is_pinned_before_it_touches_cuda(monkeypatch):
    """gw6 of 4 GPUs runs on GPU 2, and so does the isolated worker it starts."""
    cuda = FakeCuda(4)
    events = []
    monkeypatch.setattr(plugin, "pin_xdist_worker",
                        lambda *args: events.append("pin") or pin_xdist_worker(*args, cuda=cuda))
    real_activate = backends.activate
    monkeypatch.setattr(backends, "activate", lambda key=None: events.append("activate") or real_activate(key))
    config = _worker_config("gw6")
    plugin.pytest_configure(config)
    state = config.stash[plugin._STATE]
    assert events == ["pin", "activate"]
    assert cuda.current == 2 and state.device_index == 2
    assert state.worker_config()["device_index"] == 2
    assert state.isolate and state.run_options["check_determinism"]  # GPU defaults
    assert state.timeout_s == 300


def test_lines_of_gpu_runs_record_their_device(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert record_device({"case": "x"}, "cuda") == {"case": "x", "device_index": 3}
    assert record_device({"case": "x"}, "cpu") == {"case": "x"}


class _FakeCuda:
    """torch.cuda as far as the worker plan asks: `count` GPUs of `memory_gib` each."""

    def __init__(self, count: int, memory_gib: int):
        self.count, self.memory = count, memory_gib * 2**30

    def is_available(self):
        return True

    def device_count(self):
        return self.count

    def get_device_properties(self, index):
        assert 0 <= index < self.count
        return type("Properties", (), {"total_memory": self.memory})()


@pytest.mark.parametrize("gpus, memory_gib, cores, per_gpu, limit", [
    (1, 80, 16, 12, "cores"),    # the H100 machine: 16 cores, 3 workers per 4 cores
    (1, 80, 64, 16, "cap"),      # plenty of cores: the cap
    (8, 141, 128, 12, "cores"),  # 8 H200s, 128 cores: 96 workers
    (1, 24, 32, 6, "memory"),    # a 24 GiB card: 4 GiB per worker
    (2, 80, 8, 3, "cores"),      # 8 cores for 2 GPUs
    (4, 16, 4, 1, "cores"),      # never fewer than one per GPU
])
def test_the_worker_plan_takes_the_tightest_limit(gpus, memory_gib, cores, per_gpu, limit):
    plan = plan_workers(gpus, memory_gib * 2**30, cores)
    assert (plan.per_gpu, plan.workers, plan.limit) == (per_gpu, per_gpu * gpus, limit)
    assert f"{plan.workers} workers, {per_gpu} per GPU" in plan.describe()


def test_gpu_runs_default_to_the_worker_plan_and_n_overrides_it(monkeypatch):
    import torch

    fake = _FakeCuda(count=2, memory_gib=80)
    for name in ("is_available", "device_count", "get_device_properties"):
        monkeypatch.setattr(torch.cuda, name, getattr(fake, name))
    monkeypatch.setattr(parallelism, "_usable_cores", lambda: 32)
    gpu, cpu = backends.profile_by_key("cuda:sm_90"), backends.profile_by_key("interpreter")
    assert xdist_workers(None, gpu) == xdist_workers("auto", gpu) == 24  # 12 per GPU (cores: 32 x 0.75)
    assert xdist_workers(3, gpu) == 3 and xdist_workers(1, gpu) == 1
    assert xdist_workers("auto", cpu) == "auto" and xdist_workers(None, cpu) is None  # one per core; none
    assert "24 workers, 12 per GPU on 2 GPUs" in worker_plan_text(None, gpu)
    assert worker_plan_text(None, cpu) is None
    assert distribution_mode(1) == [] and distribution_mode(None) == []


def test_n_auto_on_the_cpu(tmp_path):
    """pytest-xdist with as many workers as cores; every case recorded once."""
    pytest.importorskip("xdist")
    cases = [f"flash_attention.fwd[fp32,d16,{mask},B1,H2,Hkv1,Sq{sq},Sk17,seed0]"
             for mask in ("causal", "noncausal") for sq in (9, 30)]
    code, lines, _ = run_cli(tmp_path, "exact", *cases, extra=["-n", "auto"])
    assert code == 0
    assert sorted(line["case"] for line in lines if line.get("kind", "case") == "case") == sorted(cases)


def test_a_case_that_crashed_its_worker_records_the_gpu_it_was_pinned_to(monkeypatch):
    """The crashed worker's line has no device_index of its own (its CUDA context is gone)."""
    config = _worker_config("gw1")
    monkeypatch.setattr(plugin, "pin_xdist_worker", lambda *args: pin_xdist_worker(*args, cuda=FakeCuda(2)))
    plugin.pytest_configure(config)
    state = config.stash[plugin._STATE]
    crashed = {"case": "x", "verdict": "error", "reason": "worker died"}
    state.isolated = SimpleNamespace(run=lambda case: dict(crashed))
    assert state.run(None)["device_index"] == 1
    state.isolated = SimpleNamespace(run=lambda case: {**crashed, "device_index": 0})
    assert state.run(None)["device_index"] == 0  # a line that knows its device keeps it
