"""The pipeline search: stages, micro-batches and stage cuts outside, each stage solved exactly inside (pure).

For a uniform stack (:mod:`planner.pipeline.stack`) on ``p`` devices at batch ``B`` the search tries the
(pipeline degree, micro-batch count, model chunks) triples of :mod:`planner.pipeline.triples`.
Stage ``s`` runs on ranks ``[s d, (s + 1) d)``, ``d = p / S``, on micro-batches of ``B / m``
samples, with the 1F1B schedule (its activations held for ``min(S - s, m)`` micro-batches), or
interleaved with ``V`` model chunks a device (:mod:`planner.pipeline.interleave`, a fixed equal cut).
Inside a stage the per-layer problem (strategies with their data and tensor degrees, algorithms,
recomputation) is the planner's exact one (:mod:`planner.pipeline.stage_solver`), so the data and tensor
degrees are the stage solver's choice per layer. Between stages, :mod:`planner.pipeline.cuts` finds
the exact best cut of the blocks over the stages. As Alpa's stage DP over its intra-op ILP (Zheng
et al., OSDI 2022, section 5), stage solutions are reused: one per (blocks, role, kept) for each
``(S, m)``.

Pruning is exact. Each ``(S, m)`` has a lower bound on every cut's step: the larger of the physics
floor (nothing the cost model prices runs faster than the highest peak the network's layers run
at, docs/costmodel.md, "Nothing below physics": at least ``F / (p * peak) * (S + m - 1) / m`` for the step's model FLOPs
``F``) and :mod:`planner.pipeline.bound`'s, from one block's layers priced on the stage's ranks,
with the memory limit by Lagrangian duality (it also proves an ``(S, m)`` where nothing fits).
``(S, m)`` are tried in order of that bound and the search stops when it reaches the best step
found. Until a plan is in hand, a pair's search may take at most ``FIRST_SHARE`` of the time left
when it starts; one that takes longer is left (counted in the proven gap by its bound) and the next
is searched, so one slow pair does not leave the search without a plan (Llama 3.1 405B on 512 H100s
under ZeRO-3: 2 stages x 8 micro-batches, the least bound, did not finish its 63-block stages in
the 13 s left at load 1; 64 stages x 512, its bound 0.2% above, answers in about a second).
A pair is bounded against the step held (the caller's ceiling, or in one process the least bound
of the ``SETTLE`` pairs of least first partial bound where lower; with no ceiling, the least bound
of the ``SETTLE`` pairs of least physics floor, bounded whole first): a bound that reaches it on
part of a block's layers stops there, and the pair keeps that partial bound until the search comes
to it (:func:`planner.pipeline.triples.bounded`). Handed workers (``Settings.parallel``), the
search has the bounds computed side by side (:mod:`planner.pipeline.workers.pair_bounds`): the
same numbers, so the same answer.

Stages the memory limit binds are solved by Lagrangian relaxation while pairs are compared (fast,
feasible, its proven gap reported as the worst stage gap); the chosen ``(S, m)`` is then searched
again with every such stage solved exactly (its gap closed by :mod:`planner.solvers.pareto`, else
the ILP), so the plan returned has every stage optimal for its weighted objective. Another pair,
compared by its relaxed stages, may still hide a faster plan: each pair's lower bound is the
least of its stages' Lagrangian bounds over its cuts (:func:`planner.pipeline.cuts.cut_lower`), and
every pair whose bound is below the best step is searched again with its gaps closed, least
relaxed step first, until none is left or ``prove_s`` seconds pass (closing stops at that
deadline; the ILP time limit, if any, bounds each closing too). A pair that could beat the choice
by less than ``PROVE_GAP`` (or the caller's ``Settings.gap``) is left. ``proven_gap`` says how much
faster than the choice any pair's optimum could still be (0: the choice is optimal). ``exact``
solves every stage of every pair exactly from the start.

Inside a cut, a stage of ``k`` blocks makes the step at least ``m T + O`` of that stage, so stage
sizes whose cheapest such bound already loses are not tried (stage times grow with ``k``). The pair
chosen, and each best so far offered to the time budget, become the answer in
:mod:`planner.pipeline.chosen`.
"""

from __future__ import annotations

import time
from typing import Callable

