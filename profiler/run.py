"""Profiling a list of kernel calls into a table: resume, time budget, periodic atomic saves.

The driver behind ``dnnplan profile`` and on-demand profiling; it reports progress through a
callback so the CLI can draw a bar (rendering lives in dnnplan/render/profile.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Callable

import numpy
from threadpoolctl import threadpool_limits

from costmodel.kernel_calls import KernelCall
from costmodel.profile_table import Entry, ProfileTable, with_entries
from profiler.harness import TimingPolicy, time_call
from profiler.tables import write_table

Progress = Callable[[int, int, KernelCall], None]  # (done, total, call just measured)


@dataclass
class ProfileRun:
    table: ProfileTable
    measured: dict[str, Entry] = field(default_factory=dict)
    skipped: int = 0          # already in the table (resumed)
    left: list[KernelCall] = field(default_factory=list)  # not measured: time budget spent
    failed: dict[str, str] = field(default_factory=dict)  # key -> error (e.g. out of memory)
    seconds: float = 0.0


def profile_calls(calls: list[KernelCall], table: ProfileTable, xp: ModuleType = numpy, *,
                  threads: int = 1, policy: TimingPolicy = TimingPolicy(), max_seconds: float | None = None,
                  out: str | None = None, save_every_s: float = 10.0, progress: Progress | None = None
                  ) -> ProfileRun:
    """Time every call not yet in ``table``; save to ``out`` every ``save_every_s`` and at the end."""
    todo = [c for c in calls if c.key not in table.entries]
    run = ProfileRun(table, skipped=len(calls) - len(todo))
    t0 = last_save = time.perf_counter()
    with threadpool_limits(limits=threads):
        for i, call in enumerate(todo):
            if max_seconds is not None and time.perf_counter() - t0 > max_seconds:
                run.left = todo[i:]
                break
            try:
                run.measured[call.key] = time_call(call, xp, policy)
            except MemoryError:
                run.failed[call.key] = "out of memory"
            except Exception as err:  # noqa: BLE001 - e.g. cupy OutOfMemoryError; recorded, not fatal
                run.failed[call.key] = f"{type(err).__name__}: {err}"
            if progress is not None:
                progress(i + 1, len(todo), call)
            if out and time.perf_counter() - last_save > save_every_s:
                write_table(with_entries(table, run.measured), out)
                last_save = time.perf_counter()
    run.table = with_entries(table, run.measured)
    run.seconds = time.perf_counter() - t0
    if out:
        write_table(run.table, out)
    return run
