"""One plan run from start to comparison, as library calls that return results and never print.

The flow: :func:`prepare` reads and checks the plan (its device count must equal the ranks, before
anything is launched), resolves the compute model the plan was made with and checks the profile
matches this run; :func:`measure` launches ``mpiexec -n P python -m executor.launch.worker`` (or, inside
an MPI job, runs on its ranks), then predicts with :func:`costmodel.step.prediction.predict_step` and
compares (docs/executor.md). What a user should be told along the way is returned as warning
lines (:attr:`Prepared.warnings`, :func:`executor.report.job_view.non_finite_loss_warning`), for
the command line to show.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass, replace
from pathlib import Path

from costmodel.step.collective_calls import (COMM_PREFIX, CommCall, comm_measured_key, measured_from_samples,
                                             step_collectives)
from costmodel.compute.model import ComputeModel, OnDemand
from costmodel.machine.loading import NODE_CORES_ENV, load_machine
from costmodel.machine.model import Machine
from costmodel.compute.profile_table import foreign_reason
from costmodel.step.pipeline import PipelinePrediction
from costmodel.step.prediction import StepPrediction, predict_step
from executor.launch import mpiexec as launcher
from executor.report.collect import aggregate
from executor.report.compare import Comparison, Measured, compare_prediction
from executor.launch.node import share_node_cores
from executor.report.pipeline import compare_pipeline
from executor.probes.rank_terms import collective_code_s, wait_per_work
from executor.runtime.stage import run_strategies
from executor.session.placement import choose_device
from executor.session.runnable import cannot_run
from executor.probes.step_kernels import Shared, by_layer, collectives_in_step, in_step, kernels_in_step
from executor.launch.worker import JobResult, abort_with, run_job, start_watchdog
from kernels import KERNELS_REVISION
from networks.errors import DnnplanError
from networks.ir import Network
from planner.plan.plan import Plan
from planner.plan.plan_file import read_plan
from planner.pipeline.to_plan import predict_pipelined
from profiler import context
from profiler.tables.fingerprint import fingerprint
from profiler.in_step.kernels import entries_from_samples
from profiler.probes.launch import find_mpiexec
from lifecycle.scratch import scratch_folder


@dataclass(frozen=True)
class Prepared:
    """A plan checked and ready to run: its file, network, machine, compute model and threads."""

    path: str
    plan: Plan
    net: Network
    machine: Machine
    compute: ComputeModel
    threads: int
    warnings: tuple[str, ...] = ()  # for the user: the prediction may not be the one the plan was made with
    array_backend: str = "numpy"  # where the ranks run: numpy (the host) or cupy (GPUs; executor.session.placement)
    profile_path: str | None = None  # the table the prediction reads (a GPU run pins its cuDNN engines)
    graphs: bool | None = None  # replay timed steps as a CUDA graph: asked, refused, or where allowed (None)
    # the step predicted from the profile's calls timed alone, when the prediction is made from the
    # plan's calls timed in its step's context (:func:`in_step_context`; None: it is not)
    profile_step_s: float | None = None


def _at_least(name: str, value: float, minimum: float = 1) -> None:
    if value < minimum:
        raise DnnplanError(f"--{name} must be at least {minimum:g}, got {value:g}")


def _table_threads(compute: ComputeModel) -> int | None:
    t = compute.table.fingerprint.get("threads") if compute.table is not None else None
    return int(t) if t else None


def _foreign_device(plan: Plan, table, threads: int) -> None:
    """Refuse a numpy profile of `local` measured on another computer than this one."""
    fp = dict(table.fingerprint)
    if plan.machine != "local" or fp.get("backend", "numpy") != "numpy":
        return
    here = fingerprint("numpy", threads, int(fp.get("concurrency", 1)))
    why = foreign_reason({**fp, "threads": threads}, here)
    if why:
        raise DnnplanError(f"the profile table was measured on another device ({why})", file=table.source,
                           hint="profile this computer (`dnnplan profile`) or pass its table with --profile")


def profile_check(plan: Plan, compute: ComputeModel, threads: int) -> list[str]:
    """Refuse a profile of another device; return warnings for a kernel revision, thread count or
    plan fingerprint that differs from this run (predictions would then not be the ones the plan
    was made with)."""
    table = compute.table
    if table is None:
        if plan.profile_fingerprint:
            return [f"the plan was made with profile {plan.profile_fingerprint} but no profile table is "
                    "loaded here: predictions use the datasheet roofline (pass --profile)"]
        return []
    _foreign_device(plan, table, threads)
    warnings = []
    fp = dict(table.fingerprint)
    rev = fp.get("kernels")
    if str(rev) != str(KERNELS_REVISION):
        warnings.append(f"the profile's kernels are revision {rev if rev is not None else '1 or older'} but this "
                        f"build runs revision {KERNELS_REVISION}: kernel times may differ from the prediction "
                        "(re-profile: `dnnplan profile`)")
    t = fp.get("threads")
    if t and int(t) != threads:
        warnings.append(f"the profile was measured with {t} thread(s) per rank but this run uses {threads}: "
                        f"kernel times will differ from the prediction (pass --threads {t})")
    short = table.short_id
    if plan.profile_fingerprint and short and plan.profile_fingerprint != short:
        warnings.append(f"the plan was made with profile {plan.profile_fingerprint} but the profile loaded is "
                        f"{short}: re-plan to compare against the prediction the plan was made with")
    return warnings


def agree_node_cores() -> None:
    """Inside an MPI job, every rank sizes machine `local` by the cores the job's ranks share on the
    node, not by the core it may be bound to (executor.launch.node); a collective over the job, made once
    (``validate`` prepares one plan after another)."""
    if not os.environ.get(NODE_CORES_ENV) and launcher.inside_mpi_job():
        share_node_cores(launcher.world())


def _machine_warnings(plan: Plan, machine: Machine) -> list[str]:
    out = []
    if plan.devices > 1 and machine.fitted and not machine.fitted_cold:
        out.append("the communication profile has no cold fits (made before `dnnplan profile-comm` timed "
                   "collectives after a cache pass): collectives that follow a layer's kernels are priced "
                   "as if still in cache, so lower than they run; re-run `dnnplan profile-comm`")
    if plan.machine != "local":
        out.append(f"the plan is for machine '{plan.machine}', not this computer: predicted times are "
                   f"{plan.machine}'s, measured times this computer's")
    return out


def prepare(plan_path: str, ranks: int, threads: int | None, profile: str | None, fresh: bool = False,
            device: str = "auto", foreign_ok: bool = False) -> Prepared:
    """Everything checked before a single rank starts. ``fresh`` (``--fresh-profile``): warn when
    the compute model cannot time the prediction's kernels inside the run. ``device``
    (``--device``): where the ranks run (executor.session.placement)."""
    _at_least("ranks", ranks)
    agree_node_cores()
    plan, net = read_plan(plan_path)
    if plan.devices != ranks:
        raise DnnplanError(f"the plan is for {plan.devices} devices, not --ranks {ranks}", file=plan_path,
                           hint=f"run it with --ranks {plan.devices}, or re-plan for {ranks} devices")
    machine = load_machine(plan.machine)
    compute = context.compute_model(machine, profile, plan.devices, precision=plan.choices.precision,
                                    foreign_ok=foreign_ok)
    array_backend, device_warnings = choose_device(plan, plan_path, compute, device, foreign_ok)
    if (err := cannot_run(plan, plan_path, array_backend)) is not None:
        raise err
    machine = context.profiled_links(machine, compute)  # links fitted by `dnnplan profile-comm`
    if threads is not None:
        _at_least("threads", threads)
    else:
        t = _table_threads(compute)
        threads = t if t and t * ranks <= launcher.usable_cores() else launcher.threads_per_rank(ranks)
    warnings = profile_check(plan, compute, threads) + _machine_warnings(plan, machine) + device_warnings
    scattered = [lp.name for lp in plan.layers if lp.strategy.seq_scatter]
    if scattered:
        warnings.append(f"{len(scattered)} layer(s) (first: {scattered[0]}) take Megatron's sequence-parallel "
                        "variant (SP); the executor runs each as its plain split (all-reduce, then slice) and "
                        "predicts that")
    if fresh and plan.pipeline is not None:
        warnings.append("--fresh-profile: the executor does not time a pipelined plan's kernels inside the run; "
                        "this is the ahead-of-time prediction")
    elif fresh and not isinstance(compute, OnDemand):
        warnings.append("--fresh-profile applies to machine `local` without --profile: this prediction "
                        "uses the given table as it is")
    return Prepared(str(Path(plan_path).resolve()), plan, net, machine, compute, threads, tuple(warnings),
                    array_backend=array_backend, profile_path=compute.table.source if compute.table else None)


def _in_job(prep: Prepared, *, steps: int, warmup: int, check: bool, trace: bool, timeout_s: float,
            kernel_calls: list | None) -> JobResult | None:
    """Run on the ranks of the MPI job this process is one of."""
    comm = launcher.world()
    if comm.Get_size() != prep.plan.devices:
        raise DnnplanError(f"this MPI job has {comm.Get_size()} ranks but the plan is for "
                           f"{prep.plan.devices} devices", file=prep.path,
                           hint=f"start it with mpiexec -n {prep.plan.devices}, or without mpiexec: `dnnplan execute` "
                                "starts the ranks itself")
    dog = start_watchdog(comm, timeout_s)
    try:
        kernel_calls = comm.bcast(kernel_calls, root=0)  # listed by rank 0 alone (measure)
        return run_job(prep.path, comm, steps=steps, warmup=warmup, check=check, keep_spans=trace,
                       threads=prep.threads, kernel_calls=kernel_calls, array_backend=prep.array_backend,
                       profile=prep.profile_path, graphs=prep.graphs)
    except BaseException as err:  # noqa: BLE001 - one rank's failure ends every rank
        abort_with(comm, err)
    finally:
        dog.cancel()


def run_measure(prep: Prepared, *, steps: int, warmup: int, check: bool, trace: bool,
                timeout_s: float, kernel_calls: list | None = None) -> JobResult | None:
    """Run the plan on P ranks; the JobResult on rank 0 (and in the launching process), else None.
    ``kernel_calls`` are timed inside the run after every step (profiler.in_step.kernels)."""
    if launcher.inside_mpi_job():
        return _in_job(prep, steps=steps, warmup=warmup, check=check, trace=trace, timeout_s=timeout_s,
                       kernel_calls=kernel_calls)
    with scratch_folder("run") as tmp:
        result_path = os.path.join(tmp, "result.pkl")
        calls_path = None
        if kernel_calls:
            calls_path = os.path.join(tmp, "kernel_calls.pkl")
            with open(calls_path, "wb") as fh:
                pickle.dump(list(kernel_calls), fh)
        cmd = launcher.worker_command(find_mpiexec(), prep.plan.devices, prep.path, result_path,
                                      steps=steps, warmup=warmup, check=check, trace=trace,
                                      threads=prep.threads, timeout_s=timeout_s, time_kernels=calls_path,
                                      array_backend=prep.array_backend, profile=prep.profile_path,
                                      graphs=prep.graphs)
        launcher.launch(cmd, prep.threads, timeout_s)
        try:
            with open(result_path, "rb") as fh:
                return pickle.load(fh)
        except (OSError, pickle.UnpicklingError, EOFError) as err:
            raise DnnplanError(f"the run ended without a result from rank 0 ({err})") from None


def predict(prep: Prepared, machine: Machine | None = None) -> StepPrediction | PipelinePrediction:
    """The cost model's step for the prepared plan (on ``machine``'s links when given); a pipelined
    plan's is a :class:`PipelinePrediction`."""
    if prep.plan.pipeline is not None:
        return predict_pipelined(prep.plan, prep.net, run_strategies(prep.plan), machine or prep.machine,
                                 prep.compute)
    pred = predict_step(prep.net, prep.plan.batch, run_strategies(prep.plan), prep.plan.algorithms(),
                        machine or prep.machine, prep.compute, prep.plan.choices.sharded_optimizer,
                        grads_in_backward=not prep.plan.choices.zero)  # as executor.runtime.stage makes them
    wait = wait_per_work(prep.plan, prep.machine, prep.compute)  # first: it times the code around collectives too
    return replace(pred, wait_s=wait * pred.work_s,
                   collective_code_s=collective_code_s(prep.plan, prep.net, prep.machine, prep.compute, pred))


