"""The (pipeline degree, micro-batch count, model chunks) triples the pipeline search tries, and
their order (pure).

Every pipeline degree ``S`` dividing the devices (at most one stage a block) and the micro-batch
counts ``m`` dividing the batch that make micro-batches of 1, 2, 4 or 8 samples, or as many for
each replica of node-wide tensor groups, or one micro-batch of the whole batch (or the counts the
caller names). Each pair runs 1F1B (one chunk a device) and, under interleaving, ``V`` = 2 to
``MAX_CHUNKS`` model chunks a device where Megatron-LM's interleaved schedule takes them: ``S >= 2``,
``m`` a multiple of ``S`` and the blocks cut into ``S V`` equal chunks. Each triple has a lower bound
on its step, the larger of the physics floor and :mod:`planner.pipeline.bound`'s
(planner.pipeline.search, module docstring), by bound.
"""

from __future__ import annotations

from costmodel.choices.precision import matmul_peak
from costmodel.layer.candidates import divisors
from costmodel.machine.model import Machine
from costmodel.step.pipeline import INTERLEAVED
from networks.analysis import layer_cost
from networks.errors import DnnplanError
from networks.ir import Network
from planner.pipeline.choice import Candidate
from planner.solvers import Budget
from planner.pipeline.stack import Stack

#: micro-batch sizes tried unless the caller names micro-batch counts (with the whole batch: no
#: micro-batching); Megatron-LM's published runs use 1 to 8 (Narayanan et al. SC21, section 5)
MICRO_SIZES = (1, 2, 4, 8)
#: the share of the time left that bounding the pairs may take; the pairs left then keep their
#: physics floor as their bound (weaker, still a bound) and are tried last
BOUND_SHARE = 0.6
#: the most model chunks a device holds under interleaving: Megatron-LM's published interleaved runs
#: hold 2 to 4 (Narayanan et al. SC21, Figure 12 and section 5.3), NeMo's Llama 3 70B runs 5 and
#: Megatron-Core's Mixtral 8x7B run 8 (bench/assets/published-modern.yaml, their rows' sources)
MAX_CHUNKS = 8
#: the search's schedule when it weighs both 1F1B and interleaved 1F1B on every pair
AUTO = "auto"
#: ``dnnplan plan``'s schedule when none is given: every pair under 1F1B, and the interleaved
#: variants of each pair that becomes the best, as it is found, and of every pair whose
#: interleaving could still win (:class:`Interleaving`)
DEFAULT = "default"


def chunk_counts(n: int, stages: int, m: int, schedule: str) -> tuple[int, ...]:
    """The model chunks a device may hold for ``(S, m)`` under ``schedule`` (module docstring): 1
    unless only interleaving is asked for, and 2 to ``MAX_CHUNKS`` under ``interleaved`` or ``auto``."""
    out = [] if schedule == INTERLEAVED else [1]
    if schedule in (INTERLEAVED, AUTO) and stages > 1 and m % stages == 0:
        out += [v for v in range(2, MAX_CHUNKS + 1) if n % (stages * v) == 0]
    return tuple(out)


