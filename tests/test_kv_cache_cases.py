"""kv_cache_attention judged end to end (`python -m conformance run`) on the plain-torch doubles
of tests/kv_cache_doubles.py: the exact double passes every KV-cache case of the smoke tier;
each deliberately wrong double fails where its fault shows (a key read past a sequence's
length; new tokens written one slot late, seen in the cache check; NaN for an empty
context); kernels of FlagAttention's calling conventions are judged through their declared
`kv_signature` and `cache_layout`, and what a convention cannot express is `unsupported`."""

import pytest

from conformance.cases.catalog import Case, expand_tier
from conformance.cases.kv_cache_tiers import SMOKE
from conformance.cli import main
from conformance.running.results import read_results

DOUBLES = "tests.kv_cache_doubles"
SMOKE_IDS = [case.id for case in expand_tier(SMOKE)]
MIXED_SPLITS = "kv_cache_attention.fwd[fp16,d32,causal,B5,H4,Hkv1,Sq4,Sk48,lse,negative:1000,lens=mixed,splits3,seed0]"
PAGED_SHUFFLED = "kv_cache_attention.fwd[bf16,d64,noncausal,B2,H8,Hkv2,Sq1,Sk60,lens=mixed,page1,table=shuffled,seed0]"
APPEND_SHARED = ("kv_cache_attention.fwd[fp16,d32,noncausal,B5,H2,Hkv2,Sq2,Sk80,lse,lens=mixed,page16,splits2,"
                 "table=shared,append,seed0]")
EQUAL_CONTIGUOUS = "kv_cache_attention.fwd[fp16,d32,causal,B2,H4,Hkv2,Sq3,Sk40,lens=equal,seed0]"


def run(tmp_path, double: str, *case_ids: str, capabilities=None) -> tuple[int, dict]:
    """(exit code, case id -> results line) of one run of the double named."""
    out = tmp_path / double
    argv = ["run", "--out", str(out), "--kernel", f"kv_cache_attention={DOUBLES}:{double}"]
    if capabilities:
        argv += ["--capabilities", str(capabilities)]
    for case_id in case_ids:
        argv += ["--case", case_id]
    code = main(argv)
    return code, {line["case"]: line for line in read_results(out) if line.get("kind", "case") == "case"}


def tensors(line: dict) -> dict:
    return {tensor["name"]: tensor for tensor in line["tensors"]}


def test_the_exact_double_passes_every_kv_cache_case_of_the_smoke_tier(tmp_path):
    code, lines = run(tmp_path, "kv_cache_attention", *SMOKE_IDS)
    assert {case_id: line["verdict"] for case_id, line in lines.items()} == {case_id: "pass" for case_id in SMOKE_IDS}
    assert code == 0
    assert set(tensors(lines[APPEND_SHARED])) == {"out", "lse", "cache"}
    assert tensors(lines[APPEND_SHARED])["cache"]["kernel_err"] == 0


def test_a_key_read_past_the_length_fails_the_output(tmp_path):
    code, lines = run(tmp_path, "reads_past_length", MIXED_SPLITS, PAGED_SHUFFLED)
    assert code == 1
    for line in lines.values():
        assert line["verdict"] == "fail"
        assert tensors(line)["out"]["ratio"] > 10
        assert tensors(line)["cache"]["kernel_err"] == 0


def test_new_tokens_written_one_slot_late_fail_the_cache_check(tmp_path):
    code, lines = run(tmp_path, "appends_one_slot_late", APPEND_SHARED, MIXED_SPLITS)
    assert (code, lines[MIXED_SPLITS]["verdict"], lines[APPEND_SHARED]["verdict"]) == (1, "pass", "fail")
    judged = tensors(lines[APPEND_SHARED])
    assert not judged["cache"]["passed"]
    # at the first new token's slot, all of its K and V elements (2 x D) are garbage left behind
    assert judged["cache"]["kernel_err"] == 2 * 32


def test_nan_for_an_empty_context_is_nonfinite(tmp_path):
    _, lines = run(tmp_path, "empty_rows_nan", MIXED_SPLITS)
    assert lines[MIXED_SPLITS]["verdict"] == "nonfinite"