def fresh_calls(prep: Prepared) -> list:
    """``--fresh-profile``: the kernel calls the plan's prediction looks up and, when the plan's
    ranks share one node, the collectives it prices (costmodel.step.collective_calls), to be timed inside
    the run (profiler.in_step.kernels, profiler.in_step.collectives); none for a compute model that is not this
    computer's on-demand profile (:func:`prepare` warns of that)."""
    if not isinstance(prep.compute, OnDemand) or prep.plan.pipeline is not None:
        return []
    made = []  # the prediction the kernel calls were listed from (none when on-demand timing is off)
    calls = list(prep.compute.calls_of(lambda: made.append(predict(prep))))
    if 1 < prep.plan.devices <= prep.machine.devices_per_node:
        calls += step_collectives(prep.net, prep.plan.batch, run_strategies(prep.plan),
                                  made[0] if made else predict(prep), prep.plan.algorithms())
    return calls


def step_context_entries(prep: Prepared, shared: Shared | None = None) -> dict:
    """The kernel calls the plan's prediction looks up, timed now in its step's order and context
    (profiler.in_step.before_run), and, for ranks sharing this computer, the collectives it prices
    (profiler.probes.comm_context; keyed ``comm:...``), before the run; empty for a compute model that
    is not this computer's on-demand profile, with on-demand timing off, for a pipelined plan, or
    inside an MPI job (whose other ranks would wait meanwhile; launched by `dnnplan execute`,
    they do not). ``shared``: calls timed for other plans weighed beside it (executor.session.step_choice)."""
    if not isinstance(prep.compute, OnDemand) or prep.plan.pipeline is not None or launcher.inside_mpi_job():
        return {}
    made = []
    calls = [c for c in prep.compute.calls_of(lambda: made.append(predict(prep))) if not isinstance(c, CommCall)]
    entries = kernels_in_step(prep, calls, shared)
    p = prep.plan.devices
    if entries and 1 < p <= prep.machine.devices_per_node:
        collectives = step_collectives(prep.net, prep.plan.batch, run_strategies(prep.plan),
                                       made[0] if made else predict(prep), prep.plan.algorithms())
        entries = {**entries, **collectives_in_step(prep, collectives, shared)}
    return entries


