"""A lower bound on every cut of one (S, m), from one block's layers alone (pure).

The pipelined step (``costmodel.step.pipeline``) is ``sum_s T_s + (m - 1) max_s T_s + max_s O_s``.
With ``w = m + S - 1`` and each stage's bracket ``L_s <= w T_s + O_s``, weighing the stage of the
largest bracket as the slowest (:func:`planner.pipeline.interleave.lower_s` with one chunk)::

    step >= [(m - 1) max_s L_s + sum_s L_s] / w

Stage ``s``'s bracket is the objective its stage solver minimises (:mod:`planner.pipeline.stage_solver`) plus
its point-to-point sends, ``(m + S - 1)`` times per micro-batch (known exactly). It holds ``k_s``
blocks and edges cost nothing negative, so it is at least ``k_s`` times the least weighted cost of
one block's layers taken one by one (each layer its cheapest candidate, no edges), ``V(0)`` below;
the first and last stages add the least cost of the layers before and after the blocks. A block's
layers are priced as behind the bucket the backward makes last (``costmodel.comm.overlap.front_layers``:
their gradient sums hidden where the overlap hides them, never slower than in it): in a stage only
its first layers fill that bucket, and two blocks standing alone, each smaller than a bucket, would
both fill it (GPT-2's, 14 MB of bf16 weights against 25 MiB: its one-stage pairs bounded 1.3% above
the step found).

Memory tightens it: a stage's layers' memory (activations of the micro-batches it keeps, as the
search solves it: 1F1B's first stage ``min(S, m)``, its last one) plus the workspace no layer can
avoid, ``W0``, must fit the limit ``L``, so for every ``lam >= 0`` (Lagrangian duality) a stage of
``k`` blocks has::

    bracket >= g_s(k) = max over lam of [k V_s(lam) - lam (L - W0)],  V_s(lam) = sum over layers of min (cost + lam memory_s)

``g_s`` is a maximum of functions linear in ``k``, so convex; the least ``sum_s L_s`` over cuts
(``sum k_s = n``) is the least sum of the ``g_s(k_s)``, found block by block (:func:`_least_sum`),
at the balanced cut (stage sizes ``floor(n / S)`` and ``ceil(n / S)``) where every stage keeps
as many. Before any of it, :func:`_some_cut_fits` proves from each stage's least memory that no
cut fits, where none does. The least ``max_s L_s`` over cuts (:func:`_least_slowest`) is at
least the mean, more where the first and last stages' layers before and after the blocks or the
blocks' granularity (``n / S`` not whole) keep the stages apart. Interleaved 1F1B with ``V`` chunks a device (step ``m max_s T_s +
(sum_s T_s - max_s T_s) / V + max_s O_s``) has its cut fixed, ``n / S`` blocks a device, so each
device's bracket (weight ``m + (S - 1) / V``) is bounded on its own, the first and last device's
with the layers before and after the blocks, and the step by the busiest device's weighed as the
slowest (:func:`planner.pipeline.interleave.lower_s`: never below the devices' average). No cut
fits at all when ``ceil(n / S)`` blocks of least-memory layers already exceed ``L - W0``.
A pair about to be searched is bounded with the reshards between a block's layers too
(``edges``, :meth:`_Dual.tight`): a block pays at least its own. Everything else here is separable
per layer, so it costs one pricing of a block's layers, which the
stage solves that follow reuse (the builder keeps its nodes); and each layer's term is no less
than zero, so against a step held the sum over the layers priced so far, the most FLOPs first,
bounds the pair once it reaches that step, the other layers not priced (:func:`_early`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from costmodel.step.pipeline import stage_network
from networks.analysis import layer_cost
from planner.problem.build import Builder, build_with, node_keys, node_of, weighed_cost
from planner.pipeline.interleave import lower_s
from planner.pipeline.stack import MIDDLE, Stack
from planner.solvers import Edge, Problem
from planner.solvers.dp import solve_reduced

BISECTIONS = 60


@dataclass(frozen=True)
class StageBound:
    step_s: float  # no cut of this (S, m) has a shorter step
    fits: bool | None  # False: no cut fits the memory limit; None: not known (a partial bound, _early)
    #: the stages' mean bracket over the least cut, ``(1/S) sum_s L_s`` (at most ``step_s``): the
    #: bound before its slowest stage is weighed
    mean_s: float = float("inf")


def stage_bound(builder: Builder, stack: Stack, stages: int, micro_batches: int, limit: float,
                sends_s: tuple[float, ...] = (), chunks: int = 1, above: float | None = None,
                holds: tuple[float, ...] = (), edges: bool = False) -> StageBound:
    """The bound of the module docstring for ``stages`` stages and ``micro_batches`` micro-batches
    (``chunks`` model chunks a device), the stage solver's ``builder`` pricing one stage's ranks at
    one micro-batch; ``sends_s``: each stage's (device's) point-to-point seconds per micro-batch
    (none: no sends). ``above``: a step the caller holds; a bound that reaches it from part of a
    block's layers is answered as soon as it does (:func:`_early`), the other layers not priced.
    ``holds``: each stage's kept micro-batches as the search solves it (planner.pipeline.pair_search.kept),
    for the proof that no cut fits (:func:`_some_cut_fits`; none: one each). ``edges``: each block
    also pays the reshards between its layers (:meth:`_Dual.tight`): their pricing can take longer
    than the rest of the bound (12 s for one pair of llama3.1-405b on 16,384 H100s), so the search
    asks for it only of a pair it is about to search, whose stage solves price them anyway."""
    weight = micro_batches + (stages - 1) / chunks
    if above is not None and above < float("inf"):
        early = _early(builder, stack, stages, micro_batches, weight, tuple(sends_s), above)
        if early is not None:
            return early
    cost, memory, w0, acts, workspace, inner = _block(builder, stack, weight, edges)
    n = stack.n
    big = -(-n // stages)
    room = limit - w0

    least = sum(min(float(m.min()) for m in ms) for ms in memory)
    if big * least > room * (1 + 1e-9) or (holds and not _some_cut_fits(builder, stack, memory, acts, workspace, holds,
                                                                           limit)):
        return StageBound(float("inf"), False, float("inf"))
    counts = tuple(holds) or (1,) * stages
    duals = {q: _Dual(cost, memory, acts, q, room, inner) for q in sorted(set(counts))}
    sends = tuple(sends_s) or (0.0,) * stages
    small, wide = n // stages, n % stages  # the balanced cut: ``wide`` stages of ``small + 1`` blocks
    if len(duals) == 1:
        one = duals[counts[0]]
        total = wide * one.stage(small + 1) + (stages - wide) * one.stage(small)
    else:  # each stage its own dual: the least sum over cuts of their convex bounds (_least_sum)
        for dual in duals.values():
            dual.stage(small)
            dual.stage(small + 1)
        total = _least_sum([duals[q].near for q in counts], n)
    first, last = _ends(builder, stack, weight, stages)
    total += first + last + weight * sum(sends)
    mean = float(total) / stages
    if stages == 1:
        return StageBound(mean, True, mean)
    extra = [weight * send for send in sends]
    extra[0], extra[-1] = extra[0] + first, extra[-1] + last
    if chunks > 1:  # the cut is fixed: each device's bracket, the busiest weighed as the slowest
        near = duals[counts[0]].near
        return StageBound(max(mean, lower_s([near(small) + e for e in extra], micro_batches, chunks)), True, mean)
    slowest = _least_slowest([duals[q].near for q in counts], extra, n,
                             range(max(1, small - SPAN), big + SPAN + 1))
    return StageBound(max(mean, float((micro_batches - 1) * slowest + total) / weight), True, mean)


class _Dual:
    """A stage's dual bound ``g(k) = max over lam of [k V(lam) - lam (L - W0)]`` (module docstring)
    for a stage holding ``kept`` micro-batches' activations (each layer's memory ``memory + (kept -
    1) activations``, as the stage solver counts it): the first stage of 1F1B holds ``min(S, m)``,
    so its blocks need more memory, or recomputation, than the last stage's, which holds one."""

    def __init__(self, cost, memory, acts, kept: float, room: float, edges: tuple | None = None):
        self.cost, self.room, self.edges = cost, room, edges
        self.memory = [tuple(m + (kept - 1) * a for m, a in zip(ms, acs)) for ms, acs in zip(memory, acts)]
        self._flat = _Forms(cost, self.memory)
        self.free, self.free_mem = self.value(0.0)
        #: (lam, V(lam)) of each multiplier that proved a stage's bound, V with the block's edges
        #: where they are known (:meth:`tight`)
        self.lines = [(0.0, self.tight(0.0, self.free))]

    def value(self, lam: float) -> tuple[float, float]:
        """``V(lam)`` and the memory of the layers' choices attaining it."""
        return self._flat.value(lam)

    def tight(self, lam: float, v: float) -> float:
        """``V(lam)`` with the reshards between a block's layers (their edges, :func:`_inner_edges`):
        the least over the block's strategies of ``cost + lam memory`` plus its edges, each layer
        a strategy at its least candidate in either form (a reshard depends on the strategies
        alone), solved exactly (planner.solvers); never below ``v``, the value without the edges;
        ``v`` where the edges are not known. A block of any stage pays at least its own
        edges (those to the next block cost no less than nothing), so ``k`` times it still bounds
        a stage of ``k`` blocks: the reshards inside a block of llama3.1-405b on 4,096 H100s are 7%
        of its cost, which the bound without them left out."""
        if self.edges is None:
            return v
        strategy_of, edges = self.edges
        nodes = []
        for costs, mems, forms in zip(self.cost, self.memory, strategy_of):
            node = np.full(int(max(f.max() for f in forms)) + 1, np.inf)
            for c, m, f in zip(costs, mems, forms):  # each strategy its least candidate in either form
                np.minimum.at(node, f, c + lam * m)
            nodes.append(node)
        zeros = tuple(np.zeros_like(n) for n in nodes)
        problem = Problem(tuple(str(j) for j in range(len(nodes))), tuple(nodes), zeros, zeros, edges, None)
        return max(v, float(solve_reduced(problem).objective))

    def stage(self, k: int) -> float:
        """The least objective of a stage of ``k`` blocks that fits (its dual bound)."""
        free = self.lines[0][1]
        if k * self.free_mem <= self.room:
            return k * free
        got, lam, v = _dual(self.value, k, self.room, self.free)
        tight = self.tight(lam, v)  # at the multiplier the bisection found without the edges
        self.lines.append((lam, tight))
        return max(k * free, got, k * tight - lam * self.room)

    def near(self, k: int) -> float:
        """A bound on a stage of ``k`` blocks from the multipliers already tried (``k V(lam) - lam
        (L - W0)`` holds for every ``lam``): no bisection of its own; convex in ``k``."""
        return max(k * v - lam * self.room for lam, v in self.lines)


