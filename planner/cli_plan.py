"""`dnnplan plan`: the main job. Thin: resolve the inputs, one library call, one render."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from costmodel.files import DEFAULT_MACHINE
from networks.errors import DnnplanError
from planner import context
from planner.app import RefreshOpt, app, check_refresh
from planner.cli import BatchOpt, DevicesOpt, JsonOpt, MachineOpt, NetworkArg, ProfileOpt
from planner.optimize import Settings, make_plan
from planner.plan_file import plan_to_dict, write_plan
from planner.refreshed import refreshed

GIB = 2 ** 30


def profile_fingerprint(path: str | None) -> str | None:
    """A short content hash of the profile table a plan was made with."""
    if not path:
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError as err:
        raise DnnplanError(f"cannot read the profile table: {err}", file=path) from None


@app.command()
def plan(network: NetworkArg,
         devices: DevicesOpt = 1,
         batch: BatchOpt = None, machine: MachineOpt = None, profile: ProfileOpt = None,
         memory: Annotated[Optional[float], typer.Option("--memory", help="Memory per device in GiB "
                                                         "\\[default: the machine's device memory].")] = None,
         out: Annotated[Optional[str], typer.Option("--out", "-o", help="Write the plan here (.yaml, or "
                                                    ".json for JSON).")] = None,
         solver: Annotated[str, typer.Option("--solver", help="auto (graph reduction + DP, ILP for what is "
                                             "left), reduced (the same), or ilp (the plain ILP).")] = "auto",
         time_limit: Annotated[Optional[float], typer.Option("--time-limit", help="Seconds any ILP solve may "
                                                             "take (then the best plan found is reported "
                                                             "with its gap).")] = None,
         gap: Annotated[Optional[float], typer.Option("--gap", help="Relative optimality gap at which an ILP "
                                                      "may stop \\[default: 0, prove optimality].")] = None,
         sweep: Annotated[Optional[str], typer.Option("--sweep", help="Strong scaling over device counts, "
                                                      "e.g. 1,2,4,...,1024, at a fixed batch.")] = None,
         plot: Annotated[Optional[str], typer.Option("--plot", help="With --sweep: write a PNG (needs the "
                                                     "plot extra, matplotlib).")] = None,
         refresh: RefreshOpt = False,
         as_json: JsonOpt = False) -> None:
    """Choose how to split every layer across the devices so the predicted training step is shortest.

    For each layer the planner weighs every split of its dimensions (sample N, spatial H/W, channels
    C, filters F, replication R) and every convolution algorithm, with per-device memory as a
    constraint, and solves exactly (graph reduction and dynamic programming, an ILP for what
    remains). It prints the plan beside pure data parallelism and the best uniform strategy
    (docs/planner.md).
    """
    if solver not in ("auto", "reduced", "ilp"):
        raise DnnplanError(f"unknown --solver '{solver}'", hint="use auto, reduced or ilp")
    if memory is not None and memory <= 0:
        raise DnnplanError(f"--memory must be positive GiB, got {memory}")
    if time_limit is not None and time_limit <= 0:
        raise DnnplanError(f"--time-limit must be positive seconds, got {time_limit}")
    if plot and not sweep:
        raise DnnplanError("--plot draws a sweep", hint="add --sweep 1,2,4,...")
    settings = Settings(solver, time_limit, gap)
    ctx = context.resolve(network, devices, batch, machine, profile, refresh)
    check_refresh(refresh, ctx.compute)
    limit = None if memory is None else memory * GIB
    machine_ref = machine or DEFAULT_MACHINE
    if sweep:
        from planner import report_plan
        from planner.sweep import parse_counts, plot_sweep, sweep as run_sweep
        counts = parse_counts(sweep)
        rows = refreshed(ctx.compute, lambda: run_sweep(ctx.network, network, ctx.batch, counts, ctx.machine,
                                                        ctx.compute, limit, settings))
        if plot:
            plot_sweep(rows, plot, f"{ctx.network.name}, batch {ctx.batch}, {ctx.machine.name}")
        if as_json:
            print(json.dumps({"network": ctx.network.name, "batch": ctx.batch, "machine": ctx.machine.name,
                              "rows": rows}))
        else:
            report_plan.sweep_table(rows, ctx.network.name, ctx.batch, ctx.machine.name)
            if plot:
                report_plan.console.print(f"wrote {plot}")
        return
    result = refreshed(ctx.compute, lambda: make_plan(ctx.network, network, ctx.batch, devices, ctx.machine,
                                                      ctx.compute, limit, settings, machine_ref=machine_ref,
                                                      profile_fingerprint=profile_fingerprint(profile)))
    if out:
        write_plan(result, out)
    if as_json:
        print(json.dumps(plan_to_dict(result)))
    else:
        from planner import report_plan
        report_plan.plan_table(result)
        if out:
            report_plan.console.print(f"wrote {out} (evaluate it, or an edited copy, with `dnnplan predict {out}`)")
