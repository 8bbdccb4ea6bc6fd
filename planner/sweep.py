"""A sweep (pure): the plan at each point of a list of machines and device counts, at a fixed batch.

One machine without a token budget gives strong scaling: each count's plan beside pure data
parallelism, with speedups and efficiencies (:func:`sweep`). Several machines, or a token budget,
give the comparison: each point's step, throughput and, for ``--tokens``, the time, device-hours
and (at each machine's price) cost to train, the fastest and the cheapest point marked
(:func:`priced`, :func:`mark_best`). How long each point may search, out of a sweep's whole
bound, is :func:`point_seconds`.
"""

from __future__ import annotations

import dataclasses
import math

from costmodel.compute.model import ComputeModel
from costmodel.machine.model import MAX_DEVICES, Machine
from costmodel.step.train_time import train_time
from networks.errors import DnnplanError, short
from networks.ir import Network
from planner.problem.baselines import DATA_PARALLEL
from planner.problem.solve import Infeasible, Settings, make_plan, strategy_mix


#: The most device counts one sweep plans for.
MAX_POINTS = 64
#: The most machines one sweep compares.
MAX_MACHINES = 16
#: The least a point of a shared bound searches (s): a plan in hand and a gap proven.
MIN_POINT_S = 1.5


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
            if ratio < 2 or out[-1] != out[-2] * ratio or end <= out[-1]:
                raise DnnplanError(f"cannot continue {out[-2]},{out[-1]} to {end} in --sweep {short(text)}: '...' "
                                   "multiplies on to a larger end", hint="write e.g. 1,2,4,...,1024")
            while out[-1] * ratio < end:
                out.append(out[-1] * ratio)
            if out[-1] * ratio != end:
                raise DnnplanError(f"--sweep {short(text)}: multiplying by {ratio} does not reach {end}",
                                   hint=f"end at {out[-1]} or {out[-1] * ratio}, or list the counts after "
                                        f"{out[-1]} one by one")
            continue
        out.append(_count(part))
    if not out:
        raise DnnplanError("--sweep names no device count", hint="write e.g. 1,2,4,...,1024")
    if len(set(out)) > MAX_POINTS:
        raise DnnplanError(f"--sweep names {len(set(out))} device counts; at most {MAX_POINTS} are taken")
    return sorted(set(out))


