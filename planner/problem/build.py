"""From a network to the solver's :class:`~planner.solvers.Problem` (pure).

Nodes are layers; a node's candidates are its (strategy, algorithm) pairs
(:mod:`costmodel.layer.candidates`). The numbers are exactly those :func:`costmodel.step.prediction.predict_step`
adds up, so the solver's objective for a choice *is* the predicted step time of that plan:

* node cost = ``LayerEstimate.total_s`` (compute, collectives, update, and the gradient sums of
  an output several layers read);
* node memory = ``Memory.persistent``, node workspace = ``Memory.transient`` (the step's peak is
  their sum plus the largest transient, as in the solver's memory constraint);
* edge cost = forward + backward reshard of ``edge_estimate`` for every candidate pair.

A pipeline stage (:mod:`planner.pipeline.stage_solver`) weighs them differently: its per-micro-batch part
(everything but the gradient sync and the update, and every edge) ``weight`` times, the once-a-step
part once, and it keeps the activations of ``kept`` micro-batches (``costmodel.step.pipeline``).

Sharing makes it fast: layers with the same op, parameters and shapes (ResNet blocks repeat) share
their candidates, their estimates and the cost matrices of their edges; the matrices are built per
distinct strategy (algorithms share them), and all reshards are evaluated in one vectorised batch
(:mod:`costmodel.layer.edge_table`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.parallel.axes import H
from costmodel.layer.candidates import MAX_CANDIDATES, MAX_MODEL_DEGREE, algorithms, candidate_strategies
from costmodel.compute.model import ComputeModel
from costmodel.calls.algorithms import is_recomputed, kernel_algorithm, recomputed_comms, resolve_algorithm
from costmodel.layer.comms import framework_exchange, kv_comms
from costmodel.layer.cost import (LayerEstimate, floor_s, framework_kept_bytes, layer_estimate, own_kept_bytes,
                                  passes_s, shard_of, shard_parts)
from costmodel.layer.replaced import replaced
from costmodel.parallel.shard import input_layout, output_layout, weight_layouts
from costmodel.parallel.layout import Layout
from costmodel.machine.model import Machine
from costmodel.choices.optimizer import Optimizer
from costmodel.comm.overlap import EXPERT_PURPOSES, front_layers, overlapped, resolve_overlap
from costmodel.layer.edge_table import LayoutTable, reshard_times_ids
from costmodel.parallel.strategy import Strategy
from costmodel.layer.tied import head_sum_s, table_layout, tie_mismatch, ties
from networks.analysis import consumers, saved_outputs
from networks.ir import DTYPE_BYTES, Layer, Network
from planner.problem.priced_layers import PricedLayers
from planner.solvers import Edge, Problem


def derive_estimate(base: LayerEstimate, layer: Layer, strat: Strategy, batch: int, compute: ComputeModel,
                    algorithm: str, machine: Machine, rule: str = "mpi", overlap=None,
                    front: bool = False, memo: dict | None = None) -> LayerEstimate:
    """``layer_estimate`` for another algorithm, from one made with a kernel algorithm (not
    recomputed) for the same strategy: only the compute passes, the workspace, the op's own kept
    bytes, under recomputation its forward collectives run again, and an attention layer's keys
    and values over a split sequence (their ring hides under the core: not :func:`derivable` from
    the base's) depend on it (``layer_cost.passes_s``, ``own_kept_bytes``, ``recomputed_comms``,
    ``kv_comms``). ``memo``: the collectives, shards and these per-algorithm parts already priced
    on ``machine`` (``costmodel.layer.comms.group_time``, :func:`_algorithm_shard`)."""
    algorithm = resolve_algorithm(layer, algorithm, machine)
    fwd, bwd_data, bwd_weights, kept_by, kv, workspace = _algorithm_shard(base.algorithm, layer, strat, batch, compute,
                                                                          algorithm, machine, rule, memo)
    kept = base.memory.activations
    if kept_by is not None:
        kept += kept_by
    comms = base.comms if kv is None else _with_kv(base.comms, kv)  # its ring hides under this core
    comms = comms + tuple(recomputed_comms(comms)) if is_recomputed(algorithm) else comms
    # what hides under the passes changes with them (costmodel.comm.overlap, from the link times kept)
    comms = overlapped(comms, layer, {"fwd": fwd, "bwd": bwd_data + bwd_weights + base.grad_sum_s},
                       resolve_overlap(overlap, machine), front)
    return replaced(base, algorithm=algorithm, fwd_compute_s=fwd, bwd_data_s=bwd_data, bwd_weights_s=bwd_weights,
                    comms=comms, memory=replaced(base.memory, workspace=workspace, activations=kept))


def _with_kv(comms: tuple, kv: tuple) -> tuple:
    """``comms`` with its keys and values over a split sequence (purpose ``kv``) replaced by ``kv``,
    another algorithm's, in their place."""
    at = next(i for i, c in enumerate(comms) if c.purpose == "kv")
    return comms[:at] + kv + tuple(c for c in comms[at:] if c.purpose != "kv")


