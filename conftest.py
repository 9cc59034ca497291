"""Repository-wide pytest setup: the conformance plugins for the harness's own tests.

Its tests always run with the catalog plugin (conformance.running.plugin): they rely
on the backend being activated before any test module imports the kernels (the
interpreter needs TRITON_INTERPRET=1 first).  Elsewhere, conformance.pytest_plugin --
the entry point an installed harness gives pytest -- registers it only when a run asks
for the catalog.

Registered by name from hooks, not with `pytest_plugins`: pytest refuses that list in a
conftest.py that is not at the root of the run, and this one is not when another
repository's run collects this clone's conformance/suite.py (an editable install, or a
clone on PYTHONPATH).  By name, a plugin the installed entry point already loaded is
not registered twice.
"""


def pytest_addoption(parser, pluginmanager):
    pluginmanager.import_plugin("conformance.pytest_plugin")  # the --conformance-* options, before parsing


def pytest_configure(config):
    config.pluginmanager.import_plugin("conformance.running.plugin")
