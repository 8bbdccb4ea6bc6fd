"""The strategy space of one layer: which (strategy, convolution algorithm) pairs the planner weighs.

Rules (docs/planner.md, "Candidates"); each keeps the space exact *over the candidates* and small
enough that p = 4096 stays tractable:

1. **Dimensions** are the ones the op catalogue says the layer can split (N, E, H, W, C, F); the
   leftover factor of ``p`` is replication R.
2. **Divisibility.** A degree ``k`` of a dimension is a divisor of ``p`` that divides the extent it
   cuts (the batch for N, the split size otherwise), so every rank gets an equal block and no
   padding is needed. A spatial split with a window (convolution, pooling) also leaves each rank
   an input block at least a kernel wide (``in_size // k >= kernel``) and at least the op's
   ``min_block`` output rows. A split of weights in whole groups (grouped-query attention's
   key/value heads) divides their number or is a multiple of it.
3. **Shape of a hybrid.** At most two model-parallel dimensions (E, H, W, C, F) besides N, so at most
   three split dimensions. Their product ``m`` (the model-parallel degree) is at most
   ``max(MAX_MODEL_DEGREE, p / n_max)`` where ``n_max`` is the largest N degree the batch allows:
   beyond two DGX nodes model parallelism only adds traffic, unless the batch is too small to keep
   the devices busy with N alone.
4. **N takes the rest.** Given the model-parallel degrees, N is the largest divisor of ``p / m``
   that divides the batch; what is left is replication R (only when the batch is too small). An
   expert split E (a mixture-of-experts layer) splits the tokens with N, so E must divide the
   batch and N the batch over E.
5. **Cap.** At most ``MAX_CANDIDATES`` strategies per layer, preferring less replication, then a
   smaller model-parallel degree (a deterministic order, so plans are reproducible).
6. **Sequence-parallel twins.** Each kept strategy whose one tensor-parallel dimension (C or F)
   reduces partial sums of a sequence tensor also comes as its ``SP`` variant (Megatron-LM's
   reduce-scatter into sequence shards, ``layer_layouts.sequence_scatter``), right after it; the
   cap of rule 5 counts the plain strategies only.
7. **Algorithms.** Each convolution strategy is paired with every algorithm that can run the layer
   (``costmodel.calls.algorithms.algorithm_applies``); each attention strategy, on a machine that runs
   FlashAttention, with ``flash`` and ``materialized`` (costmodel.calls.attention); other ops have
   the single algorithm ``""``.

Pure: functions of the layer, ``p`` and the batch.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from itertools import combinations

from costmodel.parallel.axes import N, E, H, W, C, F
from costmodel.calls.attention import ATTENTION_ALGORITHMS
from costmodel.calls.algorithms import CONV_ALGORITHMS, algorithm_applies, recompute_applies, with_recompute
from costmodel.parallel.shard import dim_splits, sequence_scatter
from costmodel.machine.model import Machine
from costmodel.parallel.strategy import Strategy, make_strategy
from networks.ir import Layer
from networks.ops.base import units_fit

MODEL_DIMS = (E, H, W, C, F)
MAX_MODEL_DIMS = 2
MAX_MODEL_DEGREE = 16
MAX_CANDIDATES = 64


@lru_cache(maxsize=1024)
def divisors(n: int) -> tuple[int, ...]:
    """The divisors of ``n`` in increasing order, found in pairs up to its square root."""
    low, high = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            low.append(d)
            if d * d != n:
                high.append(n // d)
        d += 1
    return tuple(low + high[::-1])


def _dim_degrees(layer: Layer, dim: str, p: int) -> tuple[int, ...]:
    """Degrees > 1 of one model dimension that keep equal blocks (rule 2)."""
    split = dim_splits(layer)[dim]
    size = split.size
    out = []
    for k in divisors(p)[1:]:
        if k > size or size % k or size // k < split.min_block:
            continue
        win = split.window
        if win is not None and win.in_size // k < win.kernel:
            continue
        if split.weight_units and units_fit(split, k):  # whole key/value groups, or whole replicas
            continue
        out.append(k)
    return tuple(out)


def largest_batch_degree(p: int, batch: int) -> int:
    """The largest divisor of ``p`` that divides the batch (the most N can take)."""
    return max(d for d in divisors(p) if batch % d == 0)


@lru_cache(maxsize=4096)
def _candidate_strategies(layer: Layer, p: int, batch: int, max_model_degree: int,
                          max_candidates: int) -> tuple[Strategy, ...]:
    splits = dim_splits(layer)
    cap = max(max_model_degree, p // largest_batch_degree(p, batch))
    options = {d: _dim_degrees(layer, d, p) for d in MODEL_DIMS if d in splits}
    combos: list[dict[str, int]] = [{}]
    for r in range(1, MAX_MODEL_DIMS + 1):
        for dims in combinations([d for d in MODEL_DIMS if options.get(d)], r):
            partial: list[dict[str, int]] = [{}]
            for d in dims:
                partial = [{**c, d: k} for c in partial for k in options[d]]
            combos.extend(partial)
    seen: dict[Strategy, tuple] = {}
    for combo in combos:
        m = 1
        for k in combo.values():
            m *= k
        e = combo.get(E, 1)
        if p % m or m > cap or batch % e:
            continue
        n = largest_batch_degree(p // m, batch // e) if N in splits else 1
        degrees = dict(combo)
        if n > 1:
            degrees[N] = n
        strat = make_strategy(p, degrees)
        seen.setdefault(strat, (strat.replication, m, strat.label))
    ranked = sorted(seen, key=lambda s: seen[s])
    return tuple(t for s in ranked[:max_candidates] for t in (s, *_sequence_twin(layer, s)))


def _sequence_twin(layer: Layer, strategy: Strategy) -> tuple[Strategy, ...]:
    """The sequence-parallel variant of ``strategy`` when the layer can take it (rule 6)."""
    if H not in dim_splits(layer) or strategy.degree(H) > 1:
        return ()
    twin = replace(strategy, seq_scatter=True)
    return (twin,) if isinstance(sequence_scatter(layer, twin), tuple) else ()


def candidate_strategies(layer: Layer, p: int, batch: int, max_model_degree: int = MAX_MODEL_DEGREE,
                         max_candidates: int = MAX_CANDIDATES) -> tuple[Strategy, ...]:
    """The strategies the planner weighs for ``layer`` on ``p`` devices (module docstring rules)."""
    return _candidate_strategies(layer, p, batch, max_model_degree, max_candidates)


def algorithms(layer: Layer, recompute: bool = False, machine: Machine | None = None) -> tuple[str, ...]:
    """The kernel algorithms that can run ``layer`` (rule 7): every convolution algorithm that
    applies; an attention layer's algorithms on a ``machine`` that runs FlashAttention (``flash``
    first, its default, then ``materialized``); ``("",)`` for other ops and attention elsewhere.
    With ``recompute``, the first one recomputed too, where that saves memory (``compute.RECOMPUTE``)."""
    if layer.op == "conv2d":
        return tuple(a for a in CONV_ALGORITHMS if algorithm_applies(layer, a))
    kernels = ATTENTION_ALGORITHMS if layer.op == "attention" and machine is not None and machine.device.flash \
        else ("",)
    return kernels + ((with_recompute(kernels[0]),) if recompute and recompute_applies(layer) else ())


def candidates(layer: Layer, p: int, batch: int, max_model_degree: int = MAX_MODEL_DEGREE,
               max_candidates: int = MAX_CANDIDATES) -> tuple[tuple[Strategy, str], ...]:
    """Every (strategy, algorithm) pair for ``layer``, strategy-major."""
    algos = algorithms(layer)
    return tuple((s, a) for s in candidate_strategies(layer, p, batch, max_model_degree, max_candidates)
                 for a in algos)
