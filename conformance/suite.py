"""The conformance catalog as a pytest test file.

`conformance.running.plugin` collects this file as the selected catalog cases -- one test
item per case, node id `conformance/suite.py::<case id>` -- so it defines nothing
itself. Give it to pytest together with the plugin's options:

    python -m pytest conformance/suite.py --conformance-tier smoke
    python -m pytest conformance/suite.py -n 4 --conformance-case 'flash_attention.fwd[...]'

`python -m conformance run` does exactly this in-process.
"""
