"""The other axis of attention: which key blocks a query row's error comes from (and which
query blocks a key row's), for flash_attention's out, dq, dk and dv.

A row's result is a sum over the other axis: out_i = sum_j P_ij v_j, dq_i = scale sum_j
dS_ij k_j, dk_j = scale sum_i dS_ij q_i, dv_j = sum_i P_ij dO_i. A fault that gets one term
wrong -- a key a mask hides or lets in, a tile dropped -- moves the row along that term's
*atom*: for out the direction v_j - out_i (changing key j's weight), for dq k_j, for dk q_i,
for dv dO_i. So each row's error vector E is decomposed by matching pursuit over a
dictionary of atoms: one per key (or per query of the group), one per block (the block's
summed term: a whole tile wrong at once), and for out one for the zero padding of a
tile-rounded load (k = v = 0: direction -out_i, what unmasked padding does). That atom
is also what any per-row scaling of out does (a row sum or normaliser wrong), so a row
taken by it is checked for padding's signature: n zero keys of weight exp(-lse_i) each
scale row i by 1 / (1 + n exp(-lse_i)), the same n for every row (`padding_keys`). If at most
ATOMS atoms explain >= 90% of |E|^2, the row's excess goes to their blocks by the energy
each explained; otherwise the row is *diffuse* (a scale, a formula error: every term at
once) and is spread over the blocks it sees by the size of their terms.

Masked keys are in the dictionary too (their block terms mask-inclusive, P = exp(s - lse)
for every key): a key a wrong mask lets in must have an atom. Few atoms, because in D
dimensions the best of n random atoms already explains ~2 ln(n)/D of a vector: at most
max(1, D // 16) of them keep that below the 90% asked for. Dropout and NaN/Inf cases are
not attributed (their weights are not the plain softmax's). Float64 throughout: the atoms
must not add rounding of their own.
"""

from __future__ import annotations

import torch

from conformance.diagnosing.geometry import Geometry
from conformance.diagnosing.localization import binned

ATTRIBUTED = frozenset({"out", "dq", "dk", "dv"})
CHUNK_ROWS = 64
# Rows attributed at most (an even stride through the rows with excess beyond that): the
# map is a picture of where the error sits, and a sample of 8192 rows draws it.
MAX_ROWS = 8192
EXPLAINED = 0.9


def attributable(geometry: Geometry, dropout: bool, bad_input: bool) -> bool:
    return geometry.op == "flash_attention" and geometry.name in ATTRIBUTED and not dropout and not bad_input


def grid_for(geometry: Geometry, grid: int) -> int:
    """The map's block size: `grid`, or the kernel's tile of the other axis if smaller."""
    tiles = [t for t in (geometry.query_tile, geometry.key_tile) if t]
    return min([grid, *tiles])


