"""A `nonfinite` tensor's `where` names the region its NaN/Inf fill (nonfinite_regions),
whatever its shape, run end to end through the CLI with tests/nonfinite_doubles.py."""

import pytest

from conformance.cli import main
from conformance.running.results import read_results

CASE = "flash_attention.fwd[fp32,d16,noncausal,B2,H4,Hkv4,Sq512,Sk64,seed0]"
LONG_CASE = "flash_attention.fwd[fp32,d16,noncausal,B1,H2,Hkv2,Sq2048,Sk64,seed0]"


def _where_of_out(tmp_path, double: str, case_id: str) -> dict:
    out = tmp_path / "run"
    main(["run", "--out", str(out), "--kernel", f"flash_attention=tests.nonfinite_doubles:{double}",
          "--case", case_id])
    (line,) = [line for line in read_results(out) if line.get("kind") != "probe"]
    assert line["verdict"] == "nonfinite"
    (tensor,) = line["tensors"]
    return tensor["where"]


@pytest.mark.parametrize("double, case_id, pattern, region", [
    ("first_24_of_32_blocks", LONG_CASE, "query blocks",
     "49152 of 65536 elements non-finite, in query blocks 0-23 of 32 (64 rows each: rows 0-1535 of 2048) "
     "in every head"),
    ("one_head", CASE, "one head",
     "16384 of 65536 elements non-finite, in every query row in head 1 of 4 of every batch"),
    ("blocks_of_one_head", CASE, "query blocks",
     "2048 of 65536 elements non-finite, in query block 1 of 8 (64 rows each: rows 64-127 of 512) "
     "in head 2 of 4 of every batch"),
    ("second_batch", CASE, "one batch",
     "32768 of 65536 elements non-finite, in every query row in every head of batch 1 of 2"),
    ("heads_of_one_batch", CASE, "some (batch, head) slices",
     "16384 of 65536 elements non-finite, in every query row in heads 1-2 of 4 of batch 0 of 2"),
    ("one_row", CASE, "one query row",
     "32 of 65536 elements non-finite, in query row 77 of 512 in head 0 of 4 of every batch"),
    ("one_element", CASE, "one element",
     "1 of 65536 elements non-finite: batch 0, head 1, query row 5, head-dim column 3"),
    ("head_dim_tail", CASE, "a head-dim tail",
     "32768 of 65536 elements non-finite, in every query row, head-dim columns 8-15 of 16 "
     "in every (batch, head) slice"),
    ("middle_columns_of_some_rows", CASE, "query rows",
     "312 of 65536 elements non-finite, in query rows 5-17 of 512, head-dim columns 2-4 of 16 "
     "in every (batch, head) slice"),
    ("two_regions_apart", CASE, "several regions",
     "1024 of 65536 elements non-finite, in query rows 0-31 of 512 in head 0 of 4 of batch 0 of 2; "
     "query rows 480-511 of 512 in head 1 of 4 of batch 0 of 2"),
])
def test_the_region_the_nonfinite_values_fill_is_named(tmp_path, double, case_id, pattern, region):
    where = _where_of_out(tmp_path, double, case_id)
    assert (where["pattern"], where["evidence"]) == (pattern, region)


def test_a_wholly_nonfinite_tensor_still_reads_every_row(tmp_path):
    where = _where_of_out(tmp_path, "everywhere", CASE)
    assert where["pattern"] == "every row uniformly"
    assert where["evidence"] == "65536 of 65536 elements non-finite: every element of every row, not a region"