def in_step_context(prep: Prepared, entries: dict) -> Prepared:
    """The prepared plan whose prediction uses ``entries`` (:func:`step_context_entries`: its
    kernels' entries installed in the compute model, its collectives' medians as the machine's
    measured collectives), with the step predicted from the profile alone kept beside
    (:attr:`Prepared.profile_step_s`)."""
    if not entries:
        return prep
    alone = predict(prep).step_s
    prep.compute.install({k: e for k, e in entries.items() if not k.startswith(COMM_PREFIX)})
    if isinstance(prep.compute, OnDemand):
        prep.compute.retime_dispatch()  # the time between kernels too, as the machine is now
    measured = tuple((comm_measured_key(k), e.median_s) for k, e in entries.items() if k.startswith(COMM_PREFIX))
    machine = replace(prep.machine, measured=measured) if measured else prep.machine
    return replace(prep, machine=machine, profile_step_s=alone)


def in_run_unavailable(compute: ComputeModel, profile: str | None, machine: str) -> str | None:
    """Why the prediction's kernels cannot be timed inside a run of this compute model (None: they
    can): only this computer's on-demand profile (machine `local`, no ``--profile``) can take them."""
    if isinstance(compute, OnDemand):
        return None if getattr(compute, "enabled", True) else "on-demand timing is off (DNNPLAN_NO_PROFILE)"
    if profile:
        return "--profile given: the prediction uses that table as it is, no kernel is timed inside the run"
    if machine != "local":
        return f"machine '{machine}' is not this computer: its kernels cannot be timed inside the run"
    return f"compute model {compute.name} cannot time kernels inside the run"