def parse_machines(text: str) -> list[str]:
    """``--machine dgx-a100,dgx-h100`` -> the machines in the order named, each once."""
    names = list(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    if not names:
        raise DnnplanError(f"--machine {short(text)} names no machine", hint="e.g. --machine dgx-a100,dgx-h100")
    if len(names) > MAX_MACHINES:
        raise DnnplanError(f"--machine names {len(names)} machines; at most {MAX_MACHINES} are compared")
    return names


def _price(text: str, machine: str | None = None) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 1e6:
        whose = "" if machine is None else f" for {short(machine)}"
        raise DnnplanError(f"--gpu-hour-price {short(text)}{whose} is not a price from 0 to 1,000,000",
                           hint="write e.g. --gpu-hour-price 2.5 or --gpu-hour-price dgx-h100=2.5,dgx-a100=1.6")
    return value


def parse_prices(text: str | None, machines: list[str]) -> dict[str, float] | None:
    """``--gpu-hour-price``: one price a device-hour for every machine (``2.5``), or one for each
    (``dgx-h100=2.5,dgx-a100=1.6``: every machine of ``machines`` named, and no other); None: no
    price given."""
    if text is None:
        return None
    parts = [t.strip() for t in text.split(",") if t.strip()]
    if len(parts) == 1 and "=" not in parts[0]:
        value = _price(parts[0])
        return {m: value for m in machines}
    prices: dict[str, float] = {}
    for part in parts:
        name, eq, value = part.partition("=")
        if not eq:
            raise DnnplanError(f"--gpu-hour-price {short(part)} names no machine, beside prices that do",
                               hint="write one price for all, or MACHINE=PRICE for each: dgx-h100=2.5,dgx-a100=1.6")
        name = name.strip()
        if name in prices:
            raise DnnplanError(f"--gpu-hour-price prices {short(name)} twice", hint="give each machine one price")
        if name not in machines:
            raise DnnplanError(f"--gpu-hour-price names {short(name)}, which --machine does not plan for "
                               f"({', '.join(machines)})", hint="price only the machines given to --machine")
        prices[name] = _price(value.strip(), name)
    missing = [m for m in machines if m not in prices]
    if missing:
        raise DnnplanError(f"--gpu-hour-price gives no price for {', '.join(missing)}",
                           hint="price each machine (MACHINE=PRICE), or give one price for all")
    return prices


def point_seconds(left_s: float, points_left: int, jobs: int = 1, most_s: float | None = None) -> float:
    """What one point of a sweep searches when its points share ``left_s`` seconds: an even share
    among the points left, ``jobs`` planned at once, at least :data:`MIN_POINT_S` and at most
    ``most_s`` (a single plan's default bound)."""
    share = max(MIN_POINT_S, left_s * max(1, jobs) / max(1, points_left))
    return share if most_s is None else min(most_s, share)


def point(net: Network, network_ref: str, batch: int, p: int, machine: Machine, compute: ComputeModel,
          memory_limit_bytes: float | None, settings: Settings, with_data: bool = True) -> dict:
    """The row of one device count: the plan's step, memory, strategy mix and solver, and with
    ``with_data`` pure data parallelism's step beside it; a count with no plan, its reason (and
    where no plan fits, the least any plan needs a device and the limit)."""
    try:
        machine.check_devices(p)
        # the baselines too, as `dnnplan plan` weighs them: a baseline outside the candidates (data
        # parallelism over a batch the devices do not divide) may be faster than their optimum
        plan = make_plan(net, network_ref, batch, p, machine, compute, memory_limit_bytes, settings)
    except Infeasible as err:  # the least any plan needs a device, beside the limit
        return refused(p, err, err.need_bytes, err.limit_bytes)
    except DnnplanError as err:
        return {"devices": p, "error": str(err)}
    row = {"devices": p, "step_s": plan.step_s, "memory_peak_bytes": plan.memory_peak_bytes, "mfu": plan.mfu}
    if with_data:  # the plan's own data-parallel baseline, priced and checked against the limit with it
        data = next(b for b in plan.baselines if b.name == DATA_PARALLEL)
        row.update({"data_step_s": data.step_s, "data_memory_peak_bytes": data.memory_peak_bytes,
                    "data_fits": data.fits})
    row.update({"mix": strategy_mix(plan), "solver": plan.solver.get("solver"), "status": plan.solver.get("status"),
                "gap": plan.solver.get("gap")})
    return row


def refused(p: int, err: Exception, need: float, limit: float) -> dict:
    """The row of a device count where no plan fits: the reason, the least a plan needs a device
    (whole bytes, rounded up) and the limit (whole where it is), as the counts so refused share a note."""
    return {"devices": p, "error": str(err), "need_bytes": math.ceil(need) if math.isfinite(need) else need,
            "limit_bytes": int(limit) if float(limit).is_integer() else limit}


def sweep(net: Network, network_ref: str, batch: int, counts: list[int], machine: Machine, compute: ComputeModel,
          memory_limit_bytes: float | None, settings: Settings, rows: list[dict] | None = None) -> list[dict]:
    """One row per device count (:func:`point`, with data parallelism), speedups and efficiencies.
    Each device count's search gets a budget of its own (``settings.budget`` renewed); ``rows``
    receives each row as it is made (what an interrupted sweep keeps)."""
    rows = [] if rows is None else rows
    for p in counts:
        each = settings if settings.budget is None else dataclasses.replace(settings, budget=settings.budget.renewed())
        rows.append(point(net, network_ref, batch, p, machine, compute, memory_limit_bytes, each))
    return with_speedups(rows)


def with_speedups(rows: list[dict]) -> list[dict]:
    """Each row's speedup and efficiency relative to the first device count of its machine that has
    a plan (and the same of data parallelism where the row has it); ``rows`` itself, filled in."""
    first: dict = {}
    for r in sorted((r for r in rows if "error" not in r), key=lambda r: r["devices"]):
        r0 = first.setdefault(r.get("machine"), r)
        r["speedup"] = r0["step_s"] / r["step_s"]
        r["efficiency"] = r["speedup"] * r0["devices"] / r["devices"]
        if "data_step_s" in r:
            r["data_speedup"] = r0["data_step_s"] / r["data_step_s"]
            r["data_efficiency"] = r["data_speedup"] * r0["devices"] / r["devices"]
    return rows


def priced(row: dict, batch: int, tokens_per_step: int | None, tokens: float | None,
           price: float | None) -> dict:
    """A planned row with its throughput (samples and, for a language model, tokens a second), its
    device-seconds a step and, for a token budget, its time, device-hours and cost to train
    (costmodel.step.train_time); a row without a plan, as it is."""
    if "error" in row:
        return row
    step = row["step_s"]
    row["samples_per_s"] = batch / step
    if tokens_per_step is not None:
        row["tokens_per_s"] = tokens_per_step / step
    row["device_s_per_step"] = step * row["devices"]
    if tokens is not None:
        row["train"] = train_time(step, tokens_per_step, row["devices"], tokens, price).json()
    return row


def mark_best(rows: list[dict]) -> list[dict]:
    """Mark the fastest point (the shortest step: every point trains the same batch) and the
    cheapest (the least cost to train where every point is priced, else the fewest device-seconds
    a step); ties go to the fewer devices, then to the machine named first. ``rows`` itself."""
    ok = [r for r in rows if "error" not in r]
    for r in rows:
        r.pop("fastest", None), r.pop("cheapest", None)
    if not ok:
        return rows
    fastest = min(ok, key=lambda r: (r["step_s"], r["devices"]))
    cheapest = min(ok, key=lambda r: (_cost(r), r["devices"]))
    for r in ok:
        r["fastest"], r["cheapest"] = r is fastest, r is cheapest
    return rows


def _cost(row: dict) -> float:
    train = row.get("train") or {}
    return train["cost"] if train.get("cost") is not None else row["step_s"] * row["devices"]