def _algorithm_shard(base: str, layer: Layer, strat: Strategy, batch: int, compute: ComputeModel, algorithm: str,
                     machine: Machine, rule: str, memo: dict | None) -> tuple:
    """What :func:`derive_estimate` prices of ``algorithm`` on a layer's shard, whatever the
    optimiser: its passes and keys and values (:func:`_algorithm_passes`), the change in kept
    activations from those of the ``base`` algorithm (None: none) and its workspace; kept in
    ``memo`` when given, by these arguments."""
    key = ("derive", base, layer, strat, batch, algorithm, rule)
    got = None if memo is None else memo.get(key)
    if got is not None:
        return got
    fwd, bwd_data, bwd_weights, kv = _algorithm_passes(layer, strat, batch, compute, algorithm, machine, rule, memo)
    local = shard_of(layer, strat, batch, memo)
    kept_by = None
    if layer.op == "attention" or is_recomputed(algorithm) != is_recomputed(base):
        kept_by = (own_kept_bytes(local, algorithm) + framework_kept_bytes(compute, local, algorithm)
                   - own_kept_bytes(local, base) - framework_kept_bytes(compute, local, base))
    got = (fwd, bwd_data, bwd_weights, kept_by, kv, compute.workspace_bytes(local, kernel_algorithm(algorithm)))
    if memo is not None:
        memo[key] = got
    return got


def _algorithm_passes(layer: Layer, strat: Strategy, batch: int, compute: ComputeModel, algorithm: str,
                      machine: Machine, rule: str, memo: dict | None) -> tuple:
    """The part of :func:`_algorithm_shard` a layer's time needs (``Builder.micro_floor`` prices no
    memory): ``algorithm``'s passes on the shard, and its keys and values over a split sequence
    where they are not :func:`derivable` (None: the base's serve); kept in ``memo`` when given."""
    key = ("derive-passes", layer, strat, batch, algorithm, rule)
    got = None if memo is None else memo.get(key)
    if got is not None:
        return got
    local = shard_of(layer, strat, batch, memo)
    fwd, bwd_data, bwd_weights = passes_s(compute, local, algorithm)
    kv = None
    if not derivable(layer, strat):
        kv = tuple(kv_comms(layer, strat, local, machine, rule, kernel_algorithm(algorithm),
                            (fwd, bwd_data - (fwd if is_recomputed(algorithm) else 0.0)), memo,
                            framework_exchange(compute)))
    got = (fwd, bwd_data, bwd_weights, kv)
    if memo is not None:
        memo[key] = got
    return got


def derivable(layer: Layer, strat: Strategy) -> bool:
    """Whether a layer's collectives are those of every algorithm: not for attention over a split
    sequence, whose ring of keys and values hides under its core (:func:`derive_estimate` prices
    them again)."""
    return not (layer.op == "attention" and strat.degree(H) > 1)


def signature(layer: Layer) -> Layer:
    """The layer without its name and inputs: equal for layers that cost the same."""
    return layer.unnamed()