def in_run_comparison(prep: Prepared, job: JobResult, measured: Measured,
                      kernel_calls: list | None) -> Comparison | None:
    """The prediction from the calls timed inside the run against the run (None without samples):
    their entries in this computer's profile are replaced by the median of those samples first
    (in memory only), and the collectives among them price those collectives
    (``Machine.measured``), so the prediction uses the machine's speed of the run."""
    if not (kernel_calls and job.kernel_samples and isinstance(prep.compute, OnDemand)):
        return None
    todo = in_step(prep.net, prep.plan, [c for c in kernel_calls if not isinstance(c, CommCall)])
    prep.compute.install(by_layer(todo, entries_from_samples(todo.calls, job.kernel_samples)))
    machine = prep.machine
    if got := measured_from_samples(kernel_calls, job.kernel_samples):
        machine = replace(machine, measured=got)
    return compare_run(prep, measured, None, machine)


def compare_run(prep: Prepared, measured: Measured, ranks: list | None, machine: Machine | None = None) -> Comparison:
    """The run against the plan's prediction (per stage too for a pipelined plan, given the ranks' times)."""
    pred = predict(prep, machine)
    if isinstance(pred, PipelinePrediction):
        return compare_pipeline(pred, measured, ranks)
    return compare_prediction(pred, measured)


