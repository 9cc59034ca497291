"""Backend detection and profile selection, by simulating each platform's torch and
triton attributes (no GPU needed), and the launch knobs the kernels receive."""

import types

import pytest
import torch

from conformance import backends
from conformance.backends import detection
from conformance.running.results import read_results

PROFILE = backends.activate()  # before `import kernels` (TRITON_INTERPRET on CPU)

from conformance.bundled.kernels import launch as kernels_launch  # noqa: E402
from conformance.bundled.kernels import tuning as kernels_tuning  # noqa: E402
from conformance.bundled.kernels.targets import Target  # noqa: E402




def target(backend, arch, warp_size):
    return types.SimpleNamespace(backend=backend, arch=arch, warp_size=warp_size)


@pytest.fixture
def gpu(monkeypatch):
    """A machine where torch sees a device; each test says which one."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.delattr(torch, "corex", raising=False)
    monkeypatch.setattr(detection, "_triton_target", lambda: None)
    real_find_spec = detection.importlib.util.find_spec
    monkeypatch.setattr(detection.importlib.util, "find_spec",
                        lambda name: None if name == "triton.backends.iluvatar" else real_find_spec(name))

    def simulate(capability=(9, 0), hip=None, gcn_arch=None, triton_target=None, corex=False):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(torch.version, "hip", hip)
        monkeypatch.setattr(torch.cuda, "get_device_properties",
                            lambda device=None: types.SimpleNamespace(gcnArchName=gcn_arch or ""))
        if triton_target is not None:
            monkeypatch.setattr(detection, "_triton_target", lambda: triton_target)
        if corex:
            monkeypatch.setattr(torch, "corex", True, raising=False)
        return backends.detect()

    return simulate


def test_interpreter_when_requested_or_without_a_gpu(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert backends.detect() is backends.INTERPRETER
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert backends.detect() is backends.INTERPRETER


@pytest.mark.parametrize("capability, key, shared_kib, fp8, tables", [
    ((8, 0), "cuda:sm_80", 163, False, kernels_tuning.AMPERE),
    ((8, 6), "cuda:sm_86", 99, False, kernels_tuning.AMPERE_99KB),
    ((8, 9), "cuda:sm_89", 99, True, kernels_tuning.AMPERE_99KB),
    ((9, 0), "cuda:sm_90", 227, True, kernels_tuning.HOPPER),
    ((10, 0), "cuda:sm_100", 227, True, kernels_tuning.HOPPER),
    ((10, 3), "cuda:sm_103", 227, True, kernels_tuning.HOPPER),
    ((12, 0), "cuda:sm_120", 99, True, kernels_tuning.AMPERE_99KB),
    ((12, 1), "cuda:sm_121", 99, True, kernels_tuning.AMPERE_99KB),
])
def test_nvidia_by_compute_capability(gpu, capability, key, shared_kib, fp8, tables):
    profile = gpu(capability=capability, triton_target=target("cuda", capability[0] * 10 + capability[1], 32))
    assert profile.key == key
    assert profile.shared_memory_bytes == shared_kib * 1024
    assert ("fp8e4m3" in profile.dtypes, "fp8e5m2" in profile.dtypes) == (fp8, fp8)
    assert "bf16" in profile.dtypes and profile.warp_size == 32
    assert profile.compile_target == ("cuda", capability[0] * 10 + capability[1], 32)
    assert profile.launch is tables.tables  # the kernels' own tables, by what the architecture has


def test_an_unlisted_nvidia_arch_borrows_the_nearest_older_limits(gpu):
    profile = gpu(capability=(11, 0))
    assert profile.key == "cuda:sm_110"
    assert profile.shared_memory_bytes == 227 * 1024
    assert "limits of sm_103 are assumed" in profile.notes[-1]
    assert "bf16" not in backends.cuda_profile((7, 5)).dtypes


@pytest.mark.parametrize("gcn_arch, key, warp, lds_kib, fp8, tables", [
    ("gfx90a:sramecc+:xnack-", "hip:gfx90a", 64, 64, False, kernels_tuning.CDNA),
    ("gfx942:sramecc+:xnack-", "hip:gfx942", 64, 64, False, kernels_tuning.CDNA),
    ("gfx950", "hip:gfx950", 64, 160, True, kernels_tuning.CDNA),
    ("gfx1100", "hip:gfx1100", 32, 64, False, kernels_tuning.RDNA3),
    ("gfx1200", "hip:gfx1200", 32, 64, True, kernels_tuning.RDNA4),
    ("gfx1201", "hip:gfx1201", 32, 64, True, kernels_tuning.RDNA4),
])
def test_amd_by_gcn_arch_name(gpu, gcn_arch, key, warp, lds_kib, fp8, tables):
    profile = gpu(hip="6.2.41133", gcn_arch=gcn_arch)
    assert profile.key == key and profile.name == "hip" and profile.device == "cuda"
    assert (profile.warp_size, profile.shared_memory_bytes) == (warp, lds_kib * 1024)
    assert ("fp8e4m3" in profile.dtypes) == fp8
    assert profile.compile_target == ("hip", key.split(":")[1], warp)
    assert profile.launch is tables.tables


def test_amd_arch_from_triton_when_torch_has_no_gcn_name(gpu):
    assert gpu(hip="6.2", gcn_arch="", triton_target=target("hip", "gfx942", 64)).key == "hip:gfx942"


def test_an_unlisted_amd_arch_gets_its_family_defaults(gpu):
    profile = gpu(hip="6.2", gcn_arch="gfx1030")
    assert profile.key == "hip:gfx1030" and profile.warp_size == 32
    assert "limits of gfx1100 are assumed" in profile.notes[-1]


def test_mi200_states_its_denormal_flush_with_sources():
    note = " ".join(backends.hip_profile("gfx90a").notes)
    assert "flush subnormal" in note and "rocm.docs.amd.com" in note and "pytorch.org" in note
    assert "flush" not in " ".join(backends.hip_profile("gfx942").notes)


@pytest.mark.parametrize("marker", ["torch.corex", "triton target", "triton backend"])
def test_iluvatar_by_any_corex_marker(gpu, monkeypatch, marker):
    if marker == "triton backend":
        monkeypatch.setattr(detection.importlib.util, "find_spec", lambda name: object())
    profile = gpu(capability=(7, 1), corex=marker == "torch.corex",
                  triton_target=target("cuda", 71, 64) if marker == "triton target" else None)
    assert profile.key == "iluvatar:ivcore11"
    assert profile.warp_size == 64 and profile.device == "cuda"
    assert profile.dtypes == ("fp16", "bf16", "fp32") and profile.compile_target is None


def test_a_cuda_device_with_32_wide_warps_is_nvidia_not_iluvatar(gpu):
    assert gpu(capability=(8, 0), triton_target=target("cuda", 80, 32)).key == "cuda:sm_80"


@pytest.mark.parametrize("key", backends.known_keys())
def test_every_known_key_selects_its_profile(key):
    assert backends.profile_by_key(key).key == (key if key != "interpreter" else "interpreter:cpu")


@pytest.mark.parametrize("key", ["cuda:ampere", "cuda:sm_9", "hip:mi300", "iluvatar:bi150", "metal", ""])
def test_a_bad_backend_key_names_the_option_and_the_known_keys(key):
    with pytest.raises(ValueError, match=r"^--backend: .*known: interpreter, cuda:sm_75, .*hip:gfx942.*"
                                         r"iluvatar:ivcore11"):
        backends.profile_by_key(key)


def test_the_command_line_reports_a_bad_backend_as_a_usage_error(capsys):
    from conformance.cli import main

    assert main(["list", "--tier", "auto", "--backend", "hip:mi300"]) == 2
    assert "argument --backend: expected hip:gfxNNN" in capsys.readouterr().err


@pytest.mark.parametrize("key", ["cuda:sm_90", "hip:gfx942", "iluvatar:ivcore11"])
def test_a_gpu_key_is_absent_on_a_machine_without_a_gpu(monkeypatch, key):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "names a GPU, but torch sees none" in backends.absence(backends.profile_by_key(key))
    assert backends.absence(backends.INTERPRETER) is None


@pytest.mark.parametrize("machine, present, absent", [
    (dict(capability=(9, 0)), ["cuda:sm_90", "iluvatar:ivcore11", "interpreter"], ["cuda:sm_80", "hip:gfx942"]),
    (dict(hip="6.2", gcn_arch="gfx942:sramecc+:xnack-"), ["hip:gfx942", "interpreter"],
     ["hip:gfx90a", "cuda:sm_90", "iluvatar:ivcore11"]),
    (dict(capability=(7, 1), corex=True), ["iluvatar:ivcore11", "iluvatar:ivcore20", "interpreter"], ["cuda:sm_71"]),
])
def test_a_gpu_key_must_name_the_card_that_is_there(gpu, machine, present, absent):
    """Another architecture or vendor would judge the kernels by another card's facts; an
    Iluvatar key may name any CUDA-like card (its detection markers can be missing)."""
    detected = gpu(**machine)
    assert [backends.absence(backends.profile_by_key(key)) for key in present] == [None] * len(present)
    for key in absent:
        assert backends.absence(backends.profile_by_key(key)) == (
            f"{key} is not this machine's GPU, which is {detected.key} (leave --backend out to use it)")


def test_an_absent_backend_stops_every_command_before_anything_runs(monkeypatch, capsys, tmp_path):
    from conformance.bundled.mutants.cli import main as mutants_main
    from conformance.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for argv in (["run", "--tier", "smoke", "--out", str(tmp_path / "run")], ["probes"], ["flake"]):
        assert main([*argv, "--backend", "cuda:sm_90"]) == 2
        assert capsys.readouterr().err == ("conformance: error: argument --backend: cuda:sm_90 names a GPU, but "
                                           "torch sees none on this machine (use --backend interpreter, or leave "
                                           "--backend out)\n")
    assert not (tmp_path / "run").exists()
    assert mutants_main(["--backend", "cuda:sm_90"]) == 2 and "torch sees none" in capsys.readouterr().err
    assert main(["list", "--tier", "auto", "--backend", "cuda:sm_90"]) == 0  # listing needs no device
    assert len(capsys.readouterr().out.splitlines()) > 78


def test_the_interpreter_is_a_backend_on_a_gpu_machine_too(gpu, tmp_path, monkeypatch):
    gpu(capability=(9, 0))
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # activating the interpreter sets it: undone after the test
    from conformance.cli import main

    out = tmp_path / "run"
    assert main(["run", "--backend", "interpreter", "--out", str(out), "--case",
                 "flash_attention.fwd[fp32,d16,causal,B1,H2,Hkv1,Sq9,Sk17,seed0]",
                 "--kernel", "flash_attention=tests.fake_kernels:exact"]) == 0
    (line,) = [line for line in read_results(out) if line.get("kind") != "probe"]
    assert (line["backend"], line["verdict"]) == ("interpreter:cpu", "pass")


@pytest.mark.parametrize("key", [k for k in backends.known_keys() if k != "interpreter"])
def test_every_gpu_profile_has_a_launch_config_for_every_kernel_dtype_and_head_dim(key):
    profile = backends.profile_by_key(key)
    kernels_ = [*backends.KERNELS, *(f"piecewise_{k}" for k in ("fwd", "bwd_dkdv", "bwd_dq"))]
    for kernel in kernels_:
        for dtype in profile.dtypes:
            for head_dim in (16, 32, 64, 128, 256):
                config = profile.launch_config(kernel, head_dim, dtype)
                for size in (config.block_m, config.block_n, config.num_warps):
                    assert size & (size - 1) == 0, (kernel, dtype, head_dim, config)


def test_register_budget_is_the_smaller_of_the_thread_and_block_limits():
    assert backends.cuda_profile((9, 0)).register_budget(8) == 255
    assert backends.cuda_profile((9, 0)).register_budget(16) == 128
    assert backends.hip_profile("gfx942").register_budget(4) == 512
    assert backends.hip_profile("gfx942").register_budget(8) == 256
    assert backends.hip_profile("gfx1100").register_budget(8) == 256
    assert backends.hip_profile("gfx1201").register_budget(32) == 192  # 4 SIMDs x 1,536 VGPRs per workgroup
    assert backends.iluvatar_profile("ivcore11").register_budget(4) is None


def test_amd_knobs_reach_the_launch_and_nvidia_launches_get_none(monkeypatch):
    """The kernels pick their launch tables by the target triton reports (kernels.targets)."""
    monkeypatch.setattr(kernels_tuning, "current_target", lambda: Target("hip", "gfx942", 64))
    assert kernels_launch.launch_kwargs("fwd", 64, torch.float16) == dict(
        BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=1, waves_per_eu=2)
    assert "waves_per_eu" not in kernels_launch.launch_kwargs("fwd", 256, torch.float16)
    assert "waves_per_eu" not in kernels_launch.launch_kwargs("bwd_dq", 64, torch.float16)
    monkeypatch.setattr(kernels_tuning, "current_target", lambda: Target("cuda", 90, 32))
    assert kernels_launch.launch_kwargs("fwd", 128, torch.float16) == dict(
        BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3)  # Hopper's own table
    assert kernels_launch.launch_kwargs("bwd_preprocess", 256, torch.float32, tiles=("BLOCK_M",)) == dict(
        BLOCK_M=32, num_warps=4, num_stages=1)


def test_set_launcher_routes_every_split_launch_and_restores_the_device(monkeypatch):
    monkeypatch.setattr(kernels_launch, "MAX_GRID_BATCH_HEADS", 2)
    seen = []
    previous = kernels_launch.set_launcher(lambda kernel, grid, *args, **kw: seen.append((kernel, grid, args, kw)))
    try:
        kernels_launch.launch("k", 3, 5, "x", BLOCK_M=16)
    finally:
        kernels_launch.set_launcher(previous)
    assert seen == [("k", (3, 2), ("x",), {"first_batch_head": 0, "BLOCK_M": 16}),
                    ("k", (3, 2), ("x",), {"first_batch_head": 2, "BLOCK_M": 16}),
                    ("k", (3, 1), ("x",), {"first_batch_head": 4, "BLOCK_M": 16})]
    assert kernels_launch._launcher is kernels_launch._on_device