@dataclass(frozen=True, eq=False)
class Built:
    """The problem and what its candidate indices mean.

    ``candidates[i][c]`` is the (strategy, algorithm) of candidate ``c`` of layer ``i``;
    ``fastest[i]`` are the candidate indices that keep, for each strategy, its fastest algorithm
    (ties: less workspace, then catalogue order) — the unconstrained optimum lies among them.
    """

    problem: Problem
    candidates: tuple[tuple[tuple[Strategy, str], ...], ...]
    fastest: tuple[np.ndarray, ...]
    distinct_layers: int
    distinct_edges: int
    reshard_pairs: int
    once: tuple[np.ndarray, ...] = ()  # each candidate's once-a-step seconds (gradient sync and update)
    activations: tuple[np.ndarray, ...] = ()  # each candidate's kept activation bytes (one micro-batch)

    def restrict(self, keep: tuple[np.ndarray, ...]) -> Problem:
        """The problem with only candidates ``keep[i]`` of each node."""
        return self.problem.restricted(keep)


class Builder:
    """What one (batch, devices, machine, optimiser) pricing shares across problems: the distinct
    nodes and edge matrices it has priced (a pipeline stage search builds many stages at one micro-batch)."""

    def __init__(self, batch: int, p: int, machine: Machine, compute: ComputeModel, optimizer: Optimizer | str,
                 rule: str = "mpi", max_model_degree: int = MAX_MODEL_DEGREE, max_candidates: int = MAX_CANDIDATES,
                 recompute: bool = False, overlap=None, priced: PricedLayers | None = None):
        self.batch, self.p, self.machine, self.compute = batch, p, machine, compute
        #: what the planning call priced on this machine and compute model, shared by its builders
        #: (planner.problem.priced_layers); None: everything priced afresh
        self.priced = priced
        self.overlap = resolve_overlap(overlap, machine)  # costmodel.comm.overlap: None, the machine's default
        self.optimizer, self.rule = optimizer, rule
        self.max_model_degree, self.max_candidates = max_model_degree, max_candidates
        self.recompute = recompute
        self.layout_ids: dict[Layout, int] = {}
        self.layouts: list[Layout] = []
        self.nodes: dict[tuple, _Node] = {}
        #: each edge pattern's cost matrix (:func:`_edges`): reshards depend on the layouts alone, not
        #: on the optimiser, so the builders of one planning call at one (batch, ranks) share them
        #: (the ZeRO stages' stage solves of one pipeline pair)
        self.matrices: dict[tuple, np.ndarray] = {} if priced is None else priced.matrices.setdefault(
            (batch, p, max_model_degree, max_candidates), {})
        #: asked while reshards are priced; True raises costmodel.layer.edge_table.PricingStopped (a
        #: search's deadline: pricing one large stage's edges can take longer than the whole bound)
        self.stop = None
        #: a node's expert all-to-alls hidden under ``+experts`` (:meth:`hidden_experts`); the planning call's
        self.hidden: dict[tuple, float] = {} if priced is None else priced.hidden

    def strategies(self, sig: Layer) -> tuple[Strategy, ...]:
        return candidate_strategies(sig, self.p, self.batch, self.max_model_degree, self.max_candidates)

    def estimates(self, sig: Layer, strat: Strategy, algos: tuple[str, ...],
                  consumers: int = 1, saved: bool = True,
                  front: bool = False) -> list[tuple[float, float, float, float, float]]:
        """(total_s, persistent bytes, transient bytes, once-a-step seconds, activation bytes) of each
        algorithm under one strategy.

        ``layer_estimate`` runs once; the other algorithms change only the three compute passes and
        the workspace, so they reuse its collectives and memory (``derive_estimate``). Each answer is
        kept in ``priced`` under every argument it depends on, for the builders after this one.
        """
        key = (sig, strat, algos, consumers, saved, front, self.batch, self.optimizer, self.rule, self.overlap)
        got = None if self.priced is None else self.priced.estimates.get(key)
        if got is not None:
            return got
        memo = None if self.priced is None else self.priced.collectives

        def estimate(algorithm: str) -> LayerEstimate:
            return layer_estimate(sig, strat, self.batch, self.machine, self.compute, algorithm, self.optimizer,
                                  self.rule, consumers, saved, self.overlap, front, memo=memo)

        base = estimate(algos[0])
        ests = [base] + [derive_estimate(base, sig, strat, self.batch, self.compute, a, self.machine, self.rule,
                                         self.overlap, front, memo) for a in algos[1:]]
        if self.overlap.experts:  # the all-to-alls one micro-batch runs alone (hidden_experts)
            for a, e in zip(algos, ests):
                self.hidden[(sig, strat, a, consumers, saved, front, self.batch, self.optimizer, self.rule,
                             self.overlap)] = _hidden(e)
        got = [(e.total_s, float(e.memory.persistent), float(e.memory.transient), e.grad_sync_s + e.update_s,
                float(e.memory.activations)) for e in ests]
        if self.priced is not None:
            self.priced.estimates[key] = got
        return got

    def hidden_experts(self, key: tuple, strat: Strategy, algorithm: str) -> float:
        """The expert all-to-alls of one forward and one backward of node ``key`` (:func:`node_keys`)
        under ``strat`` and ``algorithm`` that ``+experts`` hides under another micro-batch's
        opposite pass (their link time less their exposed time): what a step of one micro-batch runs
        alone (``StepPrediction.unpaired_expert_s``). 0 where nothing is hidden. Recorded by
        :meth:`estimates` when the node was priced, in the same planning call's ``priced`` as its rows."""
        if not self.overlap.experts:
            return 0.0
        sig, readers, saved, front = key
        return self.hidden[(sig, strat, algorithm, readers, saved, front, self.batch, self.optimizer, self.rule,
                            self.overlap)]

    def micro_floor(self, key: tuple) -> float:
        """No candidate of node ``key`` (:func:`node_keys`) has per-micro-batch seconds below this,
        under any optimiser and ZeRO stage (``costmodel.layer.cost.micro_floor_s``, the least over
        its strategies and algorithms); kept in ``priced`` by what it depends on, so the ZeRO
        stages of one planning call share it."""
        memo_key = self._floor_key(key)
        got = None if self.priced is None else self.priced.floors.get(memo_key)
        if got is None:
            sig = key[0]
            algos = algorithms(sig, self.recompute, self.machine)
            got = min(min(self._floors(s, algos, *key)) for s in self.strategies(sig))
            if self.priced is not None:
                self.priced.floors[memo_key] = got
        return got

    def _floor_key(self, key: tuple) -> tuple:
        """What a node's floor depends on besides the optimiser (its candidates and their pricing)."""
        return key, self.batch, self.p, self.recompute, self.max_model_degree, self.max_candidates, self.rule, \
            self.overlap

    def _floors(self, strat: Strategy, algos: tuple[str, ...], sig: Layer, readers: int, saved: bool,
                front: bool) -> list[float]:
        """``micro_floor_s`` of each algorithm under one strategy, the others' from the first's
        collectives as :func:`derive_estimate` makes their estimates (the same numbers, at the
        cost of their passes)."""
        memo = None if self.priced is None else self.priced.collectives
        base = resolve_algorithm(sig, algos[0], self.machine)
        fwd, bwd_data, bwd_weights, comms, grad_sum, dispatch = shard_parts(
            sig, strat, self.batch, self.machine, self.compute, base, self.rule, readers, saved, memo)
        out = [floor_s(comms, sig, (fwd, bwd_data, bwd_weights), grad_sum, dispatch, base, self.overlap,
                       self.machine, front)]
        for algorithm in algos[1:]:
            algorithm = resolve_algorithm(sig, algorithm, self.machine)
            fwd, bwd_data, bwd_weights, kv = _algorithm_passes(sig, strat, self.batch, self.compute, algorithm,
                                                               self.machine, self.rule, memo)
            own = comms if kv is None else _with_kv(comms, kv)  # as derive_estimate
            out.append(floor_s(own, sig, (fwd, bwd_data, bwd_weights), grad_sum, dispatch, algorithm, self.overlap,
                               self.machine, front))
        return out

    def layout_id(self, layout: Layout) -> int:
        got = self.layout_ids.get(layout)
        if got is None:
            got = self.layout_ids[layout] = len(self.layouts)
            self.layouts.append(layout)
        return got