class _Forms:
    """The layers' forms (each a cost and a memory array) laid end to end, so ``V(lam)`` is a few
    array operations over all of them rather than a few per form (the bounds call it thousands of
    times a search). Each layer takes the form of least ``min(cost + lam memory)``, ties to the
    least memory at its first minimum, and the sums run layer by layer in order: the same floats
    as the loop over layers and forms it replaces."""

    def __init__(self, cost, memory):
        lengths = [len(c) for costs in cost for c in costs]
        self.cost = np.concatenate([c for costs in cost for c in costs]).astype(np.float64)
        self.memory = np.concatenate([m for mems in memory for m in mems]).astype(np.float64)
        self.starts = np.cumsum([0] + lengths[:-1])
        self.lengths = np.array(lengths)
        forms = [len(costs) for costs in cost]
        self.layer_of = np.repeat(np.arange(len(forms)), forms)  # each form's layer
        self.layer_starts = np.cumsum([0] + forms[:-1])

    def value(self, lam: float) -> tuple[float, float]:
        v = self.cost + lam * self.memory
        least = np.minimum.reduceat(v, self.starts)  # each form's least
        hits = np.flatnonzero(v == np.repeat(least, self.lengths))
        at = self.memory[hits[np.searchsorted(hits, self.starts)]]  # memory at each form's first least
        layer_least = np.minimum.reduceat(least, self.layer_starts)
        mem = np.where(least == layer_least[self.layer_of], at, np.inf)
        layer_mem = np.minimum.reduceat(mem, self.layer_starts)  # ties between forms: the least memory
        total, held = 0.0, 0.0
        for t, m in zip(layer_least.tolist(), layer_mem.tolist()):
            total, held = total + t, held + m
        return total, held


