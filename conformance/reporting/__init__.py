"""Renderers of a run's results: terminal, Markdown, HTML, JUnit XML, JSON lines;
run-to-run diffs; the triton-version matrix.

Every module here reads results lines (and env.json) and nothing else; it imports
the cases, judging.verdicts and running.results, never the runner or the kernels. Numbers are
the recorded ones; the only arithmetic is aggregation over them (counts, the worst
and the median of recorded ratios).
"""
