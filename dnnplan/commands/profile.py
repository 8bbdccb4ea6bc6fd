"""`dnnplan profile`: time the kernels the planner weighs, into a profile table."""

from __future__ import annotations

import json

from dnnplan.options import (AlgorithmsOpt, BackendOpt, BatchOpt, ChannelsOpt, DeviceCountsOpt, JsonOpt,
                             MaxSecondsOpt, ProfileTargetArg, ProfileThreadsOpt, QuickOpt, SizesOpt, TableOutOpt)
from dnnplan.render import profile as render
from profiler.service import ProfileRequest, parse_ints, run_profile, run_summary


def profile(target: ProfileTargetArg, devices: DeviceCountsOpt = "1", batch: BatchOpt = None,
            backend: BackendOpt = "numpy", threads: ProfileThreadsOpt = 1, out: TableOutOpt = None,
            max_seconds: MaxSecondsOpt = None, sizes: SizesOpt = None, channels: ChannelsOpt = None,
            algorithms: AlgorithmsOpt = None, quick: QuickOpt = False, as_json: JsonOpt = False) -> None:
    """Time the kernels the executor will run, at the local shapes of every strategy the planner considers.

    Distinct (kernel, local shape, algorithm) calls over the device counts are each timed once
    (warm-up, repetitions until the median is stable) and written to a JSON profile table.
    """
    req = ProfileRequest(target, parse_ints(devices, "devices"), batch, backend, threads, out, max_seconds,
                         parse_ints(sizes, "sizes") if sizes else None,
                         parse_ints(channels, "channels") if channels else None,
                         [a.strip() for a in algorithms.split(",")] if algorithms else None, quick)
    if as_json:
        run, path, fp = run_profile(req)
        print(json.dumps(run_summary(run, fp, threads, path)))
        return
    with render.progress_bar(f"profiling {target}") as cb:
        run, path, fp = run_profile(req, cb)
    render.profile_summary(run_summary(run, fp, threads, path))
