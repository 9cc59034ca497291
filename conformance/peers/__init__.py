"""Built-in adapters that let the harness judge peers' attention implementations without a
module of the user's: `--kernel flash_attention=sdpa:cudnn` (conformance.peers.sdpa).

An adapter is an operator function with the bundled operator's signature and a
`capabilities` declaration; it may raise `conformance.running.capabilities.NotSupported` before it
launches anything, when the peer itself refuses a case (its reason becomes the
`unsupported` verdict's). Imports torch; nothing here imports the runner.
"""
