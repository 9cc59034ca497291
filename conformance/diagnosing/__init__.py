"""Saying where and why a case fails, after the rule has judged it.

    judged tensors -> error_spread (every tensor: the error in ulps, kernel beside torch)
    failing tensor -> localization (where the excess sits: slices, rows, key blocks, columns)
                   -> key_attribution (the key-block axis of query rows, and back)
                   -> fault_patterns (a named pattern with its evidence, or "unclassified")
    failing case   -> shrinking (the smallest case that still fails)
"""
