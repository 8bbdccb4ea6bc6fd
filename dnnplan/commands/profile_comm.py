"""`dnnplan profile-comm`: time and fit the collectives of this computer."""

from __future__ import annotations

import json

import typer

from dnnplan.rerun import command_line
from dnnplan.options import (BackendOpt, CapOpt, CommOutOpt, CommRanksOpt, JsonOpt, MaxBytesOpt, MessageSizesOpt,
                             ProfilePrecisionOpt)
from dnnplan.output import check_output_folder
from dnnplan.render import profile as render
from dnnplan.render.messages import err_console, fail_line
from lifecycle import stops
from profiler.comm.profile import run_profile_comm
from profiler.service import parse_ints


def profile_comm(cli: typer.Context, ranks: CommRanksOpt = 2, sizes: MessageSizesOpt = None,
                 max_bytes: MaxBytesOpt = 16 * 2**20, out: CommOutOpt = None, seconds_per_point: CapOpt = 0.2,
                 as_json: JsonOpt = False, backend: BackendOpt = "numpy",
                 precision: ProfilePrecisionOpt = "fp32") -> None:
    """Measure sendrecv and the collectives under mpiexec and fit alpha, beta, gamma by least squares.

    Every point is timed in two cache states: warm (after a 4 MiB pass, as a collective that
    follows another one) and cold (after a pass over the last-level cache, as one that follows a
    layer's kernels). The fit uses the cost model's formula for the algorithm MPICH picks at each
    size, piecewise over up to three message-size regimes (eager, rendezvous, out of cache); each
    collective's fits become the `local` machine's links for that collective when planning for
    --ranks devices (docs/profiler.md). With --backend cupy the buffers are GPU arrays staged
    through the host, as ranks sharing one GPU make their collectives; the fits go into that GPU's
    table of --precision.
    """
    if out:
        check_output_folder(out)  # the fit is added to an existing table: no --force
    try:
        summary = run_profile_comm(ranks, parse_ints(sizes, "sizes", 2**31) if sizes else None, max_bytes, out,
                                   seconds_per_point, backend, precision)
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP (lifecycle.stops): the MPI job was ended whole
        fail_line(f"interrupted by {stops.name()}: the benchmark's MPI job was ended; nothing is kept (a fit needs "
                  "every size measured) and the table is unchanged")
        err_console.print(f"run it again with: {command_line(cli)}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(stops.exit_code()) from None
    if as_json:
        print(json.dumps(summary))
    else:
        render.comm_summary(summary)
