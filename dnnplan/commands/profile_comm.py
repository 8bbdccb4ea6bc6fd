"""`dnnplan profile-comm`: time and fit the collectives of this computer."""

from __future__ import annotations

import json

import typer

from dnnplan.rerun import command_line
from dnnplan.options import (BackendOpt, CapOpt, CommOutOpt, CommRanksOpt, JsonOpt, MaxBytesOpt, MessageSizesOpt,
                             ProfilePrecisionOpt)
from dnnplan.output import check_output_folder
from dnnplan.render import profile as render
from dnnplan.render.terminal.messages import err_console, fail_line
from lifecycle import stops
from networks.errors import DnnplanError
from profiler.comm.bench import measured_bytes
from profiler.comm.launch import default_sizes
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

    Two ranks on this computer, into its per-user cache: dnnplan profile-comm --ranks 2; into a
    table of your own, quicker: dnnplan profile-comm --ranks 2 --cap 0.05 --out local.json.
    """
    if out:
        check_output_folder(out)  # the fit is added to an existing table: no --force
    asked = parse_ints(sizes, "sizes", 2**31) if sizes else None
    check_sizes(asked, max_bytes, ranks)
    if backend == "numpy" and precision != "fp32":  # as `dnnplan profile` refuses it: the host's table is fp32's
        raise DnnplanError(f"--precision {precision} names a GPU's table; the numpy backend's collectives go into "
                           "this computer's table", hint="profile with --backend cupy on a machine with an NVIDIA "
                                                         "GPU, or leave --precision out")
    try:
        summary = run_profile_comm(ranks, asked, max_bytes, out, seconds_per_point, backend, precision)
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP (lifecycle.stops): the MPI job was ended whole
        fail_line(f"interrupted by {stops.name()}: the benchmark's MPI job was ended; nothing is kept (a fit needs "
                  "every size measured) and the table is unchanged")
        err_console.print(f"run it again with: {command_line(cli)}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(stops.exit_code()) from None
    if as_json:
        print(json.dumps(summary))
    else:
        render.comm_summary(summary)


#: the fewest message sizes a fit takes: alpha, beta and gamma (latency, time a byte, reduction a
#: byte) are three unknowns; fewer points fit any line, and the fit then prices every size from it
LEAST_SIZES = 3


def check_sizes(sizes: list[int] | None, max_bytes: int, ranks: int = 2) -> None:
    """One line for message sizes too few to fit the collectives (``sizes``: --sizes; None: the
    defaults, 8 B to ``max_bytes`` by powers of 2), counted as they are measured: whole float32
    elements, a multiple of the ``ranks`` (profiler.comm.bench.measured_bytes), so 3, 5 and 7 bytes
    are one size."""
    got = sorted(set(sizes if sizes is not None else default_sizes(max_bytes)))
    measured = sorted({measured_bytes(n, ranks) for n in got})
    if len(measured) >= LEAST_SIZES:
        return
    if sizes is not None:
        same = "" if len(measured) == len(got) else \
            (f" (measured as {len(measured)} distinct size{'s' if len(measured) > 1 else ''}, "
             f"{', '.join(f'{n} B' for n in measured)}: whole float32 elements, a multiple of the {ranks} ranks)")
        raise DnnplanError(f"--sizes {','.join(map(str, got))}{same}: a fit of alpha, beta and gamma needs at least "
                           f"{LEAST_SIZES} message sizes", hint="e.g. --sizes 8,4096,1048576, or leave --sizes out")
    raise DnnplanError(f"--max-bytes {max_bytes}: the default sizes, 8 B to --max-bytes by powers of 2, are "
                       f"{len(measured)}, and a fit needs at least {LEAST_SIZES}", hint="give --max-bytes 32 or more")
