"""The terms the executor's prediction adds to the cost model's step when its ranks share this
computer: their wait for the slowest rank (executor.probes.wait) and the executor's own code around
each collective (executor.probes.collective_code), both from the profile (profiler.probes.rank_wait). Neither is in
a kernel's or an isolated collective's timing, and `dnnplan plan`'s solver does not price them;
the executor's predictions do (executor.session.execute.predict), and so do the plans weighed in their
step's context (executor.session.step_choice)."""

from __future__ import annotations

from costmodel.step.barriers import step_barriers
from costmodel.compute.model import ComputeModel, OnDemand
from costmodel.machine.model import Machine
from costmodel.compute.profiled import ProfiledCompute
from costmodel.step.prediction import StepPrediction
from executor.launch import mpiexec as launcher
from executor.runtime.stage import run_strategies
from networks.ir import Network
from planner.plan.plan import Plan


def _applies(plan: Plan, machine: Machine, compute: ComputeModel) -> bool:
    """Whether the plan's ranks share one computer whose profile measures them."""
    return 1 < plan.devices <= machine.devices_per_node and isinstance(compute, ProfiledCompute)


def wait_per_work(plan: Plan, machine: Machine, compute: ComputeModel) -> float:
    """The plan's ranks' wait for the slowest per second of work, when they share this computer
    and its profile measured it (executor.probes.wait; timed now if the cache lacks it, except
    inside an MPI job, whose other ranks would wait meanwhile); 0 otherwise."""
    if not _applies(plan, machine, compute):
        return 0.0
    if isinstance(compute, OnDemand):
        return compute.wait_per_work(plan.devices, time_missing=not launcher.inside_mpi_job())
    return compute.wait_per_work(plan.devices)


def collective_code_s(plan: Plan, net: Network, machine: Machine, compute: ComputeModel,
                      pred: StepPrediction) -> float:
    """The executor's own code around the collectives of the step ``pred`` prices: per barrier
    the plan makes (costmodel.step.barriers), the profile's time of its kind after the pass before it
    (executor.probes.collective_code, measured with the wait: ask :func:`wait_per_work` first, which
    times both when the cache lacks them); 0 where :func:`wait_per_work` is."""
    if not _applies(plan, machine, compute):
        return 0.0
    return sum(compute.collective_code_s(plan.devices, b.kind, b.after_bytes)
               for b in step_barriers(net, plan.batch, run_strategies(plan), pred, plan.algorithms()))
