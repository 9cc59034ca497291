"""Random123's Philox-4x32-10, independently of Triton: what `tl.philox_impl` must compute.

Used to check the bundled kernels' dropout masks (tests) and Triton's Philox on the
running backend (the `philox` primitive probe), bit for bit.
"""

from __future__ import annotations

import numpy as np

# Random123's published known answers: (counter, key) -> the four output words.
KNOWN_ANSWERS = {
    ((0, 0, 0, 0), (0, 0)): (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2): (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD),
}


def philox4x32_10(counter, key):
    """Philox-4x32-10 in numpy uint64 arithmetic, vectorised over the four counter words
    (array-likes of equal shape); key is two 32-bit ints. Returns four uint64 arrays of
    32-bit words."""
    mask = np.uint64(0xFFFFFFFF)
    c = [np.asarray(x, dtype=np.uint64) for x in counter]
    k0, k1 = (np.uint64(x) for x in key)
    for _ in range(10):
        p0, p1 = np.uint64(0xD2511F53) * c[0], np.uint64(0xCD9E8D57) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & mask, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & mask]
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & mask, (k1 + np.uint64(0xBB67AE85)) & mask
    return c
