"""Every plan returned fits the memory limit it was planned under, as its peak is predicted (pure).

The solvers hold each plan's per-layer memory count under the limit (``memory_bound_bytes``: every
layer's persistent memory and the largest transient, :mod:`costmodel.step.prediction`); the predicted peak
counts a resharded input as the executor holds it (:mod:`costmodel.memory.held_inputs`: the block a
reshard wrote is kept for backward beside the producer's output). A plan whose layers reshard
large activations between them can so peak above the limit the count fitted: at sequence 65,536,
7B parameters on 8 H100s, a context-8 layer feeding a context-4 x tensor-2 layer kept 3.9 GiB of
received blocks, 83.9 GiB against 80 GiB.

:func:`fitting` plans again with the limit lowered by what the peak exceeded it by (twice that
the next time, and so on: another plan may reshard other layers; never by more than half the limit
left, :func:`lowered_limit`), until the peak fits (at most :data:`TRIES` plans, else one clear
error naming the limit asked for, also when nothing fits a lowered limit); how far it lowered the
limit is in the answer's note. The plan is then the planner's optimum under the lowered limit: its
proven gap is that search's, and a plan with a smaller excess under a higher limit may exist (the
per-layer count does not see which copy each layer keeps).

A search given the whole time limit leaves none for planning again: when a plan again ends
without a plan at the time limit (:class:`SearchOutOfTime`), ``refit(answer, under)`` plans the
over-limit answer's own layout (its pipeline degree, micro-batch count and schedule:
planner.first_plan.refit_choice, for ``dnnplan plan`` with or without ``--pipeline``) under the
lowered limit, within :data:`REFIT_SHARE` of the stated time limit past it (one pair's search, not
the whole search again, its stages relaxed, not closed exactly: a closing can take the whole share,
each refit): llm-foundry's MPT-7B at sequence 65,536 on 8 H100s, ZeRO-0, held an
over-limit plan after 2 s and searched on to its deadline, so its plan again had no time and the
stage ended with no plan. The answer so made is the best of its layout under the lowered limit,
not the optimum over every layout (its gap is its own pair's).
"""

from __future__ import annotations

from typing import Callable, TypeVar

from networks.errors import DnnplanError
from planner.pipeline.search import SearchOutOfTime

T = TypeVar("T")
GIB = 2.0 ** 30
#: plans made at most, the first included, before giving up on a limit the peak fits
TRIES = 4
#: the share of the stated time limit a refit of the answer's own layout may take past the limit
REFIT_SHARE = 0.25
#: the most of the limit one lowering takes off (:func:`lowered_limit`)
MOST_LOWERED = 0.5


def fitting(plan_under: Callable[[float], T], peak: Callable[[T], float], limit: float,
            refit: Callable[[T, float], T] | None = None,
            passes: tuple[type[DnnplanError], ...] = (),
            beaten: Callable[[T], DnnplanError | None] | None = None) -> tuple[T, str]:
    """``plan_under(limit)``'s answer whose ``peak`` fits ``limit`` (module docstring), and a note
    saying how far the limit was lowered ("" when the first plan fits). Raises
    :class:`DnnplanError` when none fits after :data:`TRIES` plans, or when planning under a lowered
    limit raises one (nothing fits it), naming ``limit``; ``refit(answer, under)``: the answer's
    layout planned under ``under`` when planning again runs out of time (else the error);
    ``passes``: errors of planning again that say something else than that nothing fits, raised as
    they are (a ZeRO stage beaten by a step held from another). ``beaten(answer)``: the error to
    raise instead of planning an over-limit answer again, where planning again cannot help (an
    answer already slower than a step held elsewhere: under a lower limit it is no faster), else None."""
    under, answer = limit, plan_under(limit)
    for k in range(TRIES - 1):
        over = peak(answer) - limit
        if over <= limit * 1e-9:
            break
        if beaten is not None and (err := beaten(answer)) is not None:
            raise err
        under = lowered_limit(under, over, k)
        try:
            answer = _plan_again(plan_under, refit, answer, under)
        except (SearchOutOfTime, *passes):
            raise
        except DnnplanError as err:  # nothing fits the lowered limit: said against the limit asked for
            raise _no_fit(limit, peak(answer), under, err.bare) from None
    else:
        if peak(answer) > limit * (1 + 1e-9):
            raise _no_fit(limit, peak(answer), under)
    if under >= limit:
        return answer, ""
    return answer, (f"the first plan's peak, counting the resharded inputs the executor keeps, exceeded the "
                    f"{limit / GIB:.2f} GiB limit, so it was planned under {under / GIB:.4g} GiB")


def _plan_again(plan_under: Callable[[float], T], refit: Callable[[T, float], T] | None, answer: T,
                under: float) -> T:
    """``plan_under(under)``, or ``refit(answer, under)`` when that runs out of time."""
    try:
        return plan_under(under)
    except SearchOutOfTime:
        if refit is None:
            raise
        return refit(answer, under)


def lowered_limit(under: float, over: float, k: int) -> float:
    """The limit the ``k``-th plan again is made under (k from 0): ``under`` lowered by the peak's
    excess ``over`` the limit, doubled each time, but by at most :data:`MOST_LOWERED` of ``under``:
    an excess as large as what is left (a search cut short by its time limit keeps one layout whose
    excess does not shrink as the limit does: 12.3 GiB on 80 GiB, lowered by 12.3, 24.7 and 49.3 GiB,
    came to -6.29 GiB) would otherwise plan under a limit of nothing, or less."""
    return max(under - over * 2 ** k, under * (1 - MOST_LOWERED))


def _no_fit(limit: float, peak: float, under: float, why: str = "") -> DnnplanError:
    """No plan's predicted peak fits ``limit``: the last plan's ``peak``, the lowered limit ``under``
    and, when planning under it found nothing, ``why``."""
    excess = (f"no plan was found whose peak fits {limit / GIB:.3f} GiB a device: the resharded inputs the "
              f"executor keeps add {(peak - limit) / GIB:.2f} GiB")
    if why:
        return DnnplanError(f"{excess}; planned again under {under / GIB:.3f} GiB: {why}",
                            hint="allow more --memory, or more --devices")
    return DnnplanError(f"{excess} to the per-layer count the planner holds under {under / GIB:.3f} GiB",
                        hint="allow more --memory, or more --devices")
