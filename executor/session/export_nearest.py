"""What `dnnplan export --nearest` does, as one library call: the nearest plan the framework can run
(planner.export.nearest) and both plans priced now as `dnnplan predict PLAN.yaml` prices a plan
(executor.session.predict.predict_plan), the nearest one carrying its own prediction.

Where the plan's transformer layers take more than one layout in part (attention splitting the
sequence, the MLPs their weights), each layout weighed (:func:`planner.export.nearest.layouts_weighed`)
makes a nearest plan, and the fastest of those that fit the device's memory and that the framework's
file writes is the one exported (Llama 3 70B on 256 H100s: attention's context 4 on every layer
needs 116 GiB a device under Megatron-LM, the MLPs' tensor 4 with sequence parallelism fits);
where none fits, the one of least memory is named. A plan whose own layout every layer takes keeps
it (only its ZeRO stage, schedule or recomputation may change): no other layout is weighed."""

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
from planner.export.nearest import Nearest, layouts_weighed, nearest_plan
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
    the layouts weighed, the fastest nearest plan that fits the device's memory (module docstring);
    ``writes(plan)``: raises :class:`DnnplanError` where the framework's file cannot state a nearest
    plan (another layout's may be written). The most common layout's refusal is the one raised
    where no layout gives a plan."""
    machine = load_machine(plan.machine)
    made: list[Nearest] = []
    refused: DnnplanError | None = None
    for weighed in layouts_weighed(plan, net, framework):
        for outside in (False, True):  # the loss's recomputation dropped, or its memory saved in the layers
            try:
                got = nearest_plan(plan, net, framework, machine, weighed, outside)
                if not got.changes:  # the plan runs as it is
                    return NearestExport(plan, ())
                writes(got.plan)
            except DnnplanError as err:
                refused = refused or err
                continue
            if all(got.plan != other.plan for other in made):
                made.append(got)
        if made and not made[0].relaid:  # the plan's own layout runs on every layer: kept, no other weighed
            break
    if not made:
        raise refused
    before = priced(plan, net)
    after = [priced(got.plan, net) for got in made]
    limit = machine.device.mem_capacity_bytes * (1 + 1e-9)
    fits = [i for i, a in enumerate(after) if a.memory_peak_bytes <= limit]
    if not fits and before.memory_peak_bytes <= limit:
        least = min(range(len(made)), key=lambda i: after[i].memory_peak_bytes)
        raise over_memory(framework, machine, after[least].memory_peak_bytes, before.memory_peak_bytes, len(made))
    best = min(fits or range(len(made)), key=lambda i: (after[i].step_s, i))
    changes = made[best].changes
    if len(made) > 1:
        changes += (f"{len(made)} nearest plans weighed, each one layout on every layer: this one the fastest that "
                    f"{'fits' if fits else 'runs'} ({durations.seconds(after[best].step_s, 4)} a step)",)
    chosen = dataclasses.replace(made[best].plan, step_s=after[best].step_s,
                                 memory_peak_bytes=int(after[best].memory_peak_bytes))
    return NearestExport(chosen, changes, before, after[best])


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
