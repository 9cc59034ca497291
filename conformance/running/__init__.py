"""How cases run: the `run`/`list`/`probes` commands (`commands`), what a run selects
(`selection`, `run_options`), the pytest plugin (`plugin`), one case (`runner`) in-process
or in an isolated worker (`worker`, `isolation`), the implementations judged
(`implementations`, `capabilities`), the GPUs (`devices`) and the run folder (`results`,
`environment`).

Drives cases, judging, probing and robustness.known_issues; nothing below it imports
it except for the results folder's reader (`results`)."""
