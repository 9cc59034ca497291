"""Launch tables per target family (issue 32): each architecture's facts, the table set
those facts choose (never "newer than Hopper"), today's sm_80 / sm_90 / CDNA choices pinned,
and what the 99 KB and RDNA sets hold."""

import json
from pathlib import Path

import pytest

from conformance import backends
from conformance.backends import cuda, hip
from conformance.bundled.kernels import tuning
from conformance.bundled.kernels.architectures import (ARCHITECTURES, MMA_SYNC, TCGEN05, WGMMA, arch_facts,
                                                       known_architecture)
from conformance.bundled.kernels.targets import Target

PINNED = Path(__file__).parent / "data" / "pinned_launch_tables.json"


def target(backend, arch):
    return Target(backend, arch, arch_facts(backend, arch).warp_size)


def as_data(tables: dict) -> dict:
    return {name: [[bound, config.as_dict()] for bound, config in tab.rows] for name, tab in sorted(tables.items())}


@pytest.mark.parametrize("key", ["cuda:sm_80", "cuda:sm_90", "hip:gfx90a", "hip:gfx942"])
def test_the_tables_of_the_published_targets_are_todays(key):
    """Every configuration sm_80, sm_90 (the H100 standard tier's), gfx90a and gfx942 launch
    with, for every kernel role and head dim, as it was before the tables were split by
    family (tests/data/pinned_launch_tables.json, written from the commit before issue 32),
    and the deliberate changes since (sm_90: the varlen forward and the narrow windows' forward and dQ tables, issue 33; the KV-cache
    split kernel's tables and their filled_paged row, issue 34)."""
    profile = backends.profile_by_key(key)
    assert as_data(profile.launch) == json.loads(PINNED.read_text())[key]


@pytest.mark.parametrize("arch, chosen", [
    (80, "ampere"), (86, "ampere-99kb"), (87, "ampere"), (89, "ampere-99kb"), (90, "hopper"),
    (100, "hopper"), (103, "hopper"), (120, "ampere-99kb"), (121, "ampere-99kb"),
    ("gfx90a", "cdna"), ("gfx942", "cdna"), ("gfx950", "cdna"),
    ("gfx1100", "rdna3"), ("gfx1200", "rdna4"), ("gfx1201", "rdna4"),
])
def test_each_architecture_takes_the_richest_set_its_facts_allow(arch, chosen):
    backend = "cuda" if isinstance(arch, int) else "hip"
    table_set, misfit = tuning.table_set(target(backend, arch))
    assert (table_set.name, misfit) == (chosen, None)
    facts = arch_facts(backend, arch)
    assert table_set.shared_memory_bytes <= facts.shared_memory_bytes
    assert table_set.registers_per_thread <= facts.registers_per_thread


def test_consumer_blackwell_is_not_taken_for_a_hopper():
    """sm_120 is newer than sm_90 but has neither wgmma nor tcgen05 and 99 KB of shared memory:
    the sets say why they do not fit it, by its facts."""
    facts = arch_facts("cuda", 120)
    assert (facts.matrix_unit, facts.shared_memory_bytes, facts.tensor_memory_accelerator) == (MMA_SYNC, 101_376, True)
    assert tuning.HOPPER.misfit(facts) == f"its tiles are for {WGMMA}/{TCGEN05}, not {MMA_SYNC}"
    assert tuning.AMPERE.misfit(facts) == ("it takes up to 106,496 B of shared memory per block, "
                                           "the target allows 101,376")
    a_hopper_with_99kb = arch_facts("cuda", 90).__class__("test", 99 * 1024, 255, 32, WGMMA, True)
    assert "shared memory" in tuning.HOPPER.misfit(a_hopper_with_99kb)


def test_the_99kb_set_is_amperes_with_a_two_stage_dropout_forward_and_no_descriptors():
    small, ampere = tuning.AMPERE_99KB.tables, tuning.AMPERE.tables
    assert {name: tab for name, tab in small.items() if name != "fwd.dropout"} == ampere
    assert small["fwd.dropout"].pick(128) == tuning.LaunchConfig(128, 64, num_warps=8, num_stages=2)
    assert [small["fwd.dropout"].pick(d) for d in (64, 256)] == [ampere["fwd"].pick(d) for d in (64, 256)]
    assert not tuning.AMPERE_99KB.descriptors and tuning.HOPPER.descriptors
    sm120 = target("cuda", 120)
    assert tuning.launch_config("bwd_dq", 128, target=sm120) == tuning.LaunchConfig(64, 64, num_warps=8, num_stages=2)