def _hidden(est: LayerEstimate) -> float:
    """The expert all-to-alls of ``est``'s forward and backward that ``+experts`` hides (link time
    less exposed time), as ``costmodel.comm.overlap.hidden_expert_s`` sums them over a step's layers."""
    return sum(c.link_time - c.seconds for c in est.comms if c.purpose in EXPERT_PURPOSES and c.phase in ("fwd", "bwd"))


def build_problem(net: Network, batch: int, p: int, machine: Machine, compute: ComputeModel,
                  memory_limit: float | None, optimizer: Optimizer | str = "momentum", rule: str = "mpi",
                  max_model_degree: int = MAX_MODEL_DEGREE, max_candidates: int = MAX_CANDIDATES,
                  edges: bool = True, recompute: bool = False) -> Built:
    """The planning problem of ``net`` at ``batch`` on ``p`` devices of ``machine``
    (``edges=False``: nodes only, e.g. to ask how much memory a plan needs at least; ``recompute``:
    layers that keep internals may also recompute them, ``costmodel.calls.algorithms.RECOMPUTE``)."""
    b = Builder(batch, p, machine, compute, optimizer, rule, max_model_degree, max_candidates, recompute)
    return build_with(b, net, memory_limit, edges)


def build_with(b: Builder, net: Network, memory_limit: float | None, edges: bool = True, weight: float = 1.0,
               kept: float | tuple[float, ...] = 1, once_weight: float = 1.0,
               extra_once: dict | None = None, last_bucket: bool = True, alone: bool = False) -> Built:
    """:func:`build_problem` on ``b``'s pricing (reusing what it priced before): the per-micro-batch
    costs ``weight`` times, the once-a-step costs ``once_weight`` times, the activations ``kept``
    times (module docstring; a tuple: each layer's own count, its chunk's under interleaving);
    ``extra_once``: layer name -> seconds once a step under a strategy, added to that layer's
    candidates (a pipeline's tied table summed between two stages); ``last_bucket``: as
    :func:`node_keys`; ``alone``: the step is one micro-batch, whose expert all-to-alls ``+experts``
    would hide under another's opposite pass run alone (:meth:`Builder.hidden_experts`, once a step)."""
    sigs = [signature(layer) for layer in net.layers]
    keys = node_keys(b, net, last_bucket)
    nodes = [node_of(b, key) for key in keys]
    edge_list, distinct_edges, pairs = _edges(b, net, sigs, nodes, edges, weight)
    cost = tuple(weighed_cost(n, weight, once_weight) for n in nodes)
    counts = kept if isinstance(kept, tuple) else (kept,) * len(nodes)  # per layer (interleaved chunks)
    memory = tuple(n.vals[:, 1] if k == 1 else n.vals[:, 1] + (k - 1) * n.vals[:, 4] for n, k in zip(nodes, counts))
    if alone and b.overlap.experts:
        cost = tuple(c + once_weight * np.array([b.hidden_experts(key, strat, a) for strat, a in n.candidates])
                     for c, n, key in zip(cost, nodes, keys))
    if extra_once:
        cost = tuple(c + once_weight * np.array([extra_once[layer.name](s) for s, _ in n.candidates])
                     if layer.name in extra_once else c for c, n, layer in zip(cost, nodes, net.layers))
    problem = Problem(tuple(layer.name for layer in net.layers), cost, memory, tuple(n.vals[:, 2] for n in nodes),
                      edge_list, memory_limit)
    return Built(problem, tuple(n.candidates for n in nodes), tuple(n.fastest for n in nodes),
                 len(dict.fromkeys(keys)), distinct_edges, pairs, tuple(n.vals[:, 3] for n in nodes),
                 tuple(n.vals[:, 4] for n in nodes))


