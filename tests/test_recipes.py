"""The Slurm recipe's commands, run locally as its array tasks would run them: three
shards of a small selection, then the merge step (issue 20)."""

import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SLURM = REPO / "recipes" / "slurm"
CASES = ["flash_attention.fwd[fp16,d16,noncausal,B1,H2,Hkv2,Sq128,Sk128,seed0]",
         "flash_attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq77,Sk133,seed0]",
         "flash_attention.bwd[fp16,d16,causal,B1,H2,Hkv2,Sq128,Sk128,seed0]",
         "piecewise_attention.fwd[fp16,d32,causal,B1,H2,Hkv1,Sq77,Sk100,dist24,seed0]"]


def _task(script: str, run_root: Path, **env) -> subprocess.CompletedProcess:
    environment = {**os.environ, "RUN_ROOT": str(run_root), "TRITON_INTERPRET": "1",
                   "FA_ARGS": " ".join(f"--case={case}" for case in CASES) + " --backend interpreter", **env}
    return subprocess.run(["bash", str(SLURM / script)], cwd=REPO, env=environment, capture_output=True,
                          text=True, timeout=600)


def test_the_slurm_array_and_merge_steps_give_one_report_of_every_case(tmp_path):
    for task in ("1", "2", "3"):
        result = _task("conformance-shard.sbatch", tmp_path, SLURM_ARRAY_TASK_ID=task, SLURM_ARRAY_TASK_COUNT="3")
        assert result.returncode == 0, result.stderr[-2000:]
    merged = _task("conformance-merge.sbatch", tmp_path)
    assert merged.returncode == 0, merged.stderr[-2000:]
    lines = [json.loads(text) for text in (tmp_path / "merged" / "results.jsonl").read_text().splitlines()]
    judged = {line["case"]: line["verdict"] for line in lines if line.get("kind", "case") == "case"}
    assert judged == {case: "pass" for case in CASES}
    assert "Merged from these runs" in (tmp_path / "merged" / "summary.md").read_text()


def test_the_merge_step_fails_when_a_shard_is_missing(tmp_path):
    for task in ("1", "3"):
        assert _task("conformance-shard.sbatch", tmp_path, SLURM_ARRAY_TASK_ID=task,
                     SLURM_ARRAY_TASK_COUNT="3").returncode == 0
    merged = _task("conformance-merge.sbatch", tmp_path)
    assert merged.returncode == 1 and "shard 2/3 missing" in merged.stderr