def test_flag_attention_conventions_are_called_their_own_way(tmp_path):
    code, lines = run(tmp_path, "paged_attention", PAGED_SHUFFLED, MIXED_SPLITS, APPEND_SHARED, EQUAL_CONTIGUOUS)
    assert lines[PAGED_SHUFFLED]["verdict"] == "pass"
    for case_id, words in ((MIXED_SPLITS, "no log-normalizer output"), (APPEND_SHARED, "no log-normalizer output")):
        assert lines[case_id]["verdict"] == "unsupported"
        assert words in lines[case_id]["reason"] and "paged_attention takes one query token" in lines[case_id]["reason"]
    assert "Sq 3 > 1" in lines[EQUAL_CONTIGUOUS]["reason"] or "no contiguous cache" in lines[EQUAL_CONTIGUOUS]["reason"]
    assert code == 0
    code, lines = run(tmp_path, "split_kv", EQUAL_CONTIGUOUS, MIXED_SPLITS, PAGED_SHUFFLED)
    assert lines[EQUAL_CONTIGUOUS]["verdict"] == "pass"
    assert lines[MIXED_SPLITS]["verdict"] == lines[PAGED_SHUFFLED]["verdict"] == "unsupported"
    assert code == 0


def test_a_declared_head_major_cache_is_handed_over_head_major_and_its_writes_judged(tmp_path):
    code, lines = run(tmp_path, "kv_cache_head_major", PAGED_SHUFFLED, APPEND_SHARED, EQUAL_CONTIGUOUS)
    assert {line["verdict"] for line in lines.values()} == {"pass"} and code == 0
    declaration = tmp_path / "caps.toml"  # a file's table wins over the attribute: page-major again
    declaration.write_text('[kv_cache_attention]\ncache_layout = "page_major"\n')
    _, lines = run(tmp_path, "kv_cache_head_major", PAGED_SHUFFLED, EQUAL_CONTIGUOUS, capabilities=declaration)
    assert lines[PAGED_SHUFFLED]["verdict"] in ("fail", "error")  # pages read with the wrong axes
    assert lines[EQUAL_CONTIGUOUS]["verdict"] == "pass"  # a contiguous cache has no page layout


def test_a_declared_query_layout_is_handed_over_and_taken_back(tmp_path):
    code, lines = run(tmp_path, "kv_cache_bhsd", MIXED_SPLITS, APPEND_SHARED)
    assert {line["verdict"] for line in lines.values()} == {"pass"} and code == 0
    code, lines = run(tmp_path, "kv_cache_sequences", PAGED_SHUFFLED, MIXED_SPLITS)
    assert lines[PAGED_SHUFFLED]["verdict"] == "pass" and code == 0
    assert lines[MIXED_SPLITS]["verdict"] == "unsupported" and "Sq 4 > 1" in lines[MIXED_SPLITS]["reason"]
    assert "query_layout sequences" in lines[MIXED_SPLITS]["reason"]


@pytest.mark.parametrize("case_id", [MIXED_SPLITS, APPEND_SHARED, EQUAL_CONTIGUOUS])
def test_kv_cache_ids_round_trip(case_id):
    assert Case.from_id(case_id).id == case_id


def test_flex_judges_a_contiguous_cache_it_appends_to(tmp_path):
    """FlexAttention (Inductor's C++ flex on the CPU): a mask per sequence length, new tokens
    written in place by the adapter; pages and forced splits declared unsupported."""
    appended = "kv_cache_attention.fwd[fp16,d32,causal,B5,H2,Hkv2,Sq3,Sk80,lens=mixed,append,seed0]"
    out = tmp_path / "flex"
    code = main(["run", "--out", str(out), "--kernel", "kv_cache_attention=flex", "--case", appended,
                 "--case", PAGED_SHUFFLED])
    lines = {line["case"]: line for line in read_results(out) if line.get("kind", "case") == "case"}
    assert code == 0 and lines[appended]["verdict"] == "pass"
    assert tensors(lines[appended])["cache"]["kernel_err"] == 0
    assert lines[PAGED_SHUFFLED]["verdict"] == "unsupported" and "no block table" in lines[PAGED_SHUFFLED]["reason"]