def _least_sum(stages, n: int) -> float:
    """The least ``sum_s f_s(k_s)`` over cuts (every ``k_s >= 1``, ``sum_s k_s = n``) of convex
    ``f_s`` (one a stage): from one block each, each next block to the stage it costs least
    (a separable convex allocation, which this greedy order solves exactly)."""
    ks = [1] * len(stages)
    total = sum(f(1) for f in stages)
    for _ in range(n - len(stages)):
        step, s = min((f(k + 1) - f(k), s) for s, (f, k) in enumerate(zip(stages, ks)))
        ks[s] += 1
        total += step
    return total


#: the stage sizes around ``n / S`` whose bounds the least slowest stage is found from (others: 0 below,
#: and every larger one at least the largest's)
SPAN = 2


def _least_slowest(stages, extra: list[float], n: int, ks: range) -> float:
    """At most the least over cuts of ``max_s [D_s(k_s) + extra_s]``, ``D_s(k)`` stage ``s``'s dual
    bound of ``k`` blocks (increasing in ``k``) and ``stages[s](k) <= D_s(k)`` a value of it (from
    the multipliers the balanced cut's stages tried).

    For sizes in ``ks``, ``h_s(k)``, the most ``stages[s]`` takes up to ``k`` (0 below ``ks``), is
    at most ``D_s(k)`` and grows with ``k``; a cut whose sizes are at most ``ks[-1]`` has ``max_s
    [h_s(k_s) + extra_s] = t`` for one of the values ``h_s(k) + extra_s``, and each stage then holds
    at most ``K_s(t)``, the largest ``k`` with ``h_s(k) + extra_s <= t``: the least such ``t`` with
    ``sum_s K_s(t) >= n`` is at most its slowest stage. A cut with a larger stage has one of at
    least ``min_s [stages[s](ks[-1] + 1) + extra_s]``."""
    hs = []
    for f in stages:
        h, most = {}, 0.0
        for k in ks:
            most = max(most, f(k))
            h[k] = most
        hs.append(h)
    tail = min(f(ks[-1] + 1) + e for f, e in zip(stages, extra)) if ks[-1] + len(extra) - 1 < n else float("inf")

    def room(t: float) -> int:  # sum_s K_s(t): the most blocks a cut with every stage <= t holds
        total = 0
        for h, e in zip(hs, extra):
            fit = [k for k in ks if h[k] + e <= t]
            if fit:
                total += fit[-1]
            elif e <= t:
                total += ks.start - 1
            else:
                return 0
        return total

    for t in sorted({v + e for h, e in zip(hs, extra) for v in h.values()}):
        if t >= tail:
            break
        if room(t) >= n:
            return t
    return tail