from costmodel.compute.model import ComputeModel
from costmodel.machine.model import Machine
from costmodel.step.pipeline import INTERLEAVED
from networks.errors import DnnplanError
from networks.ir import Network
from networks import durations
from planner.pipeline import interleave
from planner.pipeline.pair_closing import proved
from planner.pipeline.workers.pair_searches import Ahead, Searched
from planner.pipeline.choice import Best, Candidate, OutOfTime, PipelineChoice
from planner.pipeline.chosen import choice, offer
from planner.pipeline.stack import uniform_stack
from planner.pipeline.pair_search import SCHEDULE, PairSearch
from planner.pipeline.triples import AUTO, DEFAULT, Interleaving, bounded, pairs, physics_floor
from planner.problem.parallel import side_by_side
from planner.problem.solve import Settings

#: until a plan is in hand, the share of the time left one pair's search may take (module docstring)
FIRST_SHARE = 1 / 3
#: the pairs bounded first (of least physics floor with no step held, else, in one process, of least
#: first partial bound), and the others against the least of their bounds (planner.pipeline.triples.bounded)
SETTLE = 4
#: seconds the search spends closing other pairs' stage gaps to prove its choice (planner.pipeline.pair_closing.proved)
PROVE_S = 5.0
#: another pair that could beat the choice by less than this fraction is not searched again (the
#: caller's ``Settings.gap`` replaces it): below the model's own error
PROVE_GAP = 0.01


class NoPipelineFits(DnnplanError):
    """No pipelined plan fits the memory limit."""


class NotFaster(NoPipelineFits):
    """No pipelined plan was found that beats the caller's ``ceiling`` step; ``lower_s``, the least
    step any pipelined plan can take (the pairs' lower bounds: at least the ceiling when every pair
    was bounded out, below it when the time limit left a pair unsearched)."""

    def __init__(self, message: str, lower_s: float = 0.0, **kw):
        super().__init__(message, **kw)
        self.lower_s = lower_s


class SearchOutOfTime(DnnplanError):
    """The time limit came before the search held any plan; ``lower_s``, the least step any
    pipelined plan can take by the bounds of the pairs it did not search (0: not known)."""

    def __init__(self, message: str, lower_s: float = 0.0, **kw):
        super().__init__(message, **kw)
        self.lower_s = lower_s


#: why a pair left open may still hold a plan: its share of the time limit ran out, or an
#: interleaved device's memory constraints were left unresolved (planner.pipeline.chunks.Unresolved)
UNSETTLED = ("time", "unresolved")


def unsettled(open_: list[Candidate]) -> SearchOutOfTime:
    """The error for a search that found no plan while the pairs ``open_`` may hold one: never "no
    pipelined plan fits" (not proven), the least step they can take its ``lower_s``."""
    timed = sum(c.skipped == "time" for c in open_)
    why = ", ".join(w for w in (f"{timed} by their share of the time limit" if timed else "",
                                f"{len(open_) - timed} with an interleaved device whose memory the solver left "
                                f"unresolved" if len(open_) > timed else "") if w)
    lower = min(c.lower_s for c in open_)
    return SearchOutOfTime(f"no pipelined plan was found, and {len(open_)} pipeline and micro-batch pairs were left "
                           f"open ({why}), any of which may hold a plan of at least {durations.seconds(lower, 4)} a step",
                           hint="raise --time-limit" + (", or plan with --schedule 1f1b" if len(open_) > timed else ""),
                           lower_s=lower)


