"""What `dnnplan export --nearest` does, as one library call: the nearest plan the framework can run
(planner.export.nearest) and both plans priced now as `dnnplan predict PLAN.yaml` prices a plan
(executor.session.predict.predict_plan), the nearest one carrying its own prediction.

Each layout weighed (:func:`planner.export.nearest_layouts.layouts_weighed`: attention's most common and
those other layers take in part, as where attention splits the sequence and the MLPs their
weights) makes nearest plans, one with the recomputation nearest the plan's and one each with
none and with every transformer layer whole; on Megatron-LM the fastest of them also with the
fewest first layers of each chunk whole that fit (bisected). Of those the framework's file
writes, the fastest that fits the device's memory is exported (Llama 3 70B on 256 H100s:
attention's context 4 on every layer needs 116 GiB a device under Megatron-LM, the MLPs' tensor
4 with sequence parallelism fits); where none fits, the least memory any needs is named. A plan
whose own layout every layer takes keeps it (only its ZeRO stage, schedule or recomputation may
change): no other layout is weighed."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from costmodel.machine.loading import load_machine
from costmodel.step.pipeline import PipelinePrediction
from costmodel.step.prediction import StepPrediction
from executor.session.predict import predict_plan
from networks.errors import DnnplanError
from networks import durations
from networks.ir import Network
from planner.export.nearest import Nearest, choices_weighed, nearest_plan, recompute_counts
from planner.export.nearest_layouts import Weighed
from planner.plan.plan import Plan
from profiler import context


@dataclass(frozen=True)
class NearestExport:
    """The plan to export (the nearest, with its prediction, or the plan itself when ``changes`` is
    empty), what was changed, and the two predictions (None when nothing was changed)."""

    plan: Plan
    changes: tuple[str, ...]
    original: StepPrediction | PipelinePrediction | None = None
    nearest: StepPrediction | PipelinePrediction | None = None


def nearest_export(plan: Plan, net: Network, framework: str,
                   writes: Callable[[Plan], object] = lambda plan: None) -> NearestExport:
    """``plan`` of ``net`` made expressible in ``framework`` (planner.export.nearest) and priced: of
    the layouts and recomputations weighed, the fastest nearest plan that fits the device's memory
    (module docstring); ``writes(plan)``: raises :class:`DnnplanError` where the framework's file
    cannot state a nearest plan (another may be written). The most common layout's refusal is the
    one raised where no layout gives a plan."""
    machine = load_machine(plan.machine)
    longest, step = recompute_counts(plan, net, framework)
    made: list[tuple[Nearest, object, Weighed]] = []  # each nearest plan weighed, its prediction and layout
    refused: list[DnnplanError] = []

    def weigh(weighed: Weighed, whole: int | None) -> tuple[Nearest, object, Weighed] | None:
        """The nearest plan of ``weighed``'s layout and ``whole``'s recomputation, priced (None: the
        framework cannot state it); each distinct plan once."""
        try:
            got = nearest_plan(plan, net, framework, machine, weighed, whole)
            if got.changes:
                writes(got.plan)
        except DnnplanError as err:
            refused.append(err)
            return None
        same = next((m for m in made if m[0].plan == got.plan), None)
        if same is None and got.changes:
            same = (got, priced(got.plan, net), weighed)
            made.append(same)
        return same or (got, None, weighed)

    first = None
    for weighed, whole in choices_weighed(plan, net, framework):
        first = first or weighed
        if weighed is not first and made and not made[0][0].relaid:  # its own layout runs on every layer
            break
        got = weigh(weighed, whole)
        if got is not None and not got[0].changes:  # the plan runs as it is
            return NearestExport(plan, ())
    if not made:
        raise refused[0]
    before = priced(plan, net)
    limit = machine.device.mem_capacity_bytes * (1 + 1e-9)

    def fits(m) -> bool:
        """A nearest plan made and priced that fits the device's memory."""
        return m is not None and m[1] is not None and m[1].memory_peak_bytes <= limit

    fitting = [m for m in made if fits(m)]
    if not fitting and before.memory_peak_bytes <= limit:
        least = min(made, key=lambda m: m[1].memory_peak_bytes)
        raise over_memory(framework, machine, least[1].memory_peak_bytes, before.memory_peak_bytes, len(made))
    best = min(fitting or made, key=lambda m: m[1].step_s)
    if step == 1 and longest > 1 and fitting:  # the fewest first layers of each chunk recomputed whole that fit
        fewest = _fewest_whole(weigh, fits, best[2], longest)
        if fits(fewest) and fewest[1].step_s < best[1].step_s:
            best = fewest
    changes = best[0].changes
    if len(made) > 1:
        changes += (f"{len(made)} nearest plans weighed (a layout on every layer, a recomputation {framework} "
                    f"states): this one the fastest that {'fits' if fitting else 'runs'} "
                    f"({durations.seconds(best[1].step_s, 4)} a step)",)
    chosen = dataclasses.replace(best[0].plan, step_s=best[1].step_s, memory_peak_bytes=int(best[1].memory_peak_bytes))
    return NearestExport(chosen, changes, before, best[1])