def _dual(value, k: int, room: float, free: float) -> tuple[float, float, float]:
    """``max over lam of k V(lam) - lam room``: concave, so bisect on the sign of its slope
    ``k * memory(lam) - room``; every ``lam`` tried is a valid bound, the best is kept (with its
    ``lam`` and ``V(lam)``, a bound for other ``k`` too)."""
    best, at = k * free, (0.0, free)
    lo, hi = 0.0, max(free, 1e-30) / max(room, 1.0)
    for _ in range(BISECTIONS):
        v, mem = value(hi)
        if k * v - hi * room > best:
            best, at = k * v - hi * room, (hi, v)
        if k * mem <= room:
            break
        lo, hi = hi, hi * 4
    for _ in range(BISECTIONS):
        lam = (lo + hi) / 2
        v, mem = value(lam)
        if k * v - lam * room > best:
            best, at = k * v - lam * room, (lam, v)
        if k * mem > room:
            lo = lam
        else:
            hi = lam
    return best, *at


def _early(builder: Builder, stack: Stack, stages: int, micro_batches: int, weight: float,
           sends: tuple[float, ...], above: float) -> StageBound | None:
    """The bound of the module docstring without the memory limit and the layers before and after
    the blocks, from a block's layers priced one at a time, the most FLOPs first: once the layers
    priced make it reach ``above``, that bound (whether anything fits not known: None); None when
    all of them leave it below (the whole bound is then computed, on the nodes priced here). Every
    term left out is no less than zero, so each partial sum is a lower bound of the whole one, and
    a pair far slower than the step held is bounded out on its largest layers' pricing alone.

    The step is at least the stages' mean bracket under 1F1B (``sum T + (m - 1) max T + max O``)
    and interleaved (``(m - 1/V) max T + sum T / V + max O``, the devices' brackets weighed ``m +
    (S - 1) / V``) alike. Each layer counts first at its least per-micro-batch seconds under any ZeRO
    stage (``Builder.micro_floor``, no once-a-step part: shared by every ZeRO stage of the call), so
    a later ZeRO stage's pair already slower on them than the step held is bounded out without
    pricing its layers under that stage (GPT-3 175B on 1,024 A100s: the three ZeRO stages after
    ZeRO-3 bounded in about a third of the time); then at its node's least weighted cost."""
    for step, mean in partial_bounds(builder, stack, stages, weight, sends):
        if step >= above:
            return StageBound(step, None, mean)
    return None