def search_pipeline(net: Network, batch: int, p: int, machine: Machine, compute: ComputeModel,
                    memory_limit_bytes: float | None = None, settings: Settings = Settings(),
                    stage_counts: tuple[int, ...] | None = None, micro_counts: tuple[int, ...] | None = None,
                    progress: Callable[[int, int], None] | None = None, exact: bool = False,
                    schedule: str = SCHEDULE, prove_s: float | None = PROVE_S,
                    ceiling: float | None = None, close_choice: bool = True) -> PipelineChoice:
    """The best pipelined plan of ``net`` (module docstring); ``stage_counts`` / ``micro_counts``
    restrict the degrees tried; ``progress(done, total)`` is told after each (S, m); ``exact``:
    stages the memory limit binds are solved by the ILP, not by Lagrangian relaxation; ``schedule``:
    1f1b, gpipe (every stage holds all ``m`` micro-batches' activations), interleaved (1F1B with 2 to
    ``MAX_CHUNKS`` model chunks a device), auto (1F1B and interleaved both weighed on every pair) or
    default (every pair under 1F1B, and interleaved where it could win: pipeline_pairs.Interleaving). Under
    ``settings.budget`` the search ends at its deadline once it holds a plan (the pairs left are
    counted in the proven gap by their bounds) and offers each better plan it finds. ``ceiling``: a
    step the caller holds from elsewhere; a pair whose lower bound reaches it is not searched, and
    :class:`NotFaster` says that none was left."""
    start = time.perf_counter()
    stack = uniform_stack(net)
    if stack is None:
        raise DnnplanError(f"{net.name} is not a stack of identical blocks, so it cannot be pipelined nor its "
                           "micro-batches accumulated", hint="plan it without --pipeline and --micro-batches")
    limit = float(memory_limit_bytes if memory_limit_bytes is not None else machine.device.mem_capacity_bytes)
    search = PairSearch(stack, batch, p, machine, compute, limit, settings, exact,
                     "1f1b" if schedule in (AUTO, DEFAULT, INTERLEAVED) else schedule)
    search.ceiling = float("inf") if ceiling is None else ceiling
    budget = settings.budget
    triples = pairs(stack, batch, p, machine, net, stage_counts, micro_counts, schedule)
    # a pair whose physics floor already reaches the step held is not bounded (nor priced): its
    # stage bound, at least its floor, would leave it unsearched anyway
    out = [Candidate(s2, m2, f2, skipped="bound", lower_s=f2, chunks=v2) for f2, s2, m2, v2 in triples
           if f2 >= search.ceiling]
    triples = [t for t in triples if t[0] < search.ceiling]
    for _, s2, m2, _ in triples:
        search.pending[(s2, m2)] = search.pending.get((s2, m2), 0) + 1
    bounding = time.perf_counter()
    # every pair bounded against the step held; with none, the pairs of least floor first and the
    # others against the least of their bounds: a pair shown slower on part of its layers waits for
    # the search (triples.bounded)
    held = None if search.ceiling == float("inf") else search.ceiling
    combos = bounded(search.bound, triples, budget, search.many, SETTLE, held)
    search.bounding_s = time.perf_counter() - bounding
    if budget is not None:
        budget.bounding_took(search.bounding_s)
    out += [Candidate(s2, m2, b2, skipped="memory", lower_s=float("inf"), chunks=v2)
            for b2, s2, m2, v2, fits in combos if fits is False]
    combos = [c for c in combos if c[4] is not False]
    then = Interleaving(search, physics_floor(net, batch, p, machine), start, _pairs) if schedule == DEFAULT else None
    search.interleaving = then
    parallel = side_by_side(settings.parallel, compute)
    ahead = None if parallel is None else Ahead(
        search, parallel, combos, lambda k: search.best(combos[k][1], combos[k][2], chunks=combos[k][3]),
        lambda k: (combos[k][1], combos[k][2]) in search._builders)
    tolerance = max(PROVE_GAP if settings.gap is None else settings.gap, 1e-12)
    try:
        best = _pairs(search, combos, out, progress, start, then=then, ahead=ahead,
                      early=tolerance if then is not None and search.ceiling < float("inf") else None)
    finally:
        if ahead is not None:
            ahead.close()
    if then is not None:  # with none found under 1F1B, the interleavings that may beat the ceiling
        best = then.rest(then(best, out, []) if best is not None else None, out, tolerance)
    if best is None and any(c.skipped == "bound" for c in out):
        raise NotFaster(f"no pipelined plan of {net.name} can beat the {durations.seconds(search.ceiling, 6)} step held",
                        lower_s=min(c.lower_s for c in out))
    if best is None and (open_ := [c for c in out if c.skipped in UNSETTLED]):
        raise unsettled(open_)
    if best is None:
        raise NoPipelineFits(f"no pipelined plan of {net.name} at batch {batch} fits {limit / 2**30:.3f} GiB "
                           f"per device on {p} devices", hint="allow more --memory, more --devices or a smaller --batch")
    best, out = proved(search, best, out, prove_s, tolerance, close_choice)
    answer = choice(search, best, tuple(out), time.perf_counter() - start)
    answer.stats["prove_tolerance"] = tolerance
    return answer