def _fewest_whole(weigh, fits, weighed: Weighed, longest: int):
    """Of ``weighed``'s layout, the nearest plan recomputing the fewest first transformer layers of
    each chunk whole that fits (memory falls and the step grows with the count): bisected between
    none (over the memory) and every layer (within it), each count priced once; ``fits(m)``: made,
    priced and within the memory."""
    low, high = 0, longest
    best = weigh(weighed, high)
    if not fits(best):
        return best
    none = weigh(weighed, low)
    if fits(none):
        return none
    while high - low > 1:
        mid = (low + high) // 2
        got = weigh(weighed, mid)
        if fits(got):
            high, best = mid, got
        else:
            low = mid
    return best


def over_memory(framework: str, machine, need: float, planned: float, weighed: int) -> DnnplanError:
    """The refusal of a nearest plan over the device's memory where the plan fits (``need``: the
    least any of the ``weighed`` layouts' nearest plans needs)."""
    gib = 2.0 ** 30
    which = f"the nearest plan {framework} runs needs" if weighed == 1 else \
        f"each of the {weighed} nearest plans {framework} runs (a layout on every layer) needs at least"
    return DnnplanError(f"{which} {need / gib:.2f} GiB a device, over {machine.name}'s "
                        f"{machine.device.mem_capacity_bytes / gib:.2f} GiB (the plan's: {planned / gib:.2f} GiB): "
                        "it would not run",
                        hint=f"plan a layout {framework} runs as it is, one every transformer layer shares "
                        "(`dnnplan predict NETWORK --tensor T ... --out PLAN.yaml` without a pipeline, `dnnplan "
                        "plan NETWORK --pipeline S ... --out PLAN.yaml` with one), or more devices")


def priced(plan: Plan, net: Network) -> StepPrediction | PipelinePrediction:
    """``plan`` of ``net`` priced now on its machine's datasheet, as `dnnplan predict PLAN.yaml` prices it."""
    ctx = context.resolve(plan.network, plan.devices, plan.batch, plan.machine, None, choices=plan.choices)
    return predict_plan(plan, net, ctx)


def as_priced_now(plan: Plan, net: Network) -> Plan:
    """``plan`` with the step and memory it is predicted now, as `dnnplan predict PLAN.yaml` gives
    them for a plan priced on its machine's datasheet (a file edited by hand carries its old
    figures); a plan made with a profile table keeps the figures the table gave."""
    if plan.profile_fingerprint is not None:
        return plan
    now = priced(plan, net)
    return dataclasses.replace(plan, step_s=now.step_s, memory_peak_bytes=int(now.memory_peak_bytes))
