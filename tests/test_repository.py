"""The repository's promises to a new user: the README's commands are the ones CI runs,
and they use the pip and nox of `python`, the Python that has torch."""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAIN_COMMAND = "python -m pip install nox && python -m nox -s conformance"
TEST_COMMAND = "python -m pip install nox && python -m nox -s tests"


def setup_commands() -> list[str]:
    """The lines of the fenced code blocks in the README's "Set up and run" section."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Set up and run\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_readme_sets_up_with_the_pip_and_nox_of_python():
    # A bare `pip` or `nox` may belong to another Python than the one with torch
    # (a system pip next to a virtualenv's python): then nox's sessions found no
    # torch and tried to download one.
    assert setup_commands() == [MAIN_COMMAND, TEST_COMMAND]


def test_ci_runs_the_readme_test_command():
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert TEST_COMMAND in setup_commands()
    assert TEST_COMMAND in ci_lines  # a line of its own: run, not commented out or quoted


def test_the_noxfile_probe_finds_this_pythons_torch():
    """The GPU sessions choose their torch by running TORCH_PROBE in each candidate
    Python (read from noxfile.py, not imported: it imports nox)."""
    import torch
    import triton

    tree = ast.parse((ROOT / "noxfile.py").read_text())
    probe = next(node.value.value for node in tree.body if isinstance(node, ast.Assign)
                 and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["TORCH_PROBE"])
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=True)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert (found["torch"], found["triton"]) == (torch.__version__, triton.__version__)
    assert found["gpu"] == torch.cuda.is_available()
    assert found["version"] == "%d.%d" % sys.version_info[:2]
    assert str(Path(torch.__file__).resolve().parent.parent) in {str(Path(d).resolve()) for d in found["site_dirs"]}