def test_rdna_sets_take_small_tiles_and_no_occupancy_hint():
    """RDNA4's tiles as the compile-only measurements chose them (kernels/tables_amd.py)."""
    rdna4 = target("hip", "gfx1201")
    picks = {(kernel, d): tuning.launch_config(kernel, d, target=rdna4)
             for kernel in ("bwd_dkdv", "bwd_dq", "piecewise_bwd_dkdv") for d in (64, 128, 256)}
    assert picks[("bwd_dkdv", 64)] == tuning.LaunchConfig(32, 32, num_warps=8)
    assert picks[("bwd_dkdv", 128)] == tuning.LaunchConfig(32, 16, num_warps=8)
    assert picks[("bwd_dkdv", 256)] == tuning.LaunchConfig(32, 32, num_warps=8, head_chunk=32)  # sliced
    assert picks[("bwd_dq", 128)] == tuning.LaunchConfig(64, 32, num_warps=8)
    for tables in (tuning.RDNA3.tables, tuning.RDNA4.tables):
        configs = [config for tab in tables.values() for _, config in tab.rows]
        assert all(config.waves_per_eu is None and config.num_stages == 1 for config in configs)
        assert all(config.num_warps >= 8 for config in configs)  # 256 threads at least, as CDNA's blocks


@pytest.mark.parametrize("backend, arch, known", [
    ("cuda", 110, ("cuda", 103)), ("cuda", 70, ("cuda", 75)), ("cuda", 122, ("cuda", 121)),
    ("hip", "gfx1030", ("hip", "gfx1100")), ("hip", "gfx1151", ("hip", "gfx1100")),
    ("hip", "gfx1250", ("hip", "gfx1201")), ("hip", "gfx908", ("hip", "gfx942")),
])
def test_an_unlisted_architecture_takes_its_nearest_listed_facts(backend, arch, known):
    assert known_architecture(backend, arch) == known


def test_a_target_no_set_fits_gets_the_least_demanding_and_says_why():
    table_set, misfit = tuning.table_set(target("cuda", 75))
    assert table_set is tuning.AMPERE_99KB
    assert misfit.startswith("no launch table set fits cuda:sm_75; ampere-99kb's does not: it takes up to")
    assert misfit in " ".join(backends.cuda_profile((7, 5)).notes)


@pytest.mark.parametrize("arch, fp8", [(80, False), (89, True), (120, True), ("gfx942", False), ("gfx950", True),
                                       ("gfx1100", False), ("gfx1201", True)])
def test_fp8_is_listed_where_the_matrix_unit_multiplies_torchs_formats(arch, fp8):
    backend = "cuda" if isinstance(arch, int) else "hip"
    assert ("fp8e4m3" in target(backend, arch).dtypes) == fp8


def test_descriptors_compile_where_there_is_a_tma_unit():
    pytest.importorskip("triton.language").make_tensor_descriptor  # noqa: B018 (absent in triton 3.2)
    assert [target("cuda", arch).tensor_descriptors for arch in (80, 90, 100, 120)] == [False, True, True, True]
    assert not target("hip", "gfx950").tensor_descriptors


def test_every_listed_architecture_has_a_backend_key_and_the_same_facts():
    keys = {("cuda", major * 10 + minor) for major, minor in cuda.CUDA_ARCHS}
    keys |= {("hip", arch) for arch in hip.HIP_ARCHS}
    assert keys == set(ARCHITECTURES)
    for (backend, arch), facts in ARCHITECTURES.items():
        profile = backends.profile_by_key(f"{backend}:{'sm_' if backend == 'cuda' else ''}{arch}")
        assert (profile.shared_memory_bytes, profile.registers_per_thread, profile.warp_size) == (
            facts.shared_memory_bytes, facts.registers_per_thread, facts.warp_size)


def test_profiles_say_whether_their_kernels_ran_on_hardware():
    assert backends.profile_by_key("cuda:sm_90").hardware_runs.startswith("an H100")
    for key in ("cuda:sm_80", "cuda:sm_100", "cuda:sm_120", "hip:gfx942", "hip:gfx950", "hip:gfx1100", "hip:gfx1201"):
        profile = backends.profile_by_key(key)
        assert profile.hardware_runs is None
        notes = " ".join(profile.notes)
        assert f"Not run on hardware here: compile-only (python -m conformance compile --target {key})" in notes
        assert f"Launch tables: the {tuning.table_set(profile.target)[0].name} set, " in notes
