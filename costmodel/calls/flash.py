"""FlashAttention-2's work and memory traffic, derived from its algorithm (pure; docs/costmodel.md,
"Attention algorithms").

Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning" (arXiv
2307.08691, 2023), Algorithms 1 (forward) and 2 (backward). Tiles: a query tile of ``Br`` rows and
a key and a value tile of ``Bc`` rows, of head width ``d``, stay in an SM's shared memory together
(the scores of a tile pair live in registers); FlashAttention-2 takes square tiles of 64 or 128
rows (its section 3.3, "block sizes {64, 128} x {64, 128}"), so here ``Br = Bc`` is the largest of
128, 64, 32, 16 with ``3 Br d`` elements fitting in the device's shared memory per SM
(``DeviceSpec.sram_bytes``; Dao et al., "FlashAttention", NeurIPS 2022, Theorem 2: its memory
traffic falls as the tiles grow with ``M``). Per (sample, query head), ``sq`` local queries
against ``sk`` keys:

* **forward** (outer loop over query tiles, inner over key/value tiles): Q read and O written once,
  K and V read once per visited (query tile, key tile) pair, the row statistic ``L = m + log l``
  (float32) written once; the ``sq x sk`` scores live in on-chip memory only. Work: two GEMMs per
  visited tile pair (``S = Q K^T``, ``O += P V``: ``4 d`` FLOPs a score) and the online softmax
  (5 a score: scale, max, exp, sum, rescale).
* **backward** (outer loop over key/value tiles, inner over query tiles): K and V read and dK, dV
  written once; per visited pair Q and dO read, L and ``D = rowsum(dO o O)`` read (float32), and
  dQ read and written in float32 (accumulated in memory); before it ``D`` from dO and O, after it dQ
  cast to the element type. The scores are recomputed, not stored: five GEMMs per visited pair
  (``S = Q K^T`` again, ``dV += P^T dO``, ``dP = dO V^T``, ``dQ += dS K``, ``dK += dS^T Q``),
  ``10 d`` FLOPs a score, 2.5 times the forward's two (the paper's section 3.1.2), and 5 a score
  for ``P = exp(S - L)`` and ``dS = P o (dP - D)``.
* **kept for backward**: Q, K, V, O and L: ``O(S)`` per head, no ``S x S`` probabilities.

A causal mask skips the tiles wholly above the diagonal and computes the tiles it crosses whole.
Under a split sequence (context parallelism) each rank holds two chunks of ``S / 2c`` positions,
``i`` and ``2c - 1 - i`` (Megatron-Core's load balance for causal attention), so every rank visits
about half of its ``sq x sk`` rectangle; the straggler is priced.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from costmodel.parallel.shard import LocalLayer
from networks.ir import DTYPE_BYTES
from networks.ops.attention import head_shape
from networks.ops.catalogue import OPS

#: Bytes of one float32 row statistic (L, D) and of one float32 dQ accumulator element
STAT_BYTES = 4


#: Tile rows FlashAttention-2 runs with, largest first (module docstring)
TILE_ROWS = (128, 64, 32, 16)


def tile_sizes(sram_bytes: int | None, dh: int, itemsize: int) -> tuple[int, int]:
    """``(Br, Bc)``: query and key/value tile rows whose Q, K and V tiles fit ``sram_bytes`` of an
    SM's shared memory together (module docstring); the smallest when none does. ``None``: no
    datasheet prices the call (a profile's key, timed on the device itself): FlashAttention-2's
    largest block, 128 rows."""
    if sram_bytes is None:
        return TILE_ROWS[0], TILE_ROWS[0]
    rows = next((b for b in TILE_ROWS if 3 * b * dh * itemsize <= sram_bytes), TILE_ROWS[-1])
    return rows, rows


def _chunks(sq: int, sk: int, causal: bool) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Each rank's query chunks as (first, end) positions of the whole sequence: one block covering
    the keys when ``sq == sk``; under a split sequence (``sk = c sq``), causal, the two chunks ``i``
    and ``2c - 1 - i`` of every rank ``i``; not causal, any block (every rank visits all keys)."""
    if sq >= sk or not causal:
        return (((sk - sq, sk),),)
    c = max(1, -(-sk // sq))  # a split that does not divide: the straggler rank holds ceil(S / c) positions
    half = sq // 2
    return tuple(((i * half, (i + 1) * half), ((2 * c - 1 - i) * half, (2 * c - i) * half)) for i in range(c))


@lru_cache(maxsize=4096)
def visited(sq: int, sk: int, causal: bool, br: int, bc: int) -> tuple[int, int, int]:
    """``(kv_rows, q_rows, area)`` of the straggler rank: over the (query tile, key tile) pairs it
    visits, the key rows read (forward: each query tile streams its key tiles), the query rows read
    (backward: each key tile streams its query tiles) and the scores computed (tiles clipped at the
    ends of the chunks and of the keys; a tile the causal diagonal crosses computed whole)."""
    worst = (0, 0, 0)
    for chunks in _chunks(sq, sk, causal):
        kv_rows = q_rows = area = 0
        for lo, hi in chunks:
            for q0 in range(lo, hi, br):
                rows = min(br, hi - q0)
                end = min(sk, q0 + rows) if causal else sk  # keys up to the tile's last query
                tiles = -(-end // bc)
                keys = min(sk, tiles * bc)
                kv_rows += keys
                q_rows += rows * tiles
                area += rows * keys
        worst = max(worst, (area, kv_rows, q_rows))
    area, kv_rows, q_rows = worst
    return kv_rows, q_rows, area


@dataclass(frozen=True)
class FlashCounts:
    """FLOPs and bytes of one pass of the fused kernel over all (sample, head) pairs."""

    flops: int
    bytes: int
    area: int  # scores computed per (sample, head)


def flash_counts(n: int, heads: int, sq: int, sk: int, dh: int, causal: bool, itemsize: int,
                 sram_bytes: int | None, backward: bool) -> FlashCounts:
    """The forward or backward pass of FlashAttention-2 (module docstring) for ``n`` samples of
    ``heads`` local query heads, ``sq`` local queries against ``sk`` keys of width ``dh``."""
    br, bc = tile_sizes(sram_bytes, dh, itemsize)
    kv_rows, q_rows, area = visited(sq, sk, causal, br, bc)
    if not backward:
        flops = (4 * dh + 5) * area
        nbytes = itemsize * dh * (2 * sq + 2 * kv_rows) + STAT_BYTES * sq
    else:
        flops = (10 * dh + 5) * area
        per_query = 2 * itemsize * dh + 2 * STAT_BYTES + 2 * STAT_BYTES * dh  # Q, dO; L, D; dQ read and written
        before = 2 * itemsize * sq * dh + STAT_BYTES * sq  # D = rowsum(dO o O)
        after = (STAT_BYTES + itemsize) * sq * dh  # dQ cast from its float32 accumulator
        nbytes = 4 * itemsize * sk * dh + q_rows * per_query + before + after
    return FlashCounts(n * heads * flops, n * heads * nbytes, area)


def attention_kept_bytes(local: LocalLayer, kernel: str) -> int:
    """What an attention shard keeps for backward besides its input: q, k, v and the per-head output
    (the op catalogue's count, networks.ops.attention), and then the materialised probabilities
    (``batch x heads x sq x sk``) or, under ``flash``, the float32 row statistic L of every query
    of every head (``O(S)`` per head) in their place."""
    item = DTYPE_BYTES.get(local.layer.dtype, 4)
    kept = OPS["attention"].costs(local.p, local.in_shapes, local.out_shape, local.batch, item).activation_bytes
    if kernel != "flash":
        return kept
    sq, d = local.in_shapes[0]
    heads = head_shape(local.p, d)[0]
    probabilities = local.batch * heads * sq * local.p.get("seq_total", sq) * item
    return kept - probabilities + local.batch * heads * sq * STAT_BYTES