def _pairs(search: PairSearch, combos: list, out: list[Candidate], progress, start: float,
           best: Best | None = None, then=None, later: list = (), ahead: Ahead | None = None,
           early: float | None = None) -> Best | None:
    """Each (S, m, V) in order of its bound until the bound reaches the best step found (from ``best``
    on) or the budget ends the search (once a plan is in hand); ``out`` gets a :class:`Candidate` for
    each; ``then``: a new best 1F1B pair's interleaving (planner.pipeline.triples.Interleaving), and
    with ``early`` (the proof tolerance, given under a ceiling) the other pairs' interleavings whose
    bound is below a pair's, weighed before it (``Interleaving.ahead_of``);
    ``ahead``: ``combos``' pairs searched by workers ahead of their turn (planner.pipeline.workers.pair_searches)."""
    budget = search.settings.budget

    def wait_s() -> float | None:
        """How long a worker's search of the pair whose turn it is may still be waited for."""
        if budget is None or budget.left() is None:
            return None
        left = budget.left()
        return left if search.pair_deadline is None else max(0.0, min(left, search.pair_deadline - budget.clock()))
    for i, (bound, stages, m, v, fits) in enumerate(combos):
        below = min(search.ceiling, best.step_s if best is not None else float("inf"))  # the step to beat
        if early is not None and bound < below:
            then.ahead_of(bound, best, out, list(combos[i:]) + list(later), early)
        if fits is None and bound < below and not (budget is not None and budget.expired()):
            # a pair the bounding left at its floor (physics, or a partial bound against a step
            # held): its stage bound now, on the pricing its search takes anyway, against the step
            # held now, so a pair it proves slower than the best (or unfit) is not searched
            step, fits, _ = search.bound(stages, m, v, below)
            bound = max(bound, step)
            if fits is False:
                out.append(Candidate(stages, m, bound, skipped="memory", lower_s=float("inf"), chunks=v))
                continue
        if bound >= below:
            # (the pairs whose bound was not computed come last)
            out.append(Candidate(stages, m, bound, skipped="bound", lower_s=bound, chunks=v))
            continue
        left = None if budget is None or best is not None else budget.left()
        search.pair_deadline = None if left is None else budget.clock() + FIRST_SHARE * left
        try:
            if budget is not None and budget.expired():
                raise OutOfTime
            if fits:
                # about to be searched: its bound with the reshards inside a block, which its stage
                # solves price anyway (planner.pipeline.bound.stage_bound's ``edges``): computed
                # first by the worker that holds its search, else here; the same number in any process
                edges = None if ahead is None else ahead.edges_bound(i, below, wait_s)
                bound = max(bound, search.stage_bound(stages, m, v, edges=True).step_s if edges is None else edges)
                if bound >= below:
                    out.append(Candidate(stages, m, bound, skipped="bound", lower_s=bound, chunks=v))
                    continue
            if ahead is None:
                got = search.best(stages, m, chunks=v, below=below)
            else:
                got = ahead.best(i, below, wait_s)
                if isinstance(got, Searched) and got.step_s is None:  # no cut fits
                    search.taken_elsewhere(got)
                    got = None
                elif isinstance(got, Searched):
                    if best is None or got.step_s < best.step_s * (1 - 1e-12):
                        got = search.best(stages, m, chunks=v)  # the new best: searched here, for its plan
                    else:
                        search.taken_elsewhere(got)
        except interleave.Unplanned as e:  # a triple proven no faster than the step to beat, or a device unresolved
            out.append(Candidate(stages, m, bound, skipped=e.why, lower_s=max(bound, e.lower_s), chunks=v))
            continue
        except OutOfTime:
            if best is None and budget is not None and not budget.expired():  # left at its share: the next pair
                out.append(Candidate(stages, m, bound, skipped="time", lower_s=bound, chunks=v))
                continue
            if best is None:  # the pairs left, each at its bound (a floor where not bounded)
                lower = min([c.lower_s for c in out] + [c[0] for c in combos[i:]])
                raise SearchOutOfTime(f"no plan was found within the {budget.stated_s:g} s time limit "
                                      f"({i} of {len(combos)} pipeline and micro-batch pairs searched)",
                                      hint="raise --time-limit", lower_s=lower) from None
            out.extend(Candidate(s2, m2, b2, skipped="time", lower_s=b2, chunks=v2)
                       for b2, s2, m2, v2, _ in [(bound, stages, m, v, fits)] + list(combos[i + 1:]))
            break
        finally:
            search.pair_deadline = None
        out.append(Candidate(stages, m, bound, got.step_s if got else None, got.cut if got else (),
                             lower_s=max(bound, got.lower_s) if got else float("inf"), chunks=v))
        if got is not None and (best is None or got.step_s < best.step_s * (1 - 1e-12)):
            best = got
            search.hold(got.stages, got.micro_batches)
            if then is not None and got.chunks == 1:
                best = then(best, out, list(combos[i + 1:]) + list(later))
        if best is not None and budget is not None:
            offer(search, best, out, list(combos[i + 1:]) + list(later), start)
        if progress:
            progress(i + 1, len(combos))
    return best
