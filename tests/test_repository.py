"""The repository's promises to a new user: the README's commands are the ones CI runs."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST_COMMAND = "pip install nox && nox -s tests"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert TEST_COMMAND in readme.splitlines()
    assert TEST_COMMAND in ci_lines


def test_readme_states_the_main_job():
    assert "pip install nox && nox -s conformance" in (ROOT / "README.md").read_text().splitlines()
