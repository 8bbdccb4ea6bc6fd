"""`dnnplan execute` and `dnnplan validate`: run plans across MPI ranks and measure them against
the prediction (docs/executor.md).

The flow of one run: read and check the plan (its device count must equal --ranks, before
anything is launched) -> resolve the compute model the plan was made with and check the profile
matches this run -> launch ``mpiexec -n P python -m executor.worker`` (or, inside an MPI job, run
on its ranks) -> predict with :func:`costmodel.step.predict_step` -> compare -> report, JSON, trace.
"""

from __future__ import annotations

import json
import os
import pickle
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from costmodel.compute import ComputeModel
from costmodel.machine import Machine
from executor import launch as launcher
from executor import report
from executor.compare import Comparison, compare_prediction, comparison_json
from executor.worker import JobResult, first_non_finite
from networks.errors import DnnplanError
from networks.ir import Network
from planner.app import RefreshOpt, app, check_refresh, fail_line
from planner.plan import Plan

RanksOpt = Annotated[int, typer.Option("--ranks", "-n", help="MPI ranks to run on; must equal the plan's devices.")]
StepsOpt = Annotated[int, typer.Option("--steps", help="Timed training steps (after the warm-up).")]
WarmupOpt = Annotated[int, typer.Option("--warmup", help="Untimed warm-up steps first.")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", help="Seconds before the whole run is stopped.")]
ThreadsOpt = Annotated[Optional[int], typer.Option("--threads", help="BLAS/OpenMP threads per rank "
                                                   "\\[default: the profile's, else cores // ranks].")]
ProfileOpt = Annotated[Optional[str], typer.Option("--profile", help="The profile table the plan was made "
                                                   "with \\[default: the machine's].")]
FreshOpt = Annotated[bool, typer.Option("--fresh-profile", help="Machine `local`: time the prediction's "
                                        "kernels and collectives again inside the run, once per rank after "
                                        "every timed step, and predict from those timings (a shared VM's "
                                        "speed drifts by tens of percent within hours).")]


@dataclass(frozen=True)
class Prepared:
    path: str
    plan: Plan
    net: Network
    machine: Machine
    compute: ComputeModel
    threads: int


def _positive(name: str, value: float, minimum: float = 1) -> None:
    if value < minimum:
        raise DnnplanError(f"--{name} must be at least {minimum:g}, got {value:g}")


def _table_threads(compute: ComputeModel) -> int | None:
    table = getattr(compute, "table", None)
    t = getattr(table, "fingerprint", {}).get("threads") if table is not None else None
    return int(t) if t else None


def profile_check(plan: Plan, compute: ComputeModel, threads: int) -> list[str]:
    """Refuse a profile of another device; return warnings for a thread count or plan fingerprint
    that differs from this run (predictions would then not be the ones the plan was made with)."""
    warnings = []
    table = getattr(compute, "table", None)
    if table is None:
        if plan.profile_fingerprint:
            warnings.append(f"the plan was made with profile {plan.profile_fingerprint} but no profile table is "
                            "loaded here: predictions use the datasheet roofline (pass --profile)")
        return warnings
    fp = dict(getattr(table, "fingerprint", {}))
    if plan.machine == "local" and fp.get("backend", "numpy") == "numpy":
        try:
            from costmodel.profile_table import foreign_reason  # noqa: PLC0415
            from profiler.fingerprint import fingerprint  # noqa: PLC0415
            here = fingerprint("numpy", threads, int(fp.get("concurrency", 1)))
            why = foreign_reason({**fp, "threads": threads}, here)
        except ImportError:  # the profiler's fingerprint is not available in this build
            why = None
        if why:
            raise DnnplanError(f"the profile table was measured on another device ({why})",
                               file=getattr(table, "source", None),
                               hint="profile this computer (`dnnplan profile`) or pass its table with --profile")
    try:
        from profiler.kernels import KERNELS_REVISION  # noqa: PLC0415
    except ImportError:  # the profiler is not available in this build
        KERNELS_REVISION = None
    rev = fp.get("kernels")
    if KERNELS_REVISION is not None and str(rev) != str(KERNELS_REVISION):
        warnings.append(f"the profile's kernels are revision {rev if rev is not None else '1 or older'} but this "
                        f"build runs revision {KERNELS_REVISION}: kernel times may differ from the prediction "
                        "(re-profile: `dnnplan profile`)")
    t = fp.get("threads")
    if t and int(t) != threads:
        warnings.append(f"the profile was measured with {t} thread(s) per rank but this run uses {threads}: "
                        f"kernel times will differ from the prediction (pass --threads {t})")
    short = getattr(table, "short_id", None)
    if plan.profile_fingerprint and short and plan.profile_fingerprint != short:
        warnings.append(f"the plan was made with profile {plan.profile_fingerprint} but the profile loaded is "
                        f"{short}: re-plan to compare against the prediction the plan was made with")
    return warnings


def agree_node_cores() -> None:
    """Inside an MPI job, every rank sizes machine `local` by the cores the job's ranks share on the
    node, not by the core it may be bound to (executor.node); a collective over the job, made once
    (``validate`` prepares one plan after another)."""
    from costmodel.files import NODE_CORES_ENV  # noqa: PLC0415
    if not os.environ.get(NODE_CORES_ENV) and launcher.inside_mpi_job():
        from mpi4py import MPI  # noqa: PLC0415
        from executor.node import share_node_cores  # noqa: PLC0415
        share_node_cores(MPI.COMM_WORLD)


def prepare(plan_path: str, ranks: int, threads: int | None, profile: str | None) -> Prepared:
    """Everything checked before a single rank starts."""
    from costmodel.files import load_machine  # noqa: PLC0415
    from planner import context  # noqa: PLC0415
    from planner.context import compute_model  # noqa: PLC0415
    from planner.plan_file import read_plan  # noqa: PLC0415
    _positive("ranks", ranks)
    agree_node_cores()
    plan, net = read_plan(plan_path)
    if plan.devices != ranks:
        raise DnnplanError(f"the plan is for {plan.devices} devices, not --ranks {ranks}", file=plan_path,
                           hint=f"run it with --ranks {plan.devices}, or re-plan for {ranks} devices")
    machine = load_machine(plan.machine)
    compute = compute_model(machine, profile, plan.devices)
    links = getattr(context, "profiled_links", None)  # links fitted by `dnnplan profile-comm`, when built
    machine = links(machine, compute) if links is not None else machine
    if threads is not None:
        _positive("threads", threads)
    else:
        t = _table_threads(compute)
        threads = t if t and t * ranks <= launcher.usable_cores() else launcher.threads_per_rank(ranks)
    for w in profile_check(plan, compute, threads):
        report.warn(w)
    if plan.devices > 1 and getattr(machine, "fitted", ()) and not getattr(machine, "fitted_cold", ()):
        report.warn("the communication profile has no cold fits (made before `dnnplan profile-comm` timed "
                    "collectives after a cache pass): collectives that follow a layer's kernels are priced "
                    "as if still in cache, so lower than they run; re-run `dnnplan profile-comm`")
    if plan.machine not in ("local",) and getattr(machine, "device", None) is not None:
        report.warn(f"the plan is for machine '{plan.machine}', not this computer: predicted times are "
                    f"{plan.machine}'s, measured times this computer's")
    return Prepared(str(Path(plan_path).resolve()), plan, net, machine, compute, threads)


def run_measure(prep: Prepared, *, steps: int, warmup: int, check: bool, trace: bool,
                timeout_s: float, kernel_calls: list | None = None) -> JobResult | None:
    """Run the plan on P ranks; the JobResult on rank 0 (and in the launching process), else None.
    ``kernel_calls`` are timed inside the run after every step (profiler.inrun)."""
    if launcher.inside_mpi_job():
        from mpi4py import MPI  # noqa: PLC0415
        from executor.worker import abort_with, run_job, start_watchdog  # noqa: PLC0415
        comm = MPI.COMM_WORLD
        if comm.Get_size() != prep.plan.devices:
            raise DnnplanError(f"this MPI job has {comm.Get_size()} ranks but the plan is for "
                               f"{prep.plan.devices} devices", file=prep.path)
        dog = start_watchdog(comm, timeout_s)
        try:
            kernel_calls = comm.bcast(kernel_calls, root=0)  # listed by rank 0 alone (measure)
            return run_job(prep.path, comm, steps=steps, warmup=warmup, check=check, keep_spans=trace,
                           threads=prep.threads, kernel_calls=kernel_calls)
        except BaseException as err:  # noqa: BLE001 - one rank's failure ends every rank
            abort_with(comm, err)
        finally:
            dog.cancel()
    with tempfile.TemporaryDirectory(prefix="dnnplan-run-") as tmp:
        result_path = os.path.join(tmp, "result.pkl")
        calls_path = None
        if kernel_calls:
            calls_path = os.path.join(tmp, "kernel_calls.pkl")
            with open(calls_path, "wb") as fh:
                pickle.dump(list(kernel_calls), fh)
        cmd = launcher.worker_command(launcher.find_mpiexec(), prep.plan.devices, prep.path, result_path,
                                      steps=steps, warmup=warmup, check=check, trace=trace,
                                      threads=prep.threads, timeout_s=timeout_s, time_kernels=calls_path)
        launcher.launch(cmd, prep.threads, timeout_s)
        try:
            with open(result_path, "rb") as fh:
                return pickle.load(fh)
        except (OSError, pickle.UnpicklingError, EOFError) as err:
            raise DnnplanError(f"the run ended without a result from rank 0 ({err})") from None


def _predict(prep: Prepared, machine: Machine | None = None):
    from costmodel.step import predict_step  # noqa: PLC0415
    return predict_step(prep.net, prep.plan.batch, prep.plan.strategies(), prep.plan.algorithms(),
                        machine or prep.machine, prep.compute)


def fresh_calls(prep: Prepared) -> list:
    """``--fresh-profile``: the kernel calls the plan's prediction looks up and, when the plan's
    ranks share one node, the collectives it prices (costmodel.comm_calls), to be timed inside
    the run (profiler.inrun, profiler.inrun_comm); none, with a warning, for a compute model that
    is not this computer's on-demand profile."""
    calls_of = getattr(prep.compute, "calls_of", None)
    if calls_of is None:
        report.warn("--fresh-profile applies to machine `local` without --profile: this prediction "
                    "uses the given table as it is")
        return []
    made = []  # the prediction the kernel calls were listed from (none when on-demand timing is off)
    calls = list(calls_of(lambda: made.append(_predict(prep))))
    if 1 < prep.plan.devices <= prep.machine.devices_per_node:
        from costmodel.comm_calls import step_collectives  # noqa: PLC0415
        calls += step_collectives(prep.net, prep.plan.batch, prep.plan.strategies(),
                                  made[0] if made else _predict(prep), prep.plan.algorithms())
    return calls


def predict_and_compare(prep: Prepared, job: JobResult, steps: int, kernel_calls: list | None = None) -> Comparison:
    """The prediction for the plan against the run. ``kernel_calls`` (``--fresh-profile``): the calls
    timed inside the run; their entries in this computer's profile are replaced by the median of
    those samples first (in memory only), and the collectives among them price those collectives
    (``Machine.measured``), so the prediction uses the machine's speed of the run."""
    from executor.collect import aggregate  # noqa: PLC0415
    machine = prep.machine
    if kernel_calls and job.kernel_samples:
        from dataclasses import replace  # noqa: PLC0415
        from costmodel.comm_calls import CommCall, measured_from_samples  # noqa: PLC0415
        from profiler.inrun import entries_from_samples  # noqa: PLC0415
        kernels = [c for c in kernel_calls if not isinstance(c, CommCall)]
        prep.compute.install(entries_from_samples(kernels, job.kernel_samples))
        measured = measured_from_samples(kernel_calls, job.kernel_samples)
        if measured:
            machine = replace(machine, measured=measured)
    return compare_prediction(_predict(prep, machine), aggregate(job.ranks, steps))


def measure(prep: Prepared, *, steps: int, warmup: int, check: bool, trace: bool, timeout_s: float,
            fresh: bool) -> tuple[JobResult | None, Comparison | None]:
    """Run the plan and compare it with its prediction (None, None on ranks other than 0 of an MPI job);
    ``fresh``: with the prediction's kernels timed inside the run (:func:`fresh_calls`)."""
    root = True
    if fresh and launcher.inside_mpi_job():
        from mpi4py import MPI  # noqa: PLC0415
        root = MPI.COMM_WORLD.Get_rank() == 0  # one rank lists (and, if missing, profiles) the calls
    calls = fresh_calls(prep) if fresh and root else []
    job = run_measure(prep, steps=steps, warmup=warmup, check=check, trace=trace, timeout_s=timeout_s,
                      kernel_calls=calls)
    if job is None:
        return None, None
    return job, predict_and_compare(prep, job, steps, calls)


def warn_non_finite_loss(job: JobResult, warmup: int, what: str = "") -> None:
    """Steps that compute on NaN or infinity are not training steps (and denormals on the way there
    can be slow): say so, rather than report their times as if they were."""
    i = first_non_finite(job.losses)
    if i is not None:
        which = f"warm-up step {i + 1}" if i < warmup else f"timed step {i - warmup + 1}"
        report.warn(f"{what}the loss is {job.losses[i]} from {which} on: those steps computed on non-finite "
                    "values, so their times may not be a training step's (the executor's learning rate "
                    "is fixed; run fewer --steps)")


def write_json_file(path: str, data: dict) -> None:
    """Atomic: a failed run never leaves a partial file."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=str(target.parent), prefix=".dnnplan-")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1)
        os.replace(tmp, target)
    except OSError as err:
        raise DnnplanError(f"cannot write {path}: {err.strerror or err}") from None


def _trace_dict(job: JobResult, steps: int) -> dict:
    from executor.collect import timed_steps  # noqa: PLC0415
    from executor.trace import trace_events  # noqa: PLC0415
    timed = set(timed_steps(job.ranks, steps))
    every = {s for r in job.ranks for s in r.step_wall}
    return trace_events(job.ranks, warmup_steps=every - timed)


def _strategy_labels(plan: Plan) -> dict[str, str]:
    return {lp.name: lp.strategy.label + (f" {lp.algorithm}" if lp.algorithm else "") for lp in plan.layers}


def _guard_failure(fn):
    """Turn a failed run into one red line and its exit code (2 user, 1 internal, 124 timeout)."""
    try:
        return fn()
    except launcher.RunFailed as err:
        fail_line(str(err).replace("[", "\\["))
        raise typer.Exit(err.exit_code) from None


@app.command()
def execute(plan: Annotated[str, typer.Argument(help="A plan file written by `dnnplan plan --out`.")],
            ranks: RanksOpt,
            steps: StepsOpt = 5, warmup: WarmupOpt = 2,
            check: Annotated[bool, typer.Option("--check", help="Also run the step on one process on the "
                                                "whole batch and compare loss and every weight gradient.")] = False,
            json_out: Annotated[Optional[str], typer.Option("--json", help="Write the result as JSON to FILE.")] = None,
            trace: Annotated[Optional[str], typer.Option("--trace", help="Write a Chrome/Perfetto trace of every "
                                                         "rank's timeline to FILE.")] = None,
            timeout: TimeoutOpt = 600.0, threads: ThreadsOpt = None, profile: ProfileOpt = None,
            fresh: FreshOpt = False) -> None:
    """Run a plan across MPI ranks and compare measured with predicted time per layer and phase.

    Launches `mpiexec -n RANKS` itself, or runs on the ranks of the MPI job it is started in.
    Each rank builds its shard of every layer, runs warm-up and timed training steps, and times
    each layer's forward and backward compute and communication, gradient allreduce and update.
    """
    _positive("steps", steps)
    _positive("warmup", warmup, 0)
    if timeout <= 0:
        raise DnnplanError(f"--timeout must be positive, got {timeout:g}")
    prep = prepare(plan, ranks, threads, profile)
    job, cmp = _guard_failure(lambda: measure(prep, steps=steps, warmup=warmup, check=check,
                                              trace=trace is not None, timeout_s=timeout, fresh=fresh))
    if job is None:  # a rank other than 0 of an MPI job
        return
    title = (f"{prep.plan.network_name}, batch {prep.plan.batch}, {ranks} rank(s) x {job.threads} thread(s), "
             f"machine {prep.plan.machine}, compute model {prep.compute.name}")
    report.comparison_table(cmp, title, _strategy_labels(prep.plan))
    report.step_summary(cmp)
    report.check_line(job.check)
    warn_non_finite_loss(job, warmup)
    if json_out:
        write_json_file(json_out, comparison_json(plan, cmp, job.check))
    if trace:
        write_json_file(trace, _trace_dict(job, steps))
    if job.check is not None and not job.check.passed:
        fail_line(f"the distributed step does not match one process: {job.check.worst_tensor} differs by "
                  f"{job.check.worst_rel_error:.2e} (tolerance {job.check.tolerance:.0e})")
        raise typer.Exit(3)


# --- validate: plan, run, compare, for the planner's plan and the uniform baselines ------------

BASELINES = ("data", "filter", "spatial")


def _plan_from(ctx, network_arg: str, machine_arg: str, strategies: dict, algorithms: dict, name: str) -> Plan:
    from costmodel.step import predict_step  # noqa: PLC0415
    from planner.plan import LayerPlan  # noqa: PLC0415
    pred = predict_step(ctx.network, ctx.batch, strategies, algorithms, ctx.machine, ctx.compute)
    layers = tuple(LayerPlan(row.layer.name, strategies[row.layer.name], algorithms.get(row.layer.name, ""),
                             row.layer.fwd_compute_s, row.layer.bwd_compute_s,
                             row.layer.fwd_comm_s + row.layer.bwd_comm_s + row.layer.grad_sync_s + row.reshard_s,
                             row.layer.memory.total) for row in pred.layers)
    table = getattr(ctx.compute, "table", None)
    return Plan(network=network_arg, network_name=ctx.network.name, network_hash=ctx.network.content_hash(),
                batch=ctx.batch, devices=ctx.devices, machine=machine_arg, layers=layers, step_s=pred.step_s,
                memory_peak_bytes=pred.memory_peak_bytes,
                profile_fingerprint=getattr(table, "short_id", None), solver={"name": name})


def candidate_plans(ctx, network_arg: str, machine_arg: str, save: bool = False) -> list[tuple[str, Plan]]:
    """The planner's plan (when the planner is built) and each uniform baseline, distinct ones only;
    names of identical plans are joined (with one rank every strategy is the same plan). ``save``:
    then write what was timed on demand (or re-timed, ``--refresh-profile``) to the cache file, which
    the runs' predictions read afresh. With ``--refresh-profile`` every kernel the plans are weighed
    on is timed again first, side by side (planner.refreshed)."""
    from planner.refreshed import refreshed  # noqa: PLC0415
    try:
        from planner.optimize import make_plan  # noqa: PLC0415
    except ImportError:
        make_plan = None
    return refreshed(ctx.compute, lambda: _candidates(ctx, network_arg, machine_arg, make_plan, save))


def _candidates(ctx, network_arg: str, machine_arg: str, make_plan, save: bool) -> list[tuple[str, Plan]]:
    from costmodel.uniform import uniform_strategies  # noqa: PLC0415
    convs = {l.name: "im2col" for l in ctx.network.layers if l.op == "conv2d"}
    found: list[tuple[str, Plan]] = []
    table = getattr(ctx.compute, "table", None)
    if make_plan is not None:
        found.append(("planner", make_plan(ctx.network, network_arg, ctx.batch, ctx.devices, ctx.machine,
                                           ctx.compute, machine_ref=machine_arg,
                                           profile_fingerprint=getattr(table, "short_id", None),
                                           with_baselines=False)))
    for spec in BASELINES:
        try:
            strategies, _ = uniform_strategies(ctx.network, ctx.devices, ctx.batch, spec)
        except DnnplanError:
            continue
        found.append((spec, _plan_from(ctx, network_arg, machine_arg, strategies, convs, spec)))
    merged: list[tuple[str, Plan]] = []
    for name, plan in found:
        key = (plan.strategies(), plan.algorithms())
        for i, (other, p) in enumerate(merged):
            if (p.strategies(), p.algorithms()) == key:
                merged[i] = (f"{other} = {name}", p)
                break
        else:
            merged.append((name, plan))
    flush = getattr(ctx.compute, "save", None) if save else None
    if flush is not None:
        flush()
    return merged


def _strategy_summary(plan: Plan) -> str:
    counts: dict[str, int] = {}
    for lp in plan.layers:
        counts[lp.strategy.label] = counts.get(lp.strategy.label, 0) + 1
    return ", ".join(f"{label} x{n}" for label, n in sorted(counts.items(), key=lambda kv: -kv[1]))


@app.command()
def validate(network: Annotated[str, typer.Argument(help="A zoo network name or a network spec YAML path.")],
             ranks: RanksOpt,
             batch: Annotated[Optional[int], typer.Option("--batch", "-b", help="Global batch per step "
                                                          "\\[default: 32 per rank].")] = None,
             machine: Annotated[str, typer.Option("--machine", "-m", help="The machine to plan for; "
                                                  "`local` is this computer.")] = "local",
             steps: StepsOpt = 5, warmup: WarmupOpt = 2, timeout: TimeoutOpt = 600.0,
             threads: ThreadsOpt = None, profile: ProfileOpt = None, fresh: FreshOpt = False,
             refresh: RefreshOpt = False,
             check: Annotated[bool, typer.Option("--check/--no-check", help="Check each plan's numerics "
                                                 "against one process.")] = True,
             json_out: Annotated[Optional[str], typer.Option("--json", help="Write the summary as JSON to FILE.")] = None,
             details: Annotated[bool, typer.Option("--details", help="Also print each plan's per-layer table.")] = False,
             ) -> None:
    """Plan a network, run the plan and the uniform baselines, and report each prediction's error.

    The loop in one command: plan (the planner's plan when the planner is built), then run it and
    each uniform baseline that fits (data, filter, spatial) with --check, and compare measured with
    predicted step time and per-layer times; says whether the planner's plan was measured fastest.
    """
    from planner import context  # noqa: PLC0415
    from planner.plan_file import write_plan  # noqa: PLC0415
    _positive("steps", steps)
    agree_node_cores()
    ctx = context.resolve(network, ranks, batch, machine, profile, refresh)
    check_refresh(refresh, ctx.compute)
    rows = []
    comm = None
    if launcher.inside_mpi_job():
        from mpi4py import MPI  # noqa: PLC0415
        comm = MPI.COMM_WORLD
    if comm is None:
        candidates = candidate_plans(ctx, network, machine, save=True)
    else:
        # one rank plans: a plan follows the kernels timed on demand, so ranks planning alone
        # could choose different plans and then run mismatched collectives; its failure is every
        # rank's (the others would otherwise wait for the plans forever)
        candidates = None
        if comm.Get_rank() == 0:
            try:
                candidates = candidate_plans(ctx, network, machine, save=True)
            except Exception as err:  # noqa: BLE001 - sent to every rank, raised there
                candidates = err
        candidates = comm.bcast(candidates, root=0)
        if isinstance(candidates, Exception):
            raise candidates
    with tempfile.TemporaryDirectory(prefix="dnnplan-validate-") as tmp:
        for i, (name, plan) in enumerate(candidates):
            path = os.path.join(tmp, f"plan{i}.yaml")
            write_plan(plan, path)
            prep = prepare(path, ranks, threads, profile)
            job, cmp = _guard_failure(lambda: measure(prep, steps=steps, warmup=warmup, check=check, trace=False,
                                                      timeout_s=timeout, fresh=fresh))
            if job is None:
                continue
            warn_non_finite_loss(job, warmup, f"{name}: ")
            if details:
                report.comparison_table(cmp, f"{name}: {_strategy_summary(plan)}", _strategy_labels(plan))
                report.step_summary(cmp)
            cj = comparison_json(name, cmp, job.check)
            rows.append({"name": name, "strategies": _strategy_summary(plan), "threads": job.threads,
                         "predicted_step_s": cmp.predicted_step_s, "measured_step_s": cmp.measured.step_s,
                         "measured_step_min_s": cmp.measured.step_min_s,
                         "measured_step_max_s": cmp.measured.step_max_s,
                         "step_rel": cmp.step_rel, "layer_median_abs_rel": cmp.layer_median_abs_rel,
                         "check": cj["check"]})
    if not rows:
        return
    report.validate_table(rows, f"{ctx.network.name}, batch {ctx.batch}, {ranks} rank(s), machine {machine}, "
                                f"compute model {ctx.compute.name}")
    summary = {"network": ctx.network.name, "ranks": ranks, "batch": ctx.batch, "machine": machine,
               "compute_model": ctx.compute.name, "plans": rows}
    planner_rows = [r for r in rows if r["name"].split(" = ")[0] == "planner"]
    if planner_rows:
        best = min(rows, key=lambda r: r["measured_step_s"])
        summary["planner_vs_best_measured"] = planner_rows[0]["measured_step_s"] / best["measured_step_s"] - 1
        report.console.print(f"planner's plan measured {summary['planner_vs_best_measured'] * 100:+.1f}% against "
                             f"the fastest measured ({best['name']})")
    if json_out:
        write_json_file(json_out, summary)
    if check and any(r["check"] and not r["check"]["passed"] for r in rows):
        fail_line("a plan's distributed step does not match one process (see the check column)")
        raise typer.Exit(3)
