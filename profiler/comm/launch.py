"""``dnnplan profile-comm``: launch the micro-benchmarks under mpiexec, fit, write into a table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import replace

from costmodel.comm.fit import Fit, fit_all, fit_json
from costmodel.compute.profile_table import ProfileTable
from networks.errors import DnnplanError
from profiler.comm.bench import BENCH_REVISION
from profiler.probes.launch import find_mpiexec, probe_env
from lifecycle.jobs import run_job

KIB, MIB = 1024, 1024 * 1024


def default_sizes(max_bytes: int = 16 * MIB) -> list[int]:
    """Powers of two from 8 bytes up to ``max_bytes`` (16 MiB by default: a 2-core box); twice
    as dense as powers of four, so each size regime of the piecewise fit has points to fit."""
    out, n = [], 8
    while n <= max_bytes:
        out.append(n)
        n *= 2
    return out


def measure(ranks: int, sizes: list[int], collectives: list[str], cap_s: float = 0.3,
            timeout_s: float = 600, device: str = "numpy") -> dict[str, list[tuple[str, int, float]]]:
    """Run :mod:`profiler.comm.bench` under ``mpiexec -n ranks``; its measurements per cache state
    (``warm``, ``cold``: :data:`profiler.comm.bench.STATES`)."""
    if ranks < 2:
        raise DnnplanError(f"--ranks must be at least 2 to measure communication, got {ranks}")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "comm.json")
        cmd = [find_mpiexec(), "-n", str(ranks), sys.executable, "-m", "profiler.comm.bench",
               "--sizes", ",".join(map(str, sizes)), "--collectives", ",".join(collectives),
               "--cap", str(cap_s), "--out", out, "--device", device]
        try:
            proc = run_job(cmd, timeout_s, probe_env(1))
        except subprocess.TimeoutExpired:
            raise DnnplanError(f"mpiexec did not finish within {timeout_s:.0f} s",
                               hint="use fewer --sizes or a smaller --max-bytes") from None
        if proc.returncode != 0 or not os.path.exists(out):
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise DnnplanError(f"mpiexec -n {ranks} failed (exit {proc.returncode}): {tail[0]}",
                               hint="check that mpi4py and mpiexec come from the same MPI")
        with open(out, encoding="utf-8") as fh:
            data = json.load(fh)
    return {st: [(c, int(n), float(t)) for c, n, t in pts] for st, pts in data["measurements"].items()}


def comm_section(measurements: dict[str, list[tuple[str, int, float]]], ranks: int) -> tuple[dict, dict[str, Fit], Fit]:
    """The table's ``comm`` section: the warm fits (``collectives``, and ``link`` fitted jointly),
    the cold fits under ``cold`` when measured, and the benchmark's revision (``bench``)."""
    per, joint = fit_all(measurements["warm"], ranks)
    section = {"ranks": ranks, "bench": BENCH_REVISION, "collectives": {c: fit_json(f) for c, f in per.items()},
               "link": fit_json(joint)}
    if measurements.get("cold"):
        cold, _ = fit_all(measurements["cold"], ranks)
        section["cold"] = {"collectives": {c: fit_json(f) for c, f in cold.items()}}
    return section, per, joint


def with_comm(table: ProfileTable, section: dict) -> ProfileTable:
    return replace(table, comm=section)