def attribution_map(geometry: Geometry, inputs: dict, do, kernel, ref, rows_excess: torch.Tensor,
                    grid: int) -> tuple[torch.Tensor, float | None]:
    """(query blocks x key blocks + 1) excess, summed over slices, at `grid`; the last column
    is out's tile padding beyond Sk (module doc), and the number of zero keys whose padding
    explains it (None when the rows it took are scaled inconsistently with padding).
    `rows_excess` is each row's excess, (batch, heads, rows) (localization.Profiles.row_excess);
    inputs the case's q, k, v; do the output gradient (backward). Only the rows with excess
    are read, CHUNK_ROWS at a time."""
    from conformance.bundled.reference import REFERENCE, attention_forward

    device = rows_excess.device
    q, k, v = (inputs[name].detach().to(device, torch.float64) for name in ("q", "k", "v"))
    do64 = do.detach().to(device, torch.float64) if do is not None else None
    out, lse = attention_forward(q, k, v, causal=geometry.causal, precision=REFERENCE)
    picked = rows_excess.nonzero()
    stride = -(-picked.shape[0] // MAX_ROWS) if picked.shape[0] else 1
    picked = picked[::stride]
    found = torch.zeros(-(-geometry.seq_q // grid), -(-geometry.seq_k // grid) + 1,
                        dtype=torch.float64, device=device)
    terms = _Terms(geometry, q, k, v, out, lse.to(torch.float64), do64, grid)
    padding = []
    for start in range(0, picked.shape[0], CHUNK_ROWS):
        for (b, h), rows in _by_slice(picked[start:start + CHUNK_ROWS]).items():
            error = (kernel[b, h, rows].detach().to(device, torch.float64)
                     - ref[b, h, rows].detach().to(device, torch.float64))
            shares = terms.dictionary(b, h, rows).shares(error)          # (rows, bins)
            if geometry.name == "out":
                taken = shares[:, -1] >= 0.5
                padding.append(_zero_keys(error[taken], out[b, h, rows][taken], lse[b, h, rows][taken]))
            weighted = shares * rows_excess[b, h, rows, None] * stride
            if geometry.key_rows:
                found[:, :-1].index_add_(1, rows // grid, weighted.T)
            else:
                found.index_add_(0, rows // grid, weighted)
    return found, _consistent(torch.cat(padding)) if padding else None


def _zero_keys(error, out, lse) -> torch.Tensor:
    """Per row, the n with out_kernel = out / (1 + n exp(-lse)): c = -<E, out>/|out|^2 is the
    row's lost fraction n e / (1 + n e), so n = c / (e (1 - c))."""
    lost = -(error * out).sum(-1) / (out * out).sum(-1).clamp_min(1e-300)
    weight = torch.exp(-lse.to(torch.float64))
    return lost / (weight * (1 - lost)).clamp_min(1e-300)


def _consistent(zero_keys: torch.Tensor) -> float | None:
    """The common n of the rows' estimates if at least 4 rows agree within 20% (and n is a
    tile's padding, 0.5..512), else None: fewer rows cannot tell padding from a scaling."""
    zero_keys = zero_keys[torch.isfinite(zero_keys)]
    if zero_keys.numel() < 4:
        return None
    low, middle, high = torch.quantile(zero_keys.cpu(), torch.tensor([0.1, 0.5, 0.9], dtype=zero_keys.dtype)).tolist()
    return middle if 0.5 <= middle <= 512 and high - low <= 0.2 * middle else None


def _by_slice(picked: torch.Tensor) -> dict:
    slices: dict = {}
    for b, h, row in picked.tolist():
        slices.setdefault((b, h), []).append(row)
    return {key: torch.tensor(rows, device=picked.device) for key, rows in slices.items()}


class _Dictionary:
    """The atoms of some rows: `shared` (n, D) minus a per-row `offset` (r, D) -- one per key
    (or query) -- then per-row `blocks` (r, nb, D) and optional per-row `extra` (r, D) atoms.
    `bins`: the output bin of each shared atom; blocks go to their own bin, `extra` to the last.
    `sizes` (r, bins): each bin's visible term size, for spreading diffuse rows."""

    def __init__(self, shared, offset, bins, blocks, extra, sizes, n_bins):
        self.shared, self.offset, self.bins = shared, offset, bins
        self.blocks, self.extra, self.sizes, self.n_bins = blocks, extra, sizes, n_bins

    def _scores(self, residual):
        """Per row and atom: (dot with the residual, squared norm), shared, blocks, extra."""
        dots = residual @ self.shared.T - (residual * self.offset).sum(dim=-1, keepdim=True)
        norms = ((self.shared * self.shared).sum(dim=-1)[None, :] - 2 * self.offset @ self.shared.T
                 + (self.offset * self.offset).sum(dim=-1, keepdim=True))
        parts = [(dots, norms), (torch.einsum("rd,rbd->rb", residual, self.blocks), self.blocks.square().sum(-1))]
        if self.extra is not None:
            parts.append(((residual * self.extra).sum(-1, keepdim=True), self.extra.square().sum(-1, keepdim=True)))
        return torch.cat([d for d, _ in parts], dim=1), torch.cat([n for _, n in parts], dim=1)

    def _atom(self, index):
        rows = torch.arange(index.shape[0], device=index.device)
        n_shared, n_blocks = self.shared.shape[0], self.blocks.shape[1]
        atoms = self.shared[index.clamp_max(n_shared - 1)] - self.offset
        block = self.blocks[rows, (index - n_shared).clamp(0, n_blocks - 1)]
        atoms = torch.where((index >= n_shared)[:, None], block, atoms)
        if self.extra is not None:
            atoms = torch.where((index >= n_shared + n_blocks)[:, None], self.extra, atoms)
        return atoms

    def _bin(self, index):
        n_shared, n_blocks = self.shared.shape[0], self.blocks.shape[1]
        bins = torch.where(index < n_shared, self.bins[index.clamp_max(n_shared - 1)], index - n_shared)
        return torch.where(index >= n_shared + n_blocks, self.n_bins - 1, bins)

    def shares(self, error: torch.Tensor) -> torch.Tensor:
        """Matching pursuit per row (module doc): (rows, bins), each row summing to 1."""
        finite = torch.isfinite(error).all(dim=-1)
        residual = torch.where(finite[:, None], error, 0.0)
        energy = residual.square().sum(dim=-1)
        shares = torch.zeros(error.shape[0], self.n_bins, dtype=error.dtype, device=error.device)
        active = finite & (energy > 0)
        for _ in range(max(1, error.shape[-1] // 16)):
            dots, norms = self._scores(residual)
            gains = dots.square() / norms.clamp_min(1e-300)
            gain, index = gains.max(dim=1)
            step = (dots.gather(1, index[:, None]) / norms.gather(1, index[:, None]).clamp_min(1e-300))
            residual = torch.where(active[:, None], residual - step * self._atom(index), residual)
            shares.index_put_((torch.arange(len(index), device=index.device), self._bin(index)),
                              torch.where(active, gain, 0.0), accumulate=True)
            active &= residual.square().sum(dim=-1) > (1 - EXPLAINED) * energy
        explained = residual.square().sum(dim=-1) <= (1 - EXPLAINED) * energy
        diffuse = ~(explained & finite & (energy > 0))
        shares = torch.where(diffuse[:, None], self.sizes, shares)
        return shares / shares.sum(dim=-1, keepdim=True).clamp_min(1e-300)


class _Terms:
    """The dictionaries of rows of one (batch, head) slice of one tensor."""

    def __init__(self, geometry: Geometry, q, k, v, out, lse, do, grid: int):
        self.geometry, self.grid = geometry, grid
        self.q, self.k, self.v, self.out, self.lse, self.do = q, k, v, out, lse, do
        self.group = geometry.query_heads // geometry.kv_heads
        self.scale = geometry.head_dim ** -0.5
        self.n_bins = -(-geometry.seq_k // grid) + 1 if not geometry.key_rows else -(-geometry.seq_q // grid)

    def _weights(self, b: int, h: int, query_rows=None, key_rows=None) -> torch.Tensor:
        """Mask-inclusive P of query head h: (queries, keys) for the rows asked. A row that
        sees no key (lse = -inf) is normalised over every key instead."""
        keys = self.k[b, h // self.group]
        q = self.q[b, h] if query_rows is None else self.q[b, h, query_rows]
        lse = (self.lse[b, h] if query_rows is None else self.lse[b, h, query_rows]).clone()
        missing = ~torch.isfinite(lse)
        if missing.any():
            lse[missing] = torch.logsumexp(self.scale * q[missing] @ keys.T, dim=-1)
        k = keys if key_rows is None else keys[key_rows]
        return torch.exp(self.scale * q @ k.T - lse[:, None])

    def _visible(self, query_rows, key_rows):
        """(queries, keys) bool: what the causal mask lets through (all when not causal)."""
        if not self.geometry.causal:
            return torch.ones(len(query_rows), len(key_rows), dtype=torch.bool, device=query_rows.device)
        shift = self.geometry.seq_k - self.geometry.seq_q
        return key_rows[None, :] <= query_rows[:, None] + shift

    def dictionary(self, b: int, h: int, rows: torch.Tensor) -> _Dictionary:
        if self.geometry.key_rows:
            return self._key_row_dictionary(b, h, rows)
        return self._query_row_dictionary(b, h, rows)

    def _query_row_dictionary(self, b, h, rows) -> _Dictionary:
        kv, geometry = h // self.group, self.geometry
        keys = torch.arange(geometry.seq_k, device=rows.device)
        p = self._weights(b, h, query_rows=rows)                      # (r, Sk)
        visible = self._visible(rows, keys)
        if geometry.name == "out":
            out = self.out[b, h, rows]
            values, offset, extra = self.v[b, kv], out, -out
            terms = self._blocks(p, values) - binned(p, self.grid)[..., None] * out[:, None, :]
        else:
            do = self.do[b, h, rows]
            ds = p * (do @ self.v[b, kv].T - (do * self.out[b, h, rows]).sum(-1, keepdim=True))
            values, offset, extra = self.k[b, kv], torch.zeros_like(self.q[b, h, rows]), None
            terms, p = self._blocks(ds, values), ds
        sizes = self._sized(torch.where(visible, p.abs(), 0.0), values)
        return _Dictionary(values, offset, keys // self.grid, terms, extra, sizes, self.n_bins)

    def _key_row_dictionary(self, b, g, rows) -> _Dictionary:
        heads = range(g * self.group, (g + 1) * self.group)
        queries = torch.arange(self.geometry.seq_q, device=rows.device)
        visible = self._visible(queries, rows).T                        # (r, Sq)
        shared, blocks, sizes = [], 0, 0
        for h in heads:
            p = self._weights(b, h, key_rows=rows).T                   # (r, Sq)
            if self.geometry.name == "dv":
                atoms, weight = self.do[b, h], p
            else:
                dp = self.v[b, g, rows] @ self.do[b, h].T
                weight, atoms = p * (dp - (self.do[b, h] * self.out[b, h]).sum(-1)[None, :]), self.q[b, h]
            shared.append(atoms)
            blocks = blocks + self._blocks(weight, atoms)
            sizes = sizes + self._sized(torch.where(visible, weight.abs(), 0.0), atoms)
        shared = torch.cat(shared)
        bins = (torch.arange(shared.shape[0], device=rows.device) % self.geometry.seq_q) // self.grid
        return _Dictionary(shared, torch.zeros(len(rows), shared.shape[1], dtype=shared.dtype, device=rows.device),
                           bins, blocks, None, sizes, self.n_bins)

    def _sized(self, weights, values):
        """Each bin's term size |sum_j w_j x_j| (visible terms only), padded to n_bins."""
        sizes = self._blocks(weights, values.abs()).norm(dim=-1)
        return torch.nn.functional.pad(sizes, (0, self.n_bins - sizes.shape[1]))

    def _blocks(self, weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """sum_{c in block} weights[r, c] values[c] per block: (r, blocks, D)."""
        length = weights.shape[-1]
        pad = -length % self.grid
        w = torch.nn.functional.pad(weights, (0, pad)).reshape(weights.shape[0], -1, self.grid)
        x = torch.nn.functional.pad(values, (0, 0, 0, pad)).reshape(-1, self.grid, values.shape[-1])
        return torch.einsum("rbg,bgd->rbd", w, x)