def node_keys(b: Builder, net: Network, last_bucket: bool = True) -> list[tuple]:
    """Each layer's node key in ``net``: layers share a node when they have one signature, as many
    readers (gradient sums), their output saved or not alike, and their gradients in the last
    bucket or not (costmodel.comm.overlap). ``last_bucket`` False: no layer's gradients are in it
    (each priced as the layers behind the first bucket are: their gradient sums hidden where
    the overlap hides them, never slower than in the last bucket)."""
    readers, saved = consumers(net), saved_outputs(net)
    front = front_layers(net, b.overlap.bucket_bytes) if last_bucket else frozenset()
    return [(signature(layer), readers[layer.name], saved[layer.name], layer.name in front) for layer in net.layers]


def node_of(b: Builder, key: tuple) -> "_Node":
    """The node of ``key`` (:func:`node_keys`), priced once on ``b`` and kept there."""
    got = b.nodes.get(key)
    if got is None:
        got = b.nodes[key] = _node(b, *key)
    return got


def weighed_cost(node: "_Node", weight: float = 1.0, once_weight: float = 1.0) -> np.ndarray:
    """Each candidate's cost with its per-micro-batch part ``weight`` times and its once-a-step part
    ``once_weight`` times (:func:`build_with`)."""
    if weight == once_weight == 1:
        return node.vals[:, 0]
    return weight * (node.vals[:, 0] - node.vals[:, 3]) + once_weight * node.vals[:, 3]