def partial_bounds(builder: Builder, stack: Stack, stages: int, weight: float,
                   sends: tuple[float, ...]) -> Iterator[tuple[float, float]]:
    """The partial bounds :func:`_early` weighs, in its order, each ``(step, mean bracket)``."""
    per = len(stack.blocks[0])
    two, _ = stage_network(stack.network, stack.layers(0, 2, MIDDLE), 0)
    keys = node_keys(builder, two, last_bucket=False)
    order = sorted(range(per), key=lambda j: -sum(layer_cost(two.layers[j], builder.batch).flops))
    fixed = weight * sum(sends)
    for least in (lambda i: weight * builder.micro_floor(keys[i]),  # whatever the ZeRO stage: shared
                  lambda i: float(weighed_cost(node_of(builder, keys[i]), weight).min())):
        block = 0.0
        for j in order:
            block += min(least(i) for i in {j, j + per})
            total = stack.n * block + fixed  # sum_s L_s at least
            yield total / stages, total / stages  # the step is at least the stages' (devices') mean bracket


def _block(builder: Builder, stack: Stack, weight: float, edges: bool = False):
    """Per layer of a block, its (cost, memory) arrays in each form it takes inside a stage (a
    block's last layer has a reader only when another block follows; behind the last bucket, module
    docstring), and the workspace no layer of a stage can avoid."""
    per = len(stack.blocks[0])
    two, _ = stage_network(stack.network, stack.layers(0, 2, MIDDLE), 0)  # blocks 0 and 1, no other layer
    built = build_with(builder, two, None, edges=False, weight=weight, last_bucket=False)
    p = built.problem
    cost = [(p.node_cost[j], p.node_cost[j + per]) for j in range(per)]
    memory = [(p.node_memory[j], p.node_memory[j + per]) for j in range(per)]
    acts = [(built.activations[j], built.activations[j + per]) for j in range(per)]
    workspace = [(p.node_workspace[j], p.node_workspace[j + per]) for j in range(per)]
    w0 = max(float(w.min()) for w in p.node_workspace)
    return cost, memory, w0, acts, workspace, _inner_edges(builder, two, built, per, weight) if edges else None


def _inner_edges(builder: Builder, two, built, per: int, weight: float) -> tuple:
    """The reshards between the first block's layers, by strategy: each layer's candidates' strategy
    (its index in the layer's strategies, in each of its two forms), and each edge between the
    block's layers as a matrix over the two layers' strategies (a reshard depends on the
    strategies alone; weighted as the stage solver weighs it)."""
    keys = node_keys(builder, two, last_bucket=False)
    strategy_of = []
    for j in range(per):
        index = {strat: i for i, strat in enumerate(node_of(builder, keys[j]).strategies)}
        strategy_of.append(tuple(np.array([index[strat] for strat, _ in built.candidates[i]]) for i in (j, j + per)))
    with_edges = build_with(builder, two, None, edges=True, weight=weight, last_bucket=False).problem
    edges = []
    for e in with_edges.edges:
        if e.src < per and e.dst < per:
            first = [np.unique(strategy_of[x][0], return_index=True)[1] for x in (e.src, e.dst)]
            edges.append(Edge(e.src, e.dst, e.cost[np.ix_(first[0], first[1])]))
    return tuple(strategy_of), tuple(edges)


