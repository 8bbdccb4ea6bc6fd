"""Which ZeRO stage: the fastest plan over the stages weighed, within one time bound (pure).

When the user names no ``--zero``, :func:`planner.first_plan.first_plan` plans under each ZeRO stage the
cost model has (:mod:`costmodel.choices.optimizer`: 0, 1, 2, 3) and answers with the fastest plan that fits.
What the stages change in the cost model decides which need planning:

- **0 and 1 are both planned**: neither is faster for every plan. ZeRO-1 updates only its shard
  of each weight (the update is 1/R of ZeRO-0's) and moves a reduce-scatter and an all-gather
  where ZeRO-0 moves one all-reduce of the same bytes; an all-reduce of small messages (recursive
  doubling) can take less than the two, and the gather's overlap window differs.
- **ZeRO-2's step is at least ZeRO-1's** for every plan (the same collectives and update,
  :mod:`costmodel.comm.weight_sync`, its reduce-scatter run in every micro-batch where ZeRO-1 runs it
  once a step); it differs in memory (the gradients sharded, a layer's whole gradient held while
  its backward runs). Where ZeRO-1's plan is not held back by memory its optimum is ZeRO-1's, and
  it is not planned; where no ZeRO-1 plan fits or memory held ZeRO-1's back, it is planned, under
  the step held: plans that fit only with the gradients sharded can be faster (Llama 3 8B on 64
  H100s under 16 GiB: ZeRO-2's 7.696 s, where ZeRO-1's best is 7.984 s and ZeRO-3's 8.000 s).
- **ZeRO-3's step is at least ZeRO-2's** for every plan (it adds a parameter all-gather before
  each backward to the same overlap windows), so it can beat ZeRO-1/2 only through memory: it is
  planned only when the ZeRO-1 (or ZeRO-2) answer was held back by the memory limit (anything but
  the whole batch's unconstrained optimum, which fits), or first, where a cheap bound says memory
  binds ZeRO-1 (below); otherwise its optimum is no faster.

Each stage's search is given the fastest step held so far as a ceiling: pipeline and micro-batch
pairs whose lower bound reaches it are not searched (:func:`planner.pipeline.search.search_pipeline`),
nor proven against, and a transformer's whole batch at once ends once its bound reaches it
(:class:`planner.problem.solve.Slower`: Llama 2 7B on 512 H100s, ZeRO-0's memory-bound whole batch
under ZeRO-1's 0.6756 s, proven optimal in 10 s where it took the 20 s default for a 43% gap).
A stage whose whole batch fits has its pipelines weighed after every stage has its plan, fastest
stage first, under the fastest step held (:func:`planner.first_plan._pipelines_after`: by then
most pairs' bounds reach it); until then its lower bound is their physics floor, and a stage
skipped by dominance on it follows its bound.

The stages run in the order 0, 1, 3, 2 for a network without attention (ZeRO-0 first: the plan
given before the choice, so a search the time limit cuts short answers no worse), and 1, 3, 0, 2
for one with attention (:data:`ATTENTION_ORDER`: the layouts transformer users run first,
Megatron-Core's distributed optimiser and FSDP's full sharding, so the answer a short search gives
is one of theirs and ZeRO-0 is searched under their step as its ceiling; Qwen3-30B-A3B on 64 H100s,
searched 0 first, spent the 20 s default on ZeRO-0's pipelines and left out ZeRO-3 without a
pipeline, 9% faster). Where a cheap bound says memory holds ZeRO-1 back (the whole batch's
layers, each at its fastest candidate alone, hold more than the limit under ZeRO-1:
:func:`planner.first_plan._memory_binds`), a network with attention runs 3, 1, 0, 2
(:data:`SHARDED_FIRST`): ZeRO-3 is then the stage that can win, and ZeRO-1 is searched under its
step as a ceiling, most of its pairs pruned by their bounds (Qwen3-30B-A3B and Mixtral 8x7B on
64 H100s: ZeRO-3 without a pipeline, 5.908 s and 9.686 s a step, within the 20 s default,
docs/planner.md). Each stage may take
the whole time left to find its first plan; once it holds one, its search ends at its share of
the time left (:class:`Share`: the time left over the stages that may still be planned, itself
and the later of 1 and 3, as 2 is planned only where 1 has no plan) unless it is still finding
better plans: it ends a share's length after its last better plan (GPT-3 175B on 1,024 A100s
under the 20 s default, load 2.4, holds ZeRO-0's first plan after 8 s and finds better ones
until its interleaved plan, and keeps searching). Without the share the first
stage's search could spend the whole limit bounding and proving its own pairs: Llama 3 70B on 64
H100s (NeMo 24.07's FP8 row) held ZeRO-0's 11.26 s plan after 4 s and searched ZeRO-0's other
pairs for the remaining 56 s, so ZeRO-1, whose 1F1B pipeline of 4 stages takes 10.46 s (faster
than the run's published layout's 10.79 s), was never planned. A stage's proof (closing its
chosen pairs' gaps, :func:`planner.pipeline.pair_closing.proved`) ends in time to leave each stage still
to plan as long as this stage's bounds took (:meth:`Share.proof_deadline`): bounding a stage's
pairs is what covers it in the gap, closing gaps only narrows one stage's (Llama 3 70B on 64 H100s
spent 6 s of the 20 s default closing ZeRO-3's gaps, to 0.0%, and left ZeRO-0, 1 and 2 out of
the gap; with the reserve every stage is covered, within 2.6%). A stage after
the first starts only while the time left is at least the longest an earlier stage took to bound
its pipeline pairs (``Budget.bounds_s``: the bounds are what cover a stage), or, before any has,
a quarter of the time limit (a search given less bounds few pipeline pairs and may spend its time
on a slow one), else it is named as not planned. Each
stage's search offers its plans to the command's budget (:class:`Share`): Ctrl-C answers with the
fastest of any stage, in the words of the stage planned then; a stop is never taken for the time
limit (a later stage is not named as left out by the time limit). The gap stated covers the
stages planned: ``1 - min_z(lower_z) / step``, ``lower_z`` each planned stage's proven lower bound
(the ceiling for a stage whose every pair it bounds), a stage where nothing fits none, a stage
skipped by dominance that of the stage that dominates it. A stage the time limit left unplanned
or unfinished (or Ctrl-C, not yet planned) is not covered: the answer names it (:func:`uncovered`,
the JSON's ``uncovered_zero``) and is not called optimal.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from networks.errors import DnnplanError
from networks import durations
from planner.pipeline.search import SearchOutOfTime
from planner.problem.solve import Settings
from planner.solvers import Budget

#: the order the stages are planned in (module docstring): a network without attention, and one with it
ORDER = (0, 1, 3, 2)
ATTENTION_ORDER = (1, 3, 0, 2)
#: a network with attention whose whole batch, each layer at its fastest alone, holds more than the
#: memory limit under ZeRO-1 (a cheap bound: :func:`planner.first_plan.first_plan`): ZeRO-3 first,
#: as FSDP users run it, the stage that can win where memory holds ZeRO-1 back, then ZeRO-1 under
#: its step as a ceiling (a pair whose bound reaches it is not searched)
SHARDED_FIRST = (3, 1, 0, 2)
#: before any stage has bounded pipeline pairs, a stage after the first is planned only while this
#: share of the time limit is left (after, while the longest bounding so far is left: _short)
LATE_SHARE = 0.25
#: what a stage the time limit left out adds to its line: the gap stated does not cover it
UNCOVERED = ": the gap stated does not cover it"


@dataclass(frozen=True)
class Weighed:
    """One ZeRO stage's outcome: its answer's step and proven lower bound (None: nothing fits, or
    its time ran out first), whether the memory limit held it back, or why it was skipped."""

    zero: int
    step_s: float | None = None
    lower_s: float = 0.0
    bound: bool = True
    skipped: str = ""
    covered: bool = True  # False: the time limit left it unplanned, so the gap stated does not cover it


class Beaten(DnnplanError):
    """A stage's search found no plan that beats ``ceiling``, the fastest step held; ``lower_s``, the
    least step its plans can take by their bounds: the ceiling where they reach it (proven none
    faster), below it where the time limit left some unsearched."""

    def __init__(self, ceiling: float, lower_s: float | None = None, why: str = ""):
        super().__init__(f"no plan beats the {durations.seconds(ceiling, 6)} step held")
        self.ceiling = ceiling
        self.lower_s = ceiling if lower_s is None else min(lower_s, ceiling)
        self.why = why  # what the stage's line says instead of its bounds (fastest_stage)


class Share(Budget):
    """One stage's part of the command's budget (module docstring): its own deadline (the share,
    never past the command's), the command's stop request, and every plan it holds offered to
    the command's budget as ``wrap(result)``, with the least lower bound over all the stages."""

    def __init__(self, parent: Budget, seconds: float | None, wrap: Callable, lower: Callable[[float], float],
                 label: str = "", share_s: float | None = None, later: int = 0, pending: str = "",
                 covered: str = ""):
        self.share_s: float | None = None
        super().__init__(seconds, parent.clock, parent.stated_s)
        if parent.deadline is not None:
            self.deadline = parent.deadline if self.deadline is None else min(self.deadline, parent.deadline)
        self._shared = parent._shared
        self.parent, self.wrap, self.lower, self.label = parent, wrap, lower, label
        self.share_s = share_s  # its share of the time left (module docstring)
        self.improved_at: float | None = None  # when it last held a better plan
        self.later = later  # the stages that may still be planned after this one
        self.pending = pending  # those the command's bound does not cover yet, in words (Offer.pending)
        self.covered = covered  # what it covers, in words, for an answer a stop finishes (Budget.covering)

    def proof_deadline(self, bounding_s: float) -> float | None:
        """The stage's deadline, and no later than leaves each stage still to plan as long as
        this stage's bounds took (module docstring: a stage's proof never takes the time in which
        a later stage would be bounded)."""
        own, hard = self.deadline, self.parent.deadline
        if hard is None or not self.later:
            return own
        keep = hard - self.later * bounding_s
        return keep if own is None else min(own, keep)

    @property
    def deadline(self) -> float | None:
        """The command's deadline until this stage holds a plan; from then on, a share's length
        after its last better plan, if earlier."""
        hard = self._hard
        if self.share_s is None or self.improved_at is None:
            return hard
        soft = self.improved_at + self.share_s  # never before its share's end: improved_at >= start
        return soft if hard is None else min(hard, soft)

    @deadline.setter
    def deadline(self, value: float | None) -> None:
        self._hard = value

    def offer(self, step_s: float, what: str, finish: Callable, lower_s: float | None = None) -> bool:
        kept = super().offer(step_s, what, finish, lower_s)
        # the command's bound covers the stages planned so far and this one: it replaces the one
        # the stages before this one left (Budget.cover), never raised by it
        self.parent.cover(self.lower(self.lower_s), self.pending, self.covered)
        if kept:
            self.improved_at = self.clock()
            self.parent.offer(step_s, f"{self.label}: {what}", lambda: self.wrap(finish(), self.parent),
                              None, self.pending)
        return kept

    def bounding_took(self, seconds: float) -> None:
        super().bounding_took(seconds)
        self.parent.bounding_took(seconds)

    def bound(self, lower_s: float) -> None:
        super().bound(lower_s)
        self.parent.cover(self.lower(self.lower_s), self.pending, self.covered)


def fastest_stage(settings: Settings, plan_at: Callable[[Settings, float | None], object], outcome: Callable[[object], Weighed],
                  wrap: Callable[[object, Budget, Settings], object],
                  order: tuple[int, ...] = ORDER) -> tuple[object, int, list[Weighed]]:
    """The fastest answer over the ZeRO stages, planned in ``order`` (module docstring), and what
    each stage gave.

    ``plan_at(settings, ceiling)`` plans under ``settings`` (its ``zero`` and ``budget`` set per
    stage; ``ceiling``, the fastest step held so far, or None) and raises :class:`DnnplanError` when
    nothing fits, :class:`Beaten` when nothing can beat the ceiling; ``outcome(answer)`` is a stage's
    :class:`Weighed`; ``wrap(result, budget, settings)`` turns what a stage's search offers (a
    result of the search under ``settings``) into an answer, its gap the command ``budget``'s.
    Raises a stage's error (the first stage's whose time did not run out) when no stage has a plan."""
    parent = settings.budget
    done: dict[int, Weighed] = {}
    answers: dict[int, object] = {}
    errors: list[tuple[bool, DnnplanError]] = []
    for z in order:
        if parent is not None:
            parent.check()  # a stop is answered as one (the best plan so far), never as the time limit
        if (why := _skip(z, done)) is not None:
            done[z] = why
            continue
        if parent is not None and (parent.expired() or (done and _short(parent))):
            done[z] = Weighed(z, lower_s=float("inf"), skipped=f"not planned (the time limit came first){UNCOVERED}",
                              covered=False)
            continue
        trial = dataclasses.replace(settings.with_zero(z), budget=_share(parent, z, done, settings, wrap, order))
        held = min((done[x].step_s for x in answers), default=None)
        try:
            answers[z] = plan_at(trial, held)
        except Beaten as err:
            done[z] = Weighed(z, lower_s=err.lower_s, skipped=err.why or (
                f"has no plan that can beat {durations.seconds(err.ceiling, 4)} (its bounds)" if err.lower_s >= err.ceiling else
                f"has no plan found that beats {durations.seconds(err.ceiling, 4)} (the time limit left some "
                f"unsearched: their bounds leave {durations.seconds(err.lower_s, 4)})"))
            continue
        except SearchOutOfTime as err:
            if err.lower_s > 0 and not _late(trial.budget):
                # pipelined pairs left open within the time limit (their shares spent, or an
                # interleaved device unresolved): the stage may hold a plan, none faster than their bounds
                errors.append((False, err))
                done[z] = Weighed(z, lower_s=err.lower_s, skipped=f"has no plan found (pipelined pairs left "
                                                                  f"open, bounded at {durations.seconds(err.lower_s, 4)})")
                continue
            late = _late(trial.budget)
            errors.append((late, err))
            done[z] = _failed(z, late)
            continue
        except DnnplanError as err:
            late = _late(trial.budget)
            errors.append((late, err))
            done[z] = _failed(z, late)
            continue
        done[z] = outcome(answers[z])
    if parent is not None:
        parent.check()
    if not answers:
        if not errors:
            raise DnnplanError("no ZeRO stage was planned within the time limit: it ran out before the first "
                               "stage's search began", hint="raise --time-limit; without it the search has 20 s")
        err = min(errors, key=lambda e: e[0])[1]  # a stage's whose time did not run out, if any
        left = uncovered([done[z] for z in sorted(done)])
        if left and type(err) is DnnplanError:  # the stages the time limit left out may hold a plan
            raise DnnplanError(err.bare, file=err.file, layer=err.layer, field=err.field, line=err.line,
                               hint=f"ZeRO-{', ZeRO-'.join(map(str, left))} not planned or not finished within the "
                                    "time limit, and may hold a plan that fits: raise --time-limit"
                                    + (f"; or {err.hint}" if err.hint else ""))
        raise err
    best = min(answers, key=lambda z: (done[z].step_s, z))
    return answers[best], best, [done[z] for z in sorted(done)]


def overall_gap(step_s: float, weighed: list[Weighed]) -> float:
    """How much faster than ``step_s`` any covered stage's optimum could still be (0: none;
    :func:`uncovered` names the stages it leaves out)."""
    lower = min((w.lower_s for w in weighed), default=step_s)
    return max(0.0, 1.0 - lower / step_s) if step_s > 0 else 0.0


def uncovered(weighed: list[Weighed]) -> list[int]:
    """The ZeRO stages the time limit left unplanned or unfinished: the gap stated does not cover
    them, so an answer with any is never called optimal."""
    return [w.zero for w in weighed if not w.covered]


def _skip(z: int, done: dict[int, Weighed]) -> Weighed | None:
    """Why stage ``z`` is not planned (module docstring), or None."""
    if z == 2 and 1 in done and done[1].step_s is not None and not done[1].bound:
        return Weighed(2, lower_s=done[1].lower_s, bound=False,
                       skipped="not planned (its step is no less than ZeRO-1's, whose plan memory did not hold back)")
    below = done.get(2) if done.get(2) is not None and done[2].step_s is not None else done.get(1)
    if z == 3 and below is not None and below.step_s is not None and not below.bound:
        return Weighed(3, lower_s=below.lower_s, bound=False,
                       skipped=f"not planned (its step is no less than ZeRO-{below.zero}'s, whose plan memory did not hold back)")
    return None


def _short(budget: Budget) -> bool:
    """Too little time is left to plan one more stage: less than the longest an earlier stage's
    pipeline pairs took to bound (``Budget.bounds_s``: a stage's bounds are what cover it in the gap
    stated), or, before any stage has bounded pairs, :data:`LATE_SHARE` of the limit. (A stage's
    search may overrun its deadline by what one pipeline pair's bound or a whole batch's pricing
    takes, which the command's finishing reserve holds: ``dnnplan.search_bound``.)"""
    left = budget.left()
    if left is None or budget.seconds is None:
        return False
    return left < (budget.bounds_s if budget.bounds_s > 0 else LATE_SHARE * budget.seconds)


def _failed(z: int, late: bool) -> Weighed:
    """Stage ``z``'s outcome where its planning raised: unfinished when its time ran out, else no plan fits."""
    if late:
        return Weighed(z, lower_s=float("inf"), skipped=f"not finished (the time limit came first){UNCOVERED}",
                       covered=False)
    return Weighed(z, lower_s=float("inf"), skipped="has no plan that fits")


def _late(budget: Budget | None) -> bool:
    return budget is not None and budget.expired()


def _share(parent: Budget | None, z: int, done: dict[int, Weighed], settings: Settings, wrap,
           order: tuple[int, ...] = ORDER) -> Budget | None:
    """Stage ``z``'s budget: the time left, and its share of it once it holds a plan (module docstring)."""
    if parent is None:
        return None
    left = [x for x in order if x not in done and x != z and _skip(x, done) is None]
    seconds = parent.left()

    def lower(own: float) -> float:  # the least lower bound over the stages planned so far
        return min([own] + [w.lower_s for w in done.values()])

    # 2: only where 1 has no plan or memory held it back, mostly pruned by the step held then
    later = [x for x in order[order.index(z) + 1:] if x != 2 and x not in done]
    share = None if seconds is None else seconds / (1 + len(later))
    planned = [f"ZeRO-{w.zero}" for w in done.values() if w.step_s is not None or w.lower_s < float("inf")]
    covered = (f"stopped while planning ZeRO-{z}: the gap stated covers " + ", ".join(planned + [f"ZeRO-{z}"])
               + (f", not ZeRO-{', ZeRO-'.join(map(str, left))} (not planned yet)" if left else ""))
    pending = f"ZeRO-{', ZeRO-'.join(map(str, left))} not planned yet" if left else ""
    # finished after a stop: in the words of the stage planned then (Budget.covering, which every
    # Share sets before it offers), which may be a later one
    return Share(parent, seconds, lambda result, budget: wrap(result, budget, settings.with_zero(z),
                                                               budget.covering), lower, f"ZeRO-{z}",
                 share, len([x for x in order[order.index(z) + 1:] if x not in done]), pending, covered)
