"""Built-in adapters that let the harness judge peers' attention implementations without a
module of the user's: `--kernel flash_attention=sdpa:cudnn` (conformance.peers.sdpa) and
`--kernel flash_attention=flex` (torch's FlexAttention, compiled: conformance.peers.flex), each
also for `flash_attention_varlen`. conformance.peers.masks states FlashAttention-2's variants
(window, ALiBi) the way both express them.

An adapter is an operator function with the bundled operator's signature and a
`capabilities` declaration; it may raise `conformance.running.capabilities.NotSupported` before it
launches anything, when the peer itself refuses a case (its reason becomes the
`unsupported` verdict's). An adapter that compiles per case also carries a `compile_clock`
(conformance.running.runner.compile_clock). Imports torch; nothing here imports the runner.
"""