def _some_cut_fits(builder: Builder, stack: Stack, memory, acts, workspace, holds: tuple[float, ...],
                   limit: float) -> bool:
    """False when no cut of the blocks over ``len(holds)`` stages fits the memory limit, stage ``s``
    holding ``holds[s]`` micro-batches' activations (each layer's memory ``memory + (holds[s] - 1)
    activations``, as the stage solver counts it), the first stage the layers before the blocks and
    the last those after them. A stage's memory is its layers' sum plus the largest workspace of
    its layers' choices (planner.solvers.problem.memory_of): at a largest workspace ``W`` each
    layer takes at least its least memory among its candidates of workspace ``W`` or less, so stage
    ``s`` holds at most ``K_s`` blocks, the most over ``W`` of those that fit with its end layers
    (each layer its least in either form, :func:`_block`); a cut needs ``sum_s K_s >= n`` and every
    ``K_s >= 1``. Where the stage solves would learn it cut by cut, this says at once that none
    fits: GPT-3 175B on 64 H100s under ZeRO-3 in 8 stages x 128 micro-batches (the first stage holds
    8 micro-batches' activations) took 40 s of stage solves."""
    n, stages = stack.n, len(holds)
    ends = [list(stack.before) + list(stack.after)] if stages == 1 else [list(stack.before), list(stack.after)]
    nets = [stage_network(stack.network, layers, 0)[0] if layers else None for layers in ends]
    block_forms = [list(zip(ms, acs, ws)) for ms, acs, ws in zip(memory, acts, workspace)]
    ends_of = [[[(v[:, 1], v[:, 4], v[:, 2])] for v in (node_of(builder, key).vals for key in node_keys(builder, net))]
               if net is not None else [] for net in nets]
    most_of: dict[tuple[int, float], int] = {}  # (end, kept) -> K_s: the middle stages share one
    total = 0
    for s, k in enumerate(holds):
        end = 0 if s == 0 else len(nets) - 1 if s == stages - 1 else -1
        if (end, k) not in most_of:
            most_of[(end, k)] = _most_blocks(block_forms, ends_of[end] if end >= 0 else [], k, limit, n)
        most = most_of[(end, k)]
        if most < 1:
            return False
        total += most
    return total >= n


def _most_blocks(block_forms, end_layers, kept: float, limit: float, n: int) -> int:
    """The most blocks (at most ``n``) a stage holding ``kept`` micro-batches fits with its
    ``end_layers`` (:func:`_some_cut_fits`): over every largest workspace, each layer its least
    memory among its candidates of that workspace or less."""
    levels = np.unique(np.concatenate([w for forms in block_forms + end_layers for _, _, w in forms]))
    block = _least_at(block_forms, kept, levels)
    fixed = _least_at(end_layers, kept, levels) if end_layers else np.zeros(len(levels))
    left = limit * (1 + 1e-9) - levels - fixed
    with np.errstate(divide="ignore", invalid="ignore"):
        most = np.where(left < 0, 0.0, np.where(block > 0, np.floor(left / block), n))
    return int(min(np.nanmax(most), n))


def _least_at(layers, kept: float, levels: np.ndarray) -> np.ndarray:
    """At each largest workspace in ``levels``, the sum over ``layers`` (each a list of forms:
    (memory, activations, workspace) arrays over its candidates) of its least memory holding
    ``kept`` micro-batches among candidates of that workspace or less, in its cheapest form (inf
    where a layer has none)."""
    out = np.zeros(len(levels))
    for forms in layers:
        best = np.full(len(levels), np.inf)
        for mem, act, ws in forms:
            order = np.argsort(ws, kind="stable")
            least = np.minimum.accumulate((mem + (kept - 1) * act)[order])
            at = np.searchsorted(ws[order], levels, side="right") - 1
            best = np.minimum(best, np.where(at >= 0, least[np.maximum(at, 0)], np.inf))
        out += best
    return out


def _ends(builder: Builder, stack: Stack, weight: float, stages: int) -> tuple[float, float]:
    """The least weighted cost of the layers before the first block and of those after the last, one
    by one (on two stages when there are several: a tied head there holds its copy of the table;
    on one stage all of them, counted as before). A layer after the blocks is priced in the form it
    takes standing alone and in the form it takes behind a block, the least of the two: alone, the
    first layers with weights fill the bucket the backward makes last (``costmodel.comm.overlap.front_layers``:
    their gradient sums and ZeRO-3 gathers exposed), behind a block the block's layers fill it, so
    a tied head of GPT-3 175B counted as exposed would put the bound of 32 stages x 1,024
    micro-batches on 64 H100s (61.9 s) above its optimum (60.8 s)."""
    parts = [list(stack.before) + list(stack.after), []] if stages == 1 else [list(stack.before), list(stack.after)]
    after = {layer.name for layer in stack.after}
    out = []
    for layers in parts:
        if not layers:
            out.append(0.0)
            continue
        net, _ = stage_network(stack.network, layers, 0)
        total = 0.0
        for layer, (sig, readers, saved, front) in zip(net.layers, node_keys(builder, net)):
            forms = {front, False} if layer.name in after else {front}
            total += min(float(weighed_cost(node_of(builder, (sig, readers, saved, f)), weight).min()) for f in forms)
        out.append(total)
    return out[0], out[1]
