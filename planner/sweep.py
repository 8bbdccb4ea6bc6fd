"""Strong scaling: the optimal plan and pure data parallelism over a list of device counts (pure)."""

from __future__ import annotations

import dataclasses

from costmodel.compute.model import ComputeModel
from costmodel.machine.model import MAX_DEVICES, Machine
from costmodel.step.prediction import predict_step
from costmodel.frameworks.uniform import uniform_strategies
from networks.errors import DnnplanError, short
from networks.ir import Network
from planner.problem.solve import Settings, fastest_algorithms, make_plan, strategy_mix


#: The most device counts one sweep plans for.
MAX_POINTS = 64


def _count(part: str) -> int:
    """One device count of ``--sweep``: a whole number from 1 to MAX_DEVICES."""
    try:
        value = int(part)
    except ValueError:
        raise DnnplanError(f"{short(part)} in --sweep is not a device count", hint="write e.g. 1,2,4,...,1024") from None
    if not 1 <= value <= MAX_DEVICES:
        raise DnnplanError(f"device counts in --sweep must be whole numbers from 1 to {MAX_DEVICES:,}, "
                           f"got {short(value)}")
    return value


def parse_counts(text: str) -> list[int]:
    """``"1,2,4,...,1024"`` -> [1, 2, 4, ..., 1024] (``...`` continues the doubling)."""
    parts = [t.strip() for t in text.split(",") if t.strip()]
    out: list[int] = []
    for i, part in enumerate(parts):
        if part == "...":
            if len(out) < 2 or i + 1 >= len(parts):
                raise DnnplanError(f"cannot read '...' in --sweep {short(text)}", hint="write e.g. 1,2,4,...,1024")
            ratio = out[-1] // out[-2]
            end = _count(parts[i + 1])
            while out[-1] * ratio < end and ratio > 1:
                out.append(out[-1] * ratio)
            continue
        out.append(_count(part))
    if not out:
        raise DnnplanError("--sweep names no device count", hint="write e.g. 1,2,4,...,1024")
    if len(set(out)) > MAX_POINTS:
        raise DnnplanError(f"--sweep names {len(set(out))} device counts; at most {MAX_POINTS} are taken")
    return sorted(set(out))


def sweep(net: Network, network_ref: str, batch: int, counts: list[int], machine: Machine, compute: ComputeModel,
          memory_limit_bytes: float | None, settings: Settings, rows: list[dict] | None = None) -> list[dict]:
    """One row per device count: plan step, data-parallel step, speedups, efficiencies, strategy mix.
    Each device count's search gets a budget of its own (``settings.budget`` renewed); ``rows``
    receives each row as it is made (what an interrupted sweep keeps)."""
    rows = [] if rows is None else rows
    for p in counts:
        try:
            machine.check_devices(p)
            each = settings if settings.budget is None else dataclasses.replace(settings,
                                                                                budget=settings.budget.renewed())
            plan = make_plan(net, network_ref, batch, p, machine, compute, memory_limit_bytes, each,
                             with_baselines=False)
        except DnnplanError as err:
            rows.append({"devices": p, "error": str(err)})
            continue
        strategies, _ = uniform_strategies(net, p, batch, "data")
        data = settings.as_run(predict_step(net, batch, strategies, fastest_algorithms(
            net, strategies, batch, machine, compute, settings.choices.sharded_optimizer), machine, compute,
            settings.choices.sharded_optimizer, overlap=settings.overlap), net, machine)
        limit = plan.solver.get("memory_limit_bytes") or machine.device.mem_capacity_bytes
        rows.append({"devices": p, "step_s": plan.step_s, "memory_peak_bytes": plan.memory_peak_bytes,
                     "data_step_s": data.step_s, "data_memory_peak_bytes": data.memory_peak_bytes,
                     "data_fits": data.memory_bound_bytes <= limit * (1 + 1e-9),
                     "mix": strategy_mix(plan), "solver": plan.solver.get("solver"),
                     "status": plan.solver.get("status"), "gap": plan.solver.get("gap")})
    return with_speedups(rows)


def with_speedups(rows: list[dict]) -> list[dict]:
    """Each row's speedup and efficiency relative to the first device count that has a plan (and
    the same of data parallelism); ``rows`` itself, filled in."""
    ok = [r for r in rows if "error" not in r]
    if ok:
        p0, t0, d0 = ok[0]["devices"], ok[0]["step_s"], ok[0]["data_step_s"]
        for r in ok:
            r["speedup"] = t0 / r["step_s"]
            r["efficiency"] = r["speedup"] * p0 / r["devices"]
            r["data_speedup"] = d0 / r["data_step_s"]
            r["data_efficiency"] = r["data_speedup"] * p0 / r["devices"]
    return rows
