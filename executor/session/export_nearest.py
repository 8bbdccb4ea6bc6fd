"""What `dnnplan export --nearest` does, as one library call: the nearest plan the framework can run
(planner.export.nearest) and both plans priced now as `dnnplan predict PLAN.yaml` prices a plan
(executor.session.predict.predict_plan), the nearest one carrying its own prediction."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from costmodel.machine.loading import load_machine
from costmodel.step.pipeline import PipelinePrediction
from costmodel.step.prediction import StepPrediction
from executor.session.predict import predict_plan
from networks.errors import DnnplanError
from networks.ir import Network
from planner.export.nearest import nearest_plan
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


def nearest_export(plan: Plan, net: Network, framework: str) -> NearestExport:
    """``plan`` of ``net`` made expressible in ``framework`` (planner.export.nearest) and priced."""
    machine = load_machine(plan.machine)
    got = nearest_plan(plan, net, framework, machine)
    if not got.changes:
        return NearestExport(plan, ())
    before, after = priced(plan, net), priced(got.plan, net)
    limit = machine.device.mem_capacity_bytes
    if after.memory_peak_bytes > limit * (1 + 1e-9) >= before.memory_peak_bytes:
        gib = 2.0 ** 30
        raise DnnplanError(f"the nearest plan {framework} runs needs {after.memory_peak_bytes / gib:.2f} GiB a "
                           f"device, over {machine.name}'s {limit / gib:.2f} GiB (the plan's: "
                           f"{before.memory_peak_bytes / gib:.2f} GiB): it would not run",
                           hint=f"plan a layout {framework} runs as it is, one every transformer layer shares "
                           "(`dnnplan predict NETWORK --tensor T ... --out PLAN.yaml` without a pipeline, `dnnplan "
                           "plan NETWORK --pipeline S ... --out PLAN.yaml` with one), or more devices")
    made = dataclasses.replace(got.plan, step_s=after.step_s, memory_peak_bytes=int(after.memory_peak_bytes))
    return NearestExport(made, got.changes, before, after)


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
