"""The mutant machinery: edits that must apply exactly once, packages that differ from
the bundled kernels by exactly their named edits, the case order, the kill table and
`python -m mutants` (no kernel launches here; tests/test_mutant_kills.py launches)."""

import re

import pytest

from conformance.cases.catalog import OPS, Case
from conformance.judging import verdicts
from conformance.bundled.mutants import BY_NAME, COUNTED, MUTANTS, Edit, Mutant, PatternError
from conformance.bundled.mutants import kill, registry
from conformance.bundled.mutants.cli import main
from conformance.bundled.mutants.kill import exit_status, tier_ladder
from conformance.bundled.mutants.ordering import coverage_order, trait_pairs, traits
from conformance.bundled.mutants.report import markdown, read_mutant_lines, terminal, mutants_writer
from conformance.bundled.mutants.transform import (KERNELS_PACKAGE, kernel_sources, load, materialise,
                                                 mutated_sources, rename_imports)

SOURCES = {"a.py": "x = 1\ny = 2\n", "b.py": "from .a import x\nfrom ..reference.c import y\nz = x + x\n"}


def test_an_edit_whose_snippet_is_missing_fails_loudly():
    mutant = Mutant("gone", "fault", (Edit("a.py", "x = 3", "x = 4"),))
    with pytest.raises(PatternError, match=r"'gone'.*kernels/a.py.*does not occur.*'x = 3'"):
        mutated_sources(mutant, SOURCES)


def test_an_edit_whose_snippet_occurs_twice_fails_loudly():
    mutant = Mutant("twice", "fault", (Edit("b.py", "x", "y"),))
    with pytest.raises(PatternError, match=r"'twice'.*kernels/b.py.*occurs 3 times.*exactly once"):
        mutated_sources(mutant, SOURCES)


def test_an_edit_of_a_missing_file_fails_loudly():
    with pytest.raises(PatternError, match="no file kernels/c.py"):
        mutated_sources(Mutant("nofile", "fault", (Edit("c.py", "x", "y"),)), SOURCES)


def test_a_mutant_package_imports_itself_and_the_real_reference():
    """The copy is a top-level package: its relative imports find its own modules, the ones that
    would leave it (`..reference`) name the bundled reference, which no mutant edits."""
    sources = mutated_sources(Mutant("m", "fault", (Edit("b.py", "x + x", "x * x"),)), SOURCES)
    assert sources == {"a.py": "x = 1\ny = 2\n",
                       "b.py": "from .a import x\nfrom conformance.bundled.reference.c import y\nz = x * x\n"}


def test_renaming_touches_only_imports_that_leave_the_package_or_name_it():
    source = ("from . import tuning\nfrom .. import reference\n    from ..reference.v import w\n"
              f"import {KERNELS_PACKAGE}.flash\ntext = 'from ..reference'\n")
    assert rename_imports(source, "_fa_mutant_m") == (
        "from . import tuning\nfrom conformance.bundled import reference\n"
        "    from conformance.bundled.reference.v import w\nimport _fa_mutant_m.flash\ntext = 'from ..reference'\n")


def _apply_independently(text: str, edits) -> str:
    for edit in edits:
        before, found, after = text.partition(edit.find)
        assert found and edit.find not in before + after
        text = before + edit.replace + after
    return text


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_each_mutant_differs_from_the_kernels_by_exactly_its_edits(mutant):
    original, mutated = kernel_sources(), mutated_sources(mutant)
    assert mutated.keys() == original.keys()
    for name, text in mutated.items():
        # nothing of the copy runs the original kernels, nothing leaves the copy relatively
        assert not re.search(rf"^\s*(from|import)\s+({re.escape(KERNELS_PACKAGE)}\b|\.\.)", text, re.MULTILINE), name
        renamed = rename_imports(original[name], mutant.package)
        changed = [a for a, b in zip(original[name].splitlines(), renamed.splitlines()) if a != b]
        assert all(re.match(r"\s*(from|import) ", line) for line in changed), (name, changed)
        edits = [edit for edit in mutant.edits if edit.file == name]
        assert text == rename_imports(_apply_independently(original[name], edits), mutant.package), name
        assert (text != renamed) == bool(edits), name


def test_mutants_are_distinct_and_enough():
    assert len(COUNTED) >= 15
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)
    assert len({m.edits for m in MUTANTS}) == len(MUTANTS)
    assert {m.name for m in MUTANTS if not m.counted} == {"crash", "hang"}


def test_materialised_package_is_the_mutated_sources_and_is_reused(tmp_path):
    mutant = BY_NAME["lse_log2"]
    root = materialise(mutant)
    assert materialise(mutant) == root
    on_disk = {path.name: path.read_text() for path in (root / mutant.package).glob("*.py")}
    assert on_disk == mutated_sources(mutant)