def measure_both(prep: Prepared, *, steps: int, warmup: int, check: bool, trace: bool, timeout_s: float,
                 in_run: bool) -> tuple[JobResult | None, Comparison | None, Comparison | None]:
    """Run the plan once: (job, the ahead-of-time comparison, the in-run one or None); all None on
    ranks other than 0 of an MPI job. ``in_run``: time the prediction's calls inside the run
    (:func:`fresh_calls`), after each step and outside its clock; the ahead-of-time prediction is
    made first, from the profile as it was before the run."""
    root = True
    if in_run and launcher.inside_mpi_job():
        root = launcher.world().Get_rank() == 0  # one rank lists (and, if missing, profiles) the calls
    calls = fresh_calls(prep) if in_run and root else []
    job = run_measure(prep, steps=steps, warmup=warmup, check=check, trace=trace, timeout_s=timeout_s,
                      kernel_calls=calls)
    if job is None:
        return None, None, None
    measured = aggregate(job.ranks, steps)
    ahead = compare_run(prep, measured, job.ranks)  # before the in-run entries are installed
    return job, ahead, in_run_comparison(prep, job, measured, calls)


def measure(prep: Prepared, *, steps: int, warmup: int, check: bool, trace: bool, timeout_s: float,
            fresh: bool) -> tuple[JobResult | None, Comparison | None]:
    """Run the plan and compare it with its prediction (None, None on ranks other than 0 of an MPI job);
    ``fresh``: with the prediction's kernels timed inside the run (:func:`fresh_calls`)."""
    job, ahead, fresh_cmp = measure_both(prep, steps=steps, warmup=warmup, check=check, trace=trace,
                                         timeout_s=timeout_s, in_run=fresh)
    return job, ahead if fresh_cmp is None else fresh_cmp