@dataclass(frozen=True, eq=False)
class _Node:
    """One distinct node: its candidates, their (cost, memory, workspace) rows, the fastest
    algorithm's candidate per strategy, each candidate's strategy index, and the strategies."""

    candidates: tuple[tuple[Strategy, str], ...]
    vals: np.ndarray
    fastest: np.ndarray
    strategy_of: np.ndarray
    strategies: tuple[Strategy, ...]


def _node(b: Builder, sig: Layer, readers: int, saved: bool, front: bool = False) -> _Node:
    """Candidates, cost, memory and transient memory of the layers with signature ``sig``,
    ``readers`` and their output ``saved`` or not. An attention algorithm that another algorithm of
    the same strategy beats in time, memory, workspace and kept activations (materialised attention
    where FlashAttention runs) is left out: exact, as an algorithm changes no edge and no
    once-a-step cost, so the other is as good in every stage weighting."""
    strats = b.strategies(sig)
    algos = algorithms(sig, b.recompute, b.machine)
    vals = np.array([v for s in strats for v in b.estimates(sig, s, algos, readers, saved, front)],
                    dtype=np.float64).reshape(len(strats), len(algos), 5)
    keep = [[j for j in range(len(algos)) if sig.op != "attention" or not _beaten(vals[i], j)]
            for i in range(len(strats))]
    cand, rows, best, strategy_of = [], [], [], []
    for i, s in enumerate(strats):
        best.append(len(cand) + min(range(len(keep[i])), key=lambda j: (vals[i, keep[i][j], 0],
                                                                        vals[i, keep[i][j], 2], j)))
        for j in keep[i]:
            cand.append((s, algos[j]))
            rows.append(vals[i, j])
            strategy_of.append(i)
    return _Node(tuple(cand), np.array(rows, dtype=np.float64).reshape(len(cand), 5), np.array(best),
                 np.array(strategy_of), strats)


def _beaten(block: np.ndarray, j: int) -> bool:
    """Whether another row of ``block`` (one strategy's algorithms: cost, memory, workspace,
    once-a-step, activations) is no worse than row ``j`` in every column and better in one, or equal
    with a lower index."""
    for k in range(block.shape[0]):
        if k != j and np.all(block[k] <= block[j]) and (np.any(block[k] < block[j]) or k < j):
            return True
    return False