def pairs(stack: Stack, batch: int, p: int, machine: Machine, net: Network, stage_counts, micro_counts,
          schedule: str = "1f1b"):
    """Every (bound, S, m, V) to try, by bound (module docstring)."""
    floor = physics_floor(net, batch, p, machine)
    out = []
    for stages in divisors(p):
        if stages > stack.n or (stage_counts and stages not in stage_counts):
            continue
        sizes = micro_sizes(p // stages, machine.devices_per_node, stages == 1)
        for m in divisors(batch):
            if micro_counts and m not in micro_counts:
                continue
            if not micro_counts and m > 1 and batch // m not in sizes:
                continue
            out += [(floor(stages, m, v), stages, m, v) for v in chunk_counts(stack.n, stages, m, schedule)]
    if not out:
        bad_m = [m for m in micro_counts or () if batch % m]
        bad_s = [s for s in stage_counts or () if p % s or s > stack.n]
        if bad_m and len(micro_counts) == 1:  # the count given cannot be: named, as predict names it
            raise DnnplanError(f"--micro-batches {bad_m[0]} does not divide the batch {batch}",
                               hint="choose --micro-batches dividing --batch")
        if bad_s and len(stage_counts) == 1:
            why = (f"does not divide the {p} devices" if p % bad_s[0] else
                   f"is more stages than {net.name}'s {stack.n} blocks")
            raise DnnplanError(f"--pipeline {bad_s[0]} {why}",
                               hint=f"choose --pipeline from {', '.join(str(s) for s in divisors(p) if s <= stack.n)}")
        raise DnnplanError(f"no pipeline degree and micro-batch count to try for {net.name} on {p} devices at "
                           f"batch {batch}" + (" interleaved" if schedule == INTERLEAVED else ""),
                           hint=f"--pipeline divides --devices and is at most {stack.n} (its blocks); "
                           "--micro-batches divides --batch" + (
                               "; interleaving needs at least 2 stages, micro-batches a multiple of the stages "
                               "and the blocks cut evenly into stages x chunks" if schedule == INTERLEAVED else ""))
    return sorted(out)


def physics_floor(net: Network, batch: int, p: int, machine: Machine):
    """``floor(S, m, V)``: no kernel runs faster than the highest peak any of the network's layers
    runs at (:func:`highest_peak`), so the step takes at least ``F / (p peak) (m + (S - 1) / V) / m``
    (planner.pipeline.search, module docstring)."""
    flops = sum(sum(layer_cost(layer, batch).flops) for layer in net.layers)
    peak = highest_peak(net, machine)
    return lambda stages, m, v: flops / (p * peak) * (m + (stages - 1) / v) / m


def highest_peak(net: Network, machine: Machine) -> float:
    """The highest FLOP/s any kernel of ``net`` is priced at: the peaks of its layers' arithmetic
    (:func:`costmodel.choices.precision.matmul_peak`, with TF32 allowed: the GEMMs' peak, FP8 only
    for a layer marked FP8), of their own 16-bit type (attention's core under FP8) and the float32
    peak of everything else, each the float32 peak where the datasheet has none (as the roofline
    reads them, no efficiency above 1). A bf16 network on an H100 is floored at its bf16 peak, not
    at the FP8 peak (twice that) it never runs at. A network with a convolution keeps the device's
    highest peak of all: Winograd and FFT do less work than the direct FLOPs the floor counts
    (docs/costmodel.md, 0.38-0.47 of them)."""
    peaks = machine.device.peak_flops
    if any(layer.op == "conv2d" for layer in net.layers):
        return max(peaks.values())
    keys = {"float32"}
    for layer in net.layers:
        keys.add(matmul_peak(layer, True)[0])
        if layer.dtype in ("float16", "bfloat16"):
            keys.add(layer.dtype)
    return max(peaks.get(key) or peaks["float32"] for key in keys)


def micro_sizes(ranks: int, per_node: int, alone: bool = False) -> set[int]:
    """The micro-batch sizes (samples a micro-batch, over a stage's ``ranks``) tried: ``MICRO_SIZES``,
    and the same per data-parallel replica when the stage's tensor groups fill a node (Megatron-LM's
    layout: ``ranks / per_node`` replicas, each taking 1 to 8 samples); ``alone``, one stage on every
    device (gradient accumulation without a pipeline): the same per device too (the data-parallel
    frameworks' micro-batch a GPU: PyTorch DDP and FSDP, DeepSpeed's ``train_micro_batch_size_per_gpu``)."""
    replicas = ranks // per_node if per_node > 1 and ranks % per_node == 0 else 1
    return {j * k for j in MICRO_SIZES for k in {1, replicas} | ({ranks} if alone else set())}


def bounded(bound, combos: list[tuple[float, int, int, int]], budget: Budget | None = None,
            many=None, settle: int = 0, above: float | None = None) -> list[tuple[float, int, int, int, bool]]:
    """Each (S, m, V) with the larger of its two lower bounds (``bound(S, m, V)``: the stage bound,
    whether anything can fit and the stages' mean bracket) and whether anything can fit, in order of
    that bound, least first (the pair that can be fastest is searched first: ordered by the
    stages' mean bracket, llama3-70b on 64 H100s under ZeRO-3 searched 14 pairs before its
    optimum, one stage of 32 micro-batches, the first bounded at 58.75 s against that optimum's
    56.46 s, and left ZeRO-0 to the time limit); once ``BOUND_SHARE`` of the budget's time left is spent,
    the pairs left keep their floor and come after the others (a floor is far below a stage
    bound: by it they would all come first), with None for whether anything fits (not known: the
    search bounds each when it comes to it, against the best step it then holds). ``many(combos)``:
    the stage bounds computed side by side, ``(i, (bound, fits, mean))`` as each is done
    (:mod:`planner.pipeline.workers.pair_bounds`); the order is the bounds', so the same either way.

    ``settle`` (more than 0): the ``settle`` pairs of least floor are bounded first, then the others
    against the least bound of those that fit (``bound(S, m, V, above)``, ``many(combos, above)``:
    :func:`planner.pipeline.bound.stage_bound`): a pair whose bound reaches it on part of a block's
    layers keeps that partial bound as its floor, not knowing whether anything fits, and is
    bounded by the search when it comes to it, against the best step then held, on the layers
    already priced (GPT-3 175B on 1,024 A100s under ZeRO-3: 26 of 58 pair bounds over twice the
    best step, each pricing a block's every layer to learn it). ``above``: a step the caller
    holds, against which every pair is so bounded; in one process, with ``settle``, each pair's
    first partial bound (its largest layer alone, which a bound against ``above`` prices anyway) is
    taken first, the ``settle`` pairs of least such bound are bounded against ``above``, and the
    others against the least of their bounds where lower (Llama 3.1 405B on 16,384 H100s, ZeRO-0
    under ZeRO-1's 4.25 s: 64 stages x 256 bounded at 1.85 s among the first four, and the other 21
    pairs against it). Side by side (``many``) every pair is bounded against ``above`` at once (two
    more rounds would hand out and wait for each pair twice more: Mixtral 8x7B on 64 H100s with two
    jobs, 1.8 s against 1.6 s).
    """
    bounded_, done = [], set()
    left = None if budget is None else budget.left()
    stop = None if left is None else budget.clock() + BOUND_SHARE * left

    def over() -> bool:
        return stop is not None and (budget.clock() >= stop or budget.stop_requested)

    partial: dict[int, float] = {}  # the pairs a partial bound leaves to the search: that bound

    def round_(which: list[int], above: float | None = None) -> None:
        chosen = [combos[i] for i in which]
        if many is None:
            results = iter(enumerate(bound(s, m, v) if above is None else bound(s, m, v, above)
                                     for _, s, m, v in chosen))
        else:
            results = many(chosen) if above is None else many(chosen, above)
        try:
            while not over():
                got = next(results, None)
                if got is None:
                    break
                k, (step, fits, _) = got
                i = which[k]
                phys, stages, m, v = combos[i]
                if fits is None:
                    partial[i] = max(phys, step)
                else:
                    bounded_.append((max(phys, step), stages, m, v, fits))
                    done.add(i)
        finally:
            getattr(results, "close", lambda: None)()

    if settle <= 0 or len(combos) <= settle or (above is not None and many is not None):
        round_(list(range(len(combos))), above)
    else:
        if above is None:  # the pairs of least physics floor
            first = sorted(range(len(combos)), key=lambda i: combos[i])
        else:  # of least first partial bound (its largest layer alone, which a bound against ``above`` prices anyway)
            round_(list(range(len(combos))), 0.0)
            # a pair whose first partial bound reaches ``above`` is bounded as against it: left as it is
            first = sorted((i for i in range(len(combos)) if i not in done and partial.get(i, 0.0) < above),
                           key=lambda i: (partial.get(i, combos[i][0]), i))
        round_(first[:settle], above)
        least = min([b[0] for b in bounded_ if b[4]] + ([above] if above is not None else []), default=float("inf"))
        round_([i for i in first[settle:] if i not in done], None if least == float("inf") else least)
    floored = [(partial.get(i, phys), s, m, v, None) for i, (phys, s, m, v) in enumerate(combos) if i not in done]
    return sorted(bounded_) + sorted(floored, key=lambda c: c[:4])


def saving(stages: int, m: int, chunks: int) -> float:
    """The least share of a pair's 1F1B optimum any of its plans interleaved with ``chunks`` chunks
    can take: ``r = (m + (S - 1) / V) / (m + S - 1)`` (:class:`Interleaving`)."""
    return (m + (stages - 1) / chunks) / (m + stages - 1)


class Interleaving:
    """The default schedule's interleaving (planner.pipeline.search), by ``search_triples`` (its
    loop over triples), each triple bounded on its pair's pricing.

    ``self(best, out, later)``: each pair that becomes the best under 1F1B is interleaved as it is
    found (once): so a deadline that ends the 1F1B pairs early still leaves the best so far
    interleaved (GPT-3 175B on 1,024 A100s found its interleaved plan only after every 1F1B pair,
    at 16 s of its 20 s), and an interleaved best prunes the pairs after it; ``later``: the
    triples not yet searched, for the bound offered.

    :meth:`rest`: then every other pair whose interleaving could still win. The bound: an
    interleaved plan of ``(S, m, V)`` with device times ``T_s`` (sends included) and once-a-step
    ``O_s`` takes ``m max T + (sum T - max T) / V + max O``; its device solutions are a 1F1B plan
    of ``(S, m)`` on the equal cut (each device holds no fewer micro-batches interleaved than its
    1F1B stage, and sends at least its 1F1B stage's sends), whose step ``sum T + (m - 1) max T +
    max O`` is no larger with those times; the ratio of the two is least when ``sum T - max T`` is
    ``(S - 1) max T`` and ``O = 0``: :func:`saving`. So no interleaving of the pair beats ``r``
    times its 1F1B lower bound (its candidate's ``lower_s``), ``r`` at its most chunks; a pair
    whose such bound is within the proof tolerance of the best step is left, as the proof leaves
    one (planner.pipeline.search), and one the deadline leaves is a candidate at that bound."""

    def __init__(self, search, floor, start: float, search_triples):
        self.search, self.floor, self.start, self.search_triples = search, floor, start, search_triples
        self.done: set[tuple[int, int]] = set()
        #: pairs :meth:`ahead_of` bounded and left to :meth:`rest`: the least bound of their triples
        self.open: dict[tuple[int, int], float] = {}

    def __call__(self, best, out: list, later: list):
        return self.pair((best.stages, best.micro_batches), best, out, later, best.solver.builder)

    def pair(self, key: tuple[int, int], best, out: list, later: list, builder=None):
        """``key``'s interleaved triples searched after ``best`` (``builder``: its 1F1B pricing)."""
        search = self.search
        more = [(self.floor(*key, v), *key, v) for v in chunk_counts(search.stack.n, *key, INTERLEAVED)]
        budget = search.settings.budget
        if key in self.done or not more or (budget is not None and budget.expired()):
            return best
        self.done.add(key)
        search.pending[key] = len(more)
        if builder is not None:
            search.share_pricing(key, builder)  # one pricing for every V of (S, m)
        # bounded here, never by workers: each V's bound reuses the pair's pricing, which a worker
        # would price afresh (a tenth of the time or less here, the search waiting there)
        return self.search_triples(search, bounded(search.bound, more), out, None, self.start, best, later=later)

    def lower(self, stages: int, m: int, bound: float) -> float:
        """The least step any plan of ``(S, m)`` can take, 1F1B or interleaved, from its 1F1B
        bound: the bound times :func:`saving` at its most chunks until its interleavings are
        searched (class docstring), the bound itself once they are or where none exists."""
        least = None if (stages, m) in self.done else self.least((stages, m), bound)
        return bound if least is None else min(bound, least[0])

    def least(self, key: tuple[int, int], bound: float) -> tuple[float, int] | None:
        """The least step of pair ``key``'s interleavings from its 1F1B bound (class docstring: the
        bound times :func:`saving` at its most chunks, or the least bound of its triples where
        :meth:`ahead_of` bounded them), and its most chunks; None: the pair has no interleaving."""
        vs = chunk_counts(self.search.stack.n, *key, INTERLEAVED)
        if not vs:
            return None
        return max(bound * saving(*key, max(vs)), self.open.get(key, 0.0)), max(vs)

    def ahead_of(self, bound: float, best, out: list, combos: list, tolerance: float):
        """The interleavings of every pair whose least step (as :meth:`rest` bounds it: its 1F1B
        bound, from ``out`` where searched, else from ``combos``, times :func:`saving`) is below
        ``bound``, the 1F1B pair's about to be searched, and below the step held, least first:
        each triple bounded now (:func:`bounded`), and a pair none of whose triples can beat the
        step held is weighed (its triples in ``out`` at their bounds), so a deadline never leaves
        it at a bound below the pairs searched; a pair one of whose triples could win is left to
        be searched by :meth:`rest`, once the best step the pairs give prunes most of them."""
        search = self.search
        n, budget = search.stack.n, search.settings.budget
        known = {(c.stages, c.micro_batches): c.lower_s for c in out if c.chunks == 1}
        for b, s, m, v, fits in combos:
            if v == 1 and fits is not False:
                known.setdefault((s, m), b)
        left = sorted((least[0], key) for key, lower in known.items()
                      if key not in self.done and key not in self.open and lower < float("inf")
                      and (least := self.least(key, lower)) is not None)
        # weighed within the proof's tolerance of the step held (as rest), pruned only by the step itself
        beaten = min(search.ceiling, best.step_s if best is not None else float("inf"))
        held = min(search.ceiling, best.step_s * (1 - tolerance) if best is not None else float("inf"))
        for least, key in left:
            if least >= min(bound, held) or (budget is not None and budget.expired()):
                break
            got = bounded(search.bound, [(self.floor(*key, v), *key, v) for v in
                                         chunk_counts(n, *key, INTERLEAVED)])
            if any(fits is not False and b < beaten for b, *_, fits in got):
                self.open[key] = min(b for b, *_, fits in got if fits is not False)
                continue
            self.done.add(key)
            out.extend(Candidate(s, m, b, skipped="memory" if fits is False else "bound",
                                 lower_s=float("inf") if fits is False else b, chunks=v) for b, s, m, v, fits in got)

    def rest(self, best, out: list, tolerance: float):
        """Every other pair whose interleaving could beat ``best`` by more than ``tolerance`` (class
        docstring), least bound first, until none is left or the budget ends the search; with no
        ``best`` (no 1F1B plan beat the search's ceiling), every pair whose interleaving could beat
        the ceiling: a pair's 1F1B bound over it leaves its interleavings to search."""
        budget, left = self.search.settings.budget, []
        for c in out:
            key = (c.stages, c.micro_batches)
            if c.chunks == 1 and key not in self.done and c.lower_s < float("inf") \
                    and (least := self.least(key, c.lower_s)) is not None:
                left.append((least[0], key, least[1]))
        left.sort()
        for i, (bound, key, v) in enumerate(left):
            held = best.step_s * (1 - tolerance) if best is not None else self.search.ceiling
            if bound >= held:
                break
            if budget is not None and budget.expired():
                out.extend(Candidate(k[0], k[1], b, skipped="time", lower_s=b, chunks=v2) for b, k, v2 in left[i:]
                           if b < held)
                break
            best = self.pair(key, best, out, [])
        return best