def test_registry_gives_the_mutant_operator_with_its_dropout_mask():
    package = load(BY_NAME["dropout_not_rescaled"])
    function = registry.flash_attention_dropout_not_rescaled
    assert function is package.flash_attention
    assert function.dropout_keep_mask is package.dropout_keep_mask
    assert registry.piecewise_attention_dropout_not_rescaled is package.piecewise_attention
    assert registry.kernel_specs("lse_log2") == [
        "flash_attention=conformance.bundled.mutants.registry:flash_attention_lse_log2",
        "piecewise_attention=conformance.bundled.mutants.registry:piecewise_attention_lse_log2",
        "flash_attention_varlen=conformance.bundled.mutants.registry:flash_attention_varlen_lse_log2",
        "kv_cache_attention=conformance.bundled.mutants.registry:kv_cache_attention_lse_log2"]
    with pytest.raises(AttributeError, match="expected <op>_<mutant>"):
        registry.flash_attention_no_such_mutant


def test_registry_judges_a_mutant_through_every_operator_varlen_included():
    """`python -m mutants` passes one --kernel per operator; each name resolves exactly, so the
    varlen mutant's flash_attention (named flash_attention_varlen_keys_of_next_sequence) is not
    taken for the varlen operator of a mutant `keys_of_next_sequence`, nor the other way round."""
    name = "varlen_keys_of_next_sequence"
    package = load(BY_NAME[name])
    assert [spec.partition("=")[0] for spec in registry.kernel_specs(name)] == list(OPS)
    assert "flash_attention_varlen" in OPS
    assert registry.flash_attention_varlen_varlen_keys_of_next_sequence is package.flash_attention_varlen
    assert registry.flash_attention_varlen_keys_of_next_sequence is package.flash_attention
    assert registry.flash_attention_varlen_lse_log2 is load(BY_NAME["lse_log2"]).flash_attention_varlen


def test_registry_refuses_two_mutants_that_would_share_an_attribute_name(monkeypatch):
    fault = (Edit("a.py", "x", "y"),)
    with monkeypatch.context() as patch:
        patch.setattr(registry, "BY_NAME", {"x": Mutant("x", "f", fault), "varlen_x": Mutant("varlen_x", "f", fault)})
        with pytest.raises(ValueError, match="flash_attention_varlen_x names both"):
            registry.flash_attention_x
    assert len(registry._attributes()) == len(OPS) * len(MUTANTS)  # the real ones are all distinct


def _case(**fields) -> Case:
    base = dict(op="flash_attention", direction="fwd", dtype="fp16", head_dim=32, causal=False,
                batch=1, heads=2, kv_heads=2, seq_q=64, seq_k=64)
    return Case(**{**base, **fields})


def test_coverage_order_tries_new_trait_pairs_before_repeats_and_cheap_before_dear():
    cheap = _case()
    repeat = _case(seq_q=128, seq_k=128)  # the same traits, four times the work
    new = _case(causal=True, batch=2, seq_q=128, seq_k=128)
    assert coverage_order([repeat, new, cheap]) == [cheap, new, repeat]
    assert coverage_order([new, cheap, repeat]) == [cheap, new, repeat]


def test_the_variants_are_traits_of_the_coverage_order():
    """A window, a soft cap, ALiBi and a varlen length pattern each bring pairs of their own,
    so the order reaches a variant case before a costlier repeat of traits already seen."""
    plain, repeat = _case(), _case(seq_q=128, seq_k=128)
    variants = [_case(window=(8, 0)), _case(softcap=30.0), _case(alibi="h"), _case(alibi="bh"),
                _case(op="flash_attention_varlen", lens="mixed", batch=4)]
    assert {name: traits(plain)[name] for name in ("window", "softcap", "alibi", "lens")} == {
        "window": False, "softcap": False, "alibi": None, "lens": None}
    for variant in variants:
        assert trait_pairs(variant) - trait_pairs(plain), variant
        assert coverage_order([repeat, plain, variant]) == [plain, variant, repeat]


def test_tier_ladder_climbs_from_smoke():
    assert tier_ladder("smoke") == ["smoke"]
    assert tier_ladder("standard") == ["smoke", "standard"]
    with pytest.raises(ValueError, match="unknown tier"):
        tier_ladder("huge")


def _line(name, verdict, kills=(), reason="", tier=None):
    return {"kind": "mutant", "case": f"mutant.{name}", "mutant": name, "fault": BY_NAME[name].fault,
            "verdict": verdict, "status": "-", "reason": reason, "tier": tier, "kills": list(kills),
            "cases_run": {"smoke": 3}, "backend": "interpreter:cpu", "duration_s": 1.0}


