"""The profile commands: `dnnplan profile` (kernels) and `dnnplan profile-comm` (collectives)."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from planner.app import app

Devices = Annotated[str, typer.Option("--devices", "-p", help="Device counts the planner will consider, e.g. 1,2,4.")]
Json = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]


@app.command()
def profile(target: Annotated[str, typer.Argument(help="A network (zoo name or spec path), or a sweep: "
                                                   "'gemm' (GEMM grid over --sizes) or 'conv' (3x3 conv grid).")],
            devices: Devices = "1",
            batch: Annotated[Optional[int], typer.Option("--batch", "-b", help="Global batch \\[default: 32 per device].")] = None,
            backend: Annotated[str, typer.Option("--backend", help="numpy (CPU) or cupy (NVIDIA GPU).")] = "numpy",
            threads: Annotated[int, typer.Option("--threads", help="BLAS threads per process (a rank's share of the cores).")] = 1,
            out: Annotated[Optional[str], typer.Option("--out", "-o", help="Table file to write and resume "
                                                       "\\[default: this device's per-user cache, used by --machine local].")] = None,
            max_seconds: Annotated[Optional[float], typer.Option("--max-seconds", help="Stop after this long; rerun to resume.")] = None,
            sizes: Annotated[Optional[str], typer.Option("--sizes", help="gemm: M/K/N values; conv: spatial sizes.")] = None,
            channels: Annotated[Optional[str], typer.Option("--channels", help="conv sweep: channel counts (C = F).")] = None,
            algorithms: Annotated[Optional[str], typer.Option("--algorithms", help="Convolution algorithms to time "
                                                              "\\[default: every one that applies].")] = None,
            quick: Annotated[bool, typer.Option("--quick", help="Fewer repetitions (a rough table, fast).")] = False,
            as_json: Json = False) -> None:
    """Time the kernels the executor will run, at the local shapes of every strategy the planner considers.

    Distinct (kernel, local shape, algorithm) calls over the device counts are each timed once
    (warm-up, repetitions until the median is stable) and written to a JSON profile table.
    """
    from planner import report_profile
    from profiler.service import ProfileRequest, parse_ints, run_profile, run_summary
    req = ProfileRequest(target, parse_ints(devices, "devices"), batch, backend, threads, out, max_seconds,
                         parse_ints(sizes, "sizes") if sizes else None,
                         parse_ints(channels, "channels") if channels else None,
                         [a.strip() for a in algorithms.split(",")] if algorithms else None, quick)
    if as_json:
        run, path, fp = run_profile(req)
        print(json.dumps(run_summary(run, fp, threads, path)))
        return
    with report_profile.progress_bar(f"profiling {target}") as cb:
        run, path, fp = run_profile(req, cb)
    report_profile.profile_summary(run_summary(run, fp, threads, path))


@app.command("profile-comm")
def profile_comm(ranks: Annotated[int, typer.Option("--ranks", "-n", help="MPI ranks to launch (mpiexec -n).")] = 2,
                 sizes: Annotated[Optional[str], typer.Option("--sizes", help="Message sizes in bytes "
                                                              "\\[default: 8 B to --max-bytes by powers of 2].")] = None,
                 max_bytes: Annotated[int, typer.Option("--max-bytes", help="Largest default message.")] = 16 * 2**20,
                 out: Annotated[Optional[str], typer.Option("--out", "-o", help="Table file to add the fit to "
                                                            "\\[default: the per-user cache of this computer].")] = None,
                 seconds_per_point: Annotated[float, typer.Option("--cap", help="Seconds per (collective, size, cache state).")] = 0.2,
                 as_json: Json = False) -> None:
    """Measure sendrecv and the collectives under mpiexec and fit alpha, beta, gamma by least squares.

    Every point is timed in two cache states: warm (after a 4 MiB pass, as a collective that
    follows another one) and cold (after a pass over the last-level cache, as one that follows a
    layer's kernels). The fit uses the cost model's formula for the algorithm MPICH picks at each
    size, piecewise over up to three message-size regimes (eager, rendezvous, out of cache); each
    collective's fits become the `local` machine's links for that collective when planning for
    --ranks devices (docs/profiler.md).
    """
    from planner import report_profile
    from profiler.comm import comm_section, default_sizes, measure, with_comm
    from profiler.fingerprint import fingerprint
    from profiler.service import parse_ints
    from profiler.tables import cache_path, open_for_device, write_table
    from costmodel.comm_fit import COLLECTIVES
    from costmodel.files import load_machine
    # the fit belongs with the profile of runs of this many ranks sharing the machine
    fp = fingerprint("numpy", 1, min(ranks, load_machine("local").devices_per_node))
    path = out or str(cache_path(fp))
    table = open_for_device(path, fp)
    size_list = parse_ints(sizes, "sizes") if sizes else default_sizes(max_bytes)
    section, _, _ = comm_section(measure(ranks, size_list, list(COLLECTIVES), seconds_per_point), ranks)
    write_table(with_comm(table, section), path)
    summary = {**section, "table": path}
    if as_json:
        print(json.dumps(summary))
    else:
        report_profile.comm_summary(summary)