def test_the_flag_attention_recipes_declare_their_conventions(tmp_path):
    """recipes/flag-attention/*.toml, as the guide uses them, on doubles of the two signatures."""
    code, lines = run(tmp_path, "paged_attention", PAGED_SHUFFLED, capabilities="recipes/flag-attention/paged_attention.toml")
    # its caches include an empty one, which paged_attention declares it cannot take
    assert lines[PAGED_SHUFFLED]["verdict"] == "unsupported" and "rows that see no key" in lines[PAGED_SHUFFLED]["reason"]
    nonempty = PAGED_SHUFFLED.replace("lens=mixed", "lens=nonempty")
    code, lines = run(tmp_path, "paged_attention", nonempty, capabilities="recipes/flag-attention/paged_attention.toml")
    assert lines[nonempty]["verdict"] == "unsupported" and "page size 1 not in" in lines[nonempty]["reason"]
    paged16 = nonempty.replace("page1,", "page16,")
    code, lines = run(tmp_path, "paged_attention", paged16, capabilities="recipes/flag-attention/paged_attention.toml")
    assert (code, lines[paged16]["verdict"]) == (0, "pass")
    code, lines = run(tmp_path, "split_kv", EQUAL_CONTIGUOUS, capabilities="recipes/flag-attention/split_kv.toml")
    assert (code, lines[EQUAL_CONTIGUOUS]["verdict"]) == (0, "pass")


FP8_CACHE = "kv_cache_attention.fwd[fp16,d32,causal,B3,H4,Hkv2,Sq2,Sk40,lse,lens=mixed,page16,append,cache=fp8e4m3,seed0]"


def test_an_fp8_cache_is_handed_over_quantised_with_its_descales():
    """The cache holds the keys over a power-of-two descale, rounded to fp8; the paths attend to
    fp8 * descale rounded to the queries' dtype, the operator's definition."""
    import torch

    from conformance.cases.inputs import make_inputs
    from conformance.judging import kv_cache

    case = Case.from_id(FP8_CACHE)
    inputs = make_inputs(case, "cpu", {"q": "q", "k": "kv", "v": "kv"}).detached()
    positional, keyword, _ = kv_cache.arguments(case, inputs)
    assert positional[1].dtype == keyword["k_new"].dtype == torch.float8_e4m3fn
    descale = keyword["k_descale"]
    assert descale == 2.0 ** round(torch.log2(torch.tensor(descale)).item())  # a power of two
    largest = float(inputs["k"].abs().max())
    assert largest / descale <= 448 < 2 * largest / descale  # the top binade of e4m3
    attended = kv_cache.effective(case, inputs["k"])
    assert attended.dtype == torch.float16
    assert torch.equal(attended, (kv_cache.stored(case, inputs["k"])[0].float() * descale).half())


def test_the_bundled_kernel_reads_an_fp8_cache_by_the_rule():
    """The interpreter profile lists no fp8 (a run says `unsupported`: flash_attention's fp8
    products need fp8 matrix units), but the kernel dequantises an fp8 cache there: the case
    judged in-process."""
    from conformance.backends import INTERPRETER, activate
    from conformance.running.implementations import Implementations
    from conformance.running.runner import _judge

    activate()
    judged = _judge(Case.from_id(FP8_CACHE), "cpu", Implementations.from_specs(None))
    assert judged["rule_verdict"] == "pass", judged.get("reason")
    assert {t["name"]: t["kernel_err"] for t in judged["tensors"]}["cache"] == 0
    assert "fp8e4m3 not supported" in Case.from_id(FP8_CACHE).unsupported_reason(INTERPRETER)


def test_planted_context_lengths_stay_within_the_cache():
    """Found by the property search: a cache of one key with one appended token planted a
    context of two."""
    from conformance.cases.variants import sequence_lengths

    for case_id in ("kv_cache_attention.fwd[fp16,d16,noncausal,B3,H1,Hkv1,Sq1,Sk1,lens=mixed,append,seed0]",
                    "kv_cache_attention.fwd[fp16,d16,causal,B5,H1,Hkv1,Sq4,Sk5,lens=mixed,append,seed0]"):
        case = Case.from_id(case_id)
        queries, contexts = sequence_lengths(case)
        assert all(case.seq_q <= length <= case.seq_k for length in contexts) and case.seq_k in contexts
