"""`dnnplan profile`: time the kernels the planner weighs, into a profile table."""

from __future__ import annotations

import json

import typer
from typer._click.core import ParameterSource  # typer >= 0.29 (pyproject) carries its own click

from costmodel.machine.model import MAX_DEVICES
from dnnplan.options import (AlgorithmsOpt, BackendOpt, BatchOpt, ChannelsOpt, DeviceCountsOpt, HostFrameworkOpt,
                             HostOpt, JsonOpt, MaxSecondsOpt, ProfilePrecisionOpt, ProfileTargetArg,
                             ProfileThreadsOpt, QuickOpt, SizesOpt, TableOutOpt)
from dnnplan.rerun import command_line
from dnnplan.output import check_output, check_output_folder, named
from dnnplan.render import profile as render
from dnnplan.render.terminal.messages import fail_line, warn
from lifecycle import stops
from profiler.run import ProfileInterrupted
from networks.errors import DnnplanError
from networks.writing import write_file
from profiler.service import GRID_MODES, ProfileRequest, host_profile, parse_ints, run_profile, run_summary


#: profile's flags that size or run the kernels' timing, and none of --host's
KERNEL_FLAGS = {"devices": "--devices", "batch": "--batch", "backend": "--backend", "threads": "--threads",
                "max_seconds": "--max-seconds", "sizes": "--sizes", "channels": "--channels",
                "algorithms": "--algorithms", "precision": "--precision"}


def profile(ctx: typer.Context, target: ProfileTargetArg = None, devices: DeviceCountsOpt = "1",
            batch: BatchOpt = None, backend: BackendOpt = "numpy", threads: ProfileThreadsOpt = 1,
            out: TableOutOpt = None, max_seconds: MaxSecondsOpt = None, sizes: SizesOpt = None,
            channels: ChannelsOpt = None, algorithms: AlgorithmsOpt = None, quick: QuickOpt = False,
            precision: ProfilePrecisionOpt = "fp32", as_json: JsonOpt = False, host: HostOpt = False,
            framework: HostFrameworkOpt = "numpy") -> None:
    """Time the kernels the executor will run, at the local shapes of every strategy the planner considers.

    Distinct (kernel, local shape, algorithm) calls over the device counts are each timed once
    (warm-up, repetitions until the median is stable) and written to a JSON profile table.
    Ctrl-C saves what was measured; the same command then times only what is missing.
    On a GPU (--backend cupy) the kernels are cuDNN's engines, cuBLAS and fused passes in --precision,
    timed with CUDA events on operands rotated past the L2 cache; convolutions record their engine.

    --host times a framework's per-op dispatch cost instead (--framework numpy, torch or cupy): tight loops
    of tiny ops, each op's mean and spread per call, and the host: keys of a framework file stating
    it (--out FILE writes them; docs/profiler.md, "A framework's host cost").
    """
    if host or target is None:
        for name in KERNEL_FLAGS:  # the kernels' flags, given beside the host's timing: said to change nothing
            if ctx.get_parameter_source(name) != ParameterSource.DEFAULT:
                warn(f"{KERNEL_FLAGS[name]} changes nothing with --host: it times the framework's calls from "
                     "the host, not kernels")
        return profile_host(target, framework, out, as_json, quick, host)
    if ctx.get_parameter_source("framework") != ParameterSource.DEFAULT:
        warn("--framework changes nothing without --host: it names the framework whose host calls --host times")
    if named("--out", out):
        check_output_folder(out)  # an existing table is resumed, not replaced: no --force
    # the values checked first: a bad one is its one line, without a warning before it
    grid_sizes = parse_ints(sizes, "sizes", 16384) if sizes else None
    grid_channels = parse_ints(channels, "channels", 4096) if channels else None
    for flag, value in (("--sizes", sizes), ("--channels", channels)):
        if value and target not in GRID_MODES:  # a network's own shapes are timed
            warn(f"{flag} {value} changes nothing: it sizes the gemm and conv sweeps, and {target} is timed at its "
                 "own layers' shapes")
    req = ProfileRequest(target, parse_ints(devices, "devices", MAX_DEVICES), batch, backend, threads, out,
                         max_seconds, grid_sizes, grid_channels,
                         [a.strip() for a in algorithms.split(",")] if algorithms else None, quick, precision)
    try:
        if as_json:
            run, path, fp = run_profile(req)
            print(json.dumps(run_summary(run, fp, threads, path)))
            _failed(run.failed, len(run.measured))
            return
        with render.progress_bar(f"profiling {target}") as cb:
            run, path, fp = run_profile(req, cb)
    except ProfileInterrupted as err:
        summary = run_summary(err.run, dict(err.run.table.fingerprint), threads, err.path or "")
        if as_json:
            print(json.dumps(summary))
        render.interrupted_line(summary, command_line(ctx))
        raise typer.Exit(stops.exit_code()) from None
    render.profile_summary(run_summary(run, fp, threads, path))
    _failed(run.failed, len(run.measured))


def _failed(failed: dict[str, str], measured: int) -> None:
    """Exit 2 with one line on stderr when kernel shapes could not be timed (the table keeps those
    that were, and lacks these: a plan would price them from the roofline)."""
    if not failed:
        return
    why = sorted(set(failed.values()))
    oom = why == ["out of memory"]
    fail_line(f"{len(failed)} of {len(failed) + measured} kernel shapes could not be timed"
              + (" (out of memory: their operands need more than this computer has)" if oom else f" ({why[0]})")
              + "; the table keeps the others" + (" (try a smaller --batch)" if oom else ""))
    raise typer.Exit(2)


def profile_host(target: str | None, framework: str, out: str | None, as_json: bool, quick: bool,
                 host: bool) -> None:
    """`dnnplan profile --host`: time, then print (or write) the fragment (one line for a target
    given with --host, or neither)."""
    if not host:
        raise DnnplanError("dnnplan profile needs a network or a sweep (gemm, conv)",
                           hint="e.g. dnnplan profile resnet50, or --host for a framework's dispatch cost")
    if target is not None:
        raise DnnplanError(f"--host times a framework's dispatch, not {target}", hint="drop the network to time the dispatch, or drop --host to profile its kernels")
    check_output(out)
    got, fragment = host_profile(framework, *((300, 3) if quick else ()))
    if out:
        write_file(out, render.fragment_yaml(fragment))
    if as_json:
        print(json.dumps({"framework": got.framework, "version": got.version, "device": got.device,
                          "calls": got.calls, "op_s": got.op_s, "out": out,
                          "ops": [{"name": o.name, "mean_s": o.mean_s, "spread_s": o.spread_s, "repeats": o.repeats}
                                  for o in got.ops], "fragment": fragment}))
        return
    render.host_dispatch(got, fragment, out)
