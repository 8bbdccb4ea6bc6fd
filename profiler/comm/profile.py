"""`dnnplan profile-comm` as a library call: time the collectives, fit them, add the fit to a table."""

from __future__ import annotations

from costmodel.comm.fit import COLLECTIVES
from costmodel.machine.loading import load_machine
from kernels.cuda import libs
from profiler.comm.launch import comm_section, default_sizes, measure, with_comm
from profiler.tables.fingerprint import fingerprint
from profiler.tables.store import cache_path, open_for_device, write_table


def run_profile_comm(ranks: int, sizes: list[int] | None, max_bytes: int, out: str | None,
                     seconds_per_point: float, backend: str = "numpy", precision: str = "fp32") -> dict:
    """Measure every collective of :data:`costmodel.comm.fit.COLLECTIVES` on ``ranks`` ranks at
    ``sizes`` bytes (default: powers of 2 up to ``max_bytes``), fit them and write the fit into the
    table at ``out`` (default: this computer's cache for runs of that many ranks); the fit's
    summary with the table's path. ``backend`` cupy: GPU buffers staged through the host (ranks
    sharing a GPU), written into the GPU table of ``precision``."""
    if backend == "cupy":  # the GPU's kernel table (timed by one process) gets the staged links
        libs.cupy()
        fp = fingerprint("cupy", 1, precision=precision)
    else:  # the fit belongs with the profile of runs of this many ranks sharing the machine
        fp = fingerprint("numpy", 1, min(ranks, load_machine("local").devices_per_node))
    path = out or str(cache_path(fp))
    table = open_for_device(path, fp)
    section, _, _ = comm_section(measure(ranks, sizes or default_sizes(max_bytes), list(COLLECTIVES),
                                         seconds_per_point, device=backend), ranks)
    write_table(with_comm(table, section), path)
    return {**section, "table": path}