KILL = {"case": "flash_attention.fwd[fp16,d32,noncausal,B1,H2,Hkv1,Sq70,Sk100,lse,seed0]",
        "verdict": "fail", "reason": "lse ratio 2.6e+06 > 2", "tensors": [{"name": "lse", "ratio": 2.65e6}],
        "reproduce": "python -m conformance run --case ..."}


def test_kill_table_renders_every_mutant_from_its_lines(tmp_path):
    lines = [_line("lse_log2", verdicts.PASS, [KILL], tier="smoke"),
             _line("piecewise_threshold_inclusive", verdicts.FAIL, reason="survived every case | 12 cases"),
             _line("gqa_dkdv_race", verdicts.UNSUPPORTED, reason="not reachable on the interpreter: sequential")]
    writer = mutants_writer(tmp_path)
    for line in lines:
        writer.append(line)
    writer.close()
    assert read_mutant_lines(tmp_path) == lines
    text = markdown({"backend": "interpreter:cpu"}, lines)
    assert "3 mutants: killed 1, survived 1, not reachable on this backend 1" in text
    assert f"`{KILL['case']}` (fail: lse 2.65e+06)" in text
    assert "survived every case \\| 12 cases" in text  # escaped inside the markdown table
    assert "not reachable on the interpreter: sequential" in terminal(lines)
    assert exit_status(lines) == 1 and exit_status([lines[0], lines[2]]) == 0


def test_cli_lists_mutants_and_refuses_fixtures_and_unknown_names(capsys):
    assert main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert all(mutant.name in listed for mutant in MUTANTS)
    assert main(["--mutant", "crash"]) == 2
    assert "robustness fixture" in capsys.readouterr().err
    assert main(["--mutant", "no_such"]) == 2
    assert "unknown mutant 'no_such'" in capsys.readouterr().err


def test_a_mutant_whose_edit_no_longer_applies_is_reported_broken_not_killed(monkeypatch):
    stale = Mutant("stale", "fault", (Edit("flash.py", "this line was refactored away", "x"),))
    monkeypatch.setitem(kill.BY_NAME, "stale", stale)
    line = kill.hunt("stale", "smoke", "interpreter")
    assert (line["status"], line["verdict"], line["kills"]) == ("broken", verdicts.ERROR, [])
    assert "this line was refactored away" in line["reason"]
    assert exit_status([line]) == 1


def test_a_mutant_built_only_for_other_backends_is_unreachable_here_not_hunted(monkeypatch):
    """One vendor's inline assembly (softcap_hardware_tanh's PTX) cannot build elsewhere: its
    cases would only error, and a hunt would call it SURVIVED. It is reported unreachable."""
    vendor_only = Mutant("vendor_only", "fault", (Edit("flash.py", "this is never applied", "x"),),
                         backends=("hip",))
    monkeypatch.setitem(kill.BY_NAME, "vendor_only", vendor_only)
    line = kill.hunt("vendor_only", "smoke", "interpreter")
    assert (line["verdict"], line["kills"], line["cases_run"]) == (verdicts.UNSUPPORTED, [], {})
    assert "builds only for hip" in line["reason"]
    assert exit_status([line]) == 0
    assert BY_NAME["softcap_hardware_tanh"].backends == ("cuda",)


def test_a_case_that_breaks_the_device_ends_the_hunt_in_this_process(monkeypatch):
    """After a case whose `error` left the GPU unusable (a poisoned CUDA context), the hunt
    stops in this process with the case's kill recorded: no later case, and no later hunt of
    this hunter, runs on the dead context (mutants.hunters goes on in a fresh process)."""
    broken = {"case": "broken", "verdict": verdicts.ERROR, "reason": "CUDA error: an illegal memory access",
              "tensors": [], "fault_pattern": None, "reproduce": "-"}
    first, second = (Case.from_id(case_id) for case_id in (
        "flash_attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq50,Sk1,seed0]",
        "flash_attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq77,Sk133,seed0]"))
    monkeypatch.setattr(kill, "hunt_order", lambda rung, done, profile: [first, second])
    monkeypatch.setattr(kill, "device_healthy", lambda device: False)
    ran = []
    progress = kill.Progress()
    with pytest.raises(kill.DeviceLost, match="stopped working after"):
        kill._hunt_rung("smoke", lambda case: ran.append(case.id) or {**broken, "case": case.id},
                        type("Profile", (), {"device": "cuda"}), 3, progress)
    assert ran == [first.id] and progress.done == {first.id} and len(progress.kills) == 1