def _edges(b: Builder, net: Network, sigs: list[Layer], nodes: list[_Node],
           with_edges: bool, weight: float = 1.0) -> tuple[tuple[Edge, ...], int, int]:
    """The problem's edges, and how many distinct edge patterns and reshard pairs were priced.

    One cost matrix per distinct (producer, consumer, slot) signature and node pair; every
    reshard pair any of them needs is priced once, forward and backward (and kept in ``b`` for the
    next problem it builds)."""
    index = net.index()
    patterns: dict[tuple, tuple[list[int], list[int], int, int, int]] = {}
    edge_keys = []
    for src, dst, slot in (net.edges() if with_edges else ()):
        u, v = index[src], index[dst]
        key = (sigs[u], sigs[v], slot, _expansion(nodes[u]), _expansion(nodes[v]))
        edge_keys.append((u, v, key))
        if key not in patterns and key not in b.matrices:
            su, sv = nodes[u].strategies, nodes[v].strategies
            outs = [b.layout_id(output_layout(sigs[u], s, b.batch)) for s in su]
            ins = [b.layout_id(input_layout(sigs[v], s, b.batch, slot)) for s in sv]
            patterns[key] = (outs, ins, DTYPE_BYTES.get(sigs[u].dtype, 4), u, v)
    for embed, head in (ties(net) if with_edges else ()):  # the table to a tied head's rows (costmodel.layer.tied)
        u, v = index[embed], index[head]
        key = (sigs[u], sigs[v], "tie", _expansion(nodes[u]), _expansion(nodes[v]))
        edge_keys.append((u, v, key))
        if key not in patterns and key not in b.matrices:
            outs = [b.layout_id(weight_layouts(sigs[u], s)["tokens"]) for s in nodes[u].strategies]
            ins = [b.layout_id(table_layout(sigs[v], s)) for s in nodes[v].strategies]
            patterns[key] = (outs, ins, DTYPE_BYTES.get(sigs[u].dtype, 4), u, v)
    needed: dict[tuple[int, int, int], None] = {}
    for outs, ins, size, _, _ in patterns.values():
        for o in outs:
            for i in ins:
                needed[(o, i, size)] = None
    pairs = list(needed)
    table = LayoutTable(b.layouts) if pairs else None
    cost = _times(b, table, pairs, backward=False) + _times(b, table, pairs, backward=True)
    where = {k: n for n, k in enumerate(pairs)}
    for key, (outs, ins, size, u, v) in patterns.items():
        flat = np.array([where[(o, i, size)] for o in outs for i in ins], dtype=np.int64)
        by_strategy = cost[flat].reshape(len(outs), len(ins))
        if key[2] == "tie":  # the head's gradient summed over its group first, where the two do not share rows
            by_strategy = by_strategy + _head_sums(b, key[0], key[1], nodes[u].strategies, nodes[v].strategies)
        b.matrices[key] = by_strategy[np.ix_(nodes[u].strategy_of, nodes[v].strategy_of)]
    edge_list = tuple(Edge(u, v, b.matrices[key] if weight == 1 else weight * b.matrices[key])
                      for u, v, key in edge_keys)
    return edge_list, len({k for _, _, k in edge_keys}), len(pairs)


def _expansion(node: _Node) -> bytes:
    """Which strategy each candidate of ``node`` has: part of an edge matrix's key, as one signature
    can keep other candidates where the overlap's last bucket prices it otherwise (build_with)."""
    return node.strategy_of.tobytes()


def _head_sums(b: Builder, embed: Layer, head: Layer, embeds, heads) -> np.ndarray:
    """costmodel.layer.tied.head_sum_s for each (embedding strategy, head strategy) that does not share rows."""
    sums = [head_sum_s(head, s, b.machine) for s in heads]
    return np.array([[0.0 if tie_mismatch(head, hs, embed, es) is None else t for hs, t in zip(heads, sums)]
                     for es in embeds])


def _times(b: Builder, table: LayoutTable | None, pairs, backward: bool) -> np.ndarray:
    """Reshard seconds of each (producer layout id, consumer layout id, itemsize); ``table``: the
    builder's layouts."""
    out = np.zeros(len(pairs))
    if not pairs:
        return out
    arr = np.array(pairs, dtype=np.int64).reshape(len(pairs), 3)
    for size in np.unique(arr[:, 2]):
        idx = np.nonzero(arr[:, 2] == size)[0]
        own, need = arr[idx, 0], arr[idx, 1]
        if backward:  # gradients flow from the consumer's needed layout to the producer's own
            out[idx] = reshard_times_ids(table, need, own, True, int(size), b.machine, b.compute, b.stop)
        else:
            out[idx] = reshard_times_ids(table, own, need, False, int(size), b.machine, b.compute, b.stop)
    return out
