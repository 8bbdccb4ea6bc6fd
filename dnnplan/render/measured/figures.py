"""`dnnplan validate --report`: the PNG figures of predicted against measured (needs matplotlib).

Three figures, each from the rows of the validate's JSON (``plans``), so they show exactly the
numbers the report's tables and the JSON hold:

- ``step_time.png``: predicted (ahead of time) and measured step per plan, and between them, when
  the plans have one, the step predicted from kernel times re-timed inside the run
  (executor.report.in_run); the measured bar's whiskers reach the fastest and slowest timed step (over
  every repeat);
- ``layer_error.png``: each layer's relative error, (measured - predicted) / predicted, one bar
  per plan (linear within +-100%, logarithmic beyond, so one layer off by 40x leaves the others
  readable);
- ``memory.png``: predicted and measured peak memory per rank, per plan (only when measured).
"""

from __future__ import annotations

from dnnplan.render.plot import pyplot as _pyplot, save_figure

STEP_PNG, LAYER_PNG, MEMORY_PNG = "step_time.png", "layer_error.png", "memory.png"


def pyplot():
    """matplotlib's pyplot for the report's figures (dnnplan.render.plot.pyplot)."""
    return _pyplot("--report needs matplotlib for its figures")


def _save(plt, fig, path: str) -> None:
    save_figure(plt, fig, path, "figure", 110)


def _names(plans: list[dict]) -> list[str]:
    return [r["name"] for r in plans]


def step_figure(plans: list[dict], path: str, title: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(plans) + 2), 4))
    xs = range(len(plans))
    ms = 1e3
    in_run = any(r.get("in_run_predicted_step_s") is not None for r in plans)
    width = 0.27 if in_run else 0.4
    ax.bar([x - width / 2 * (2 if in_run else 1) for x in xs], [r["predicted_step_s"] * ms for r in plans], width,
           label="predicted ahead of time")
    if in_run:
        ax.bar(list(xs), [(r.get("in_run_predicted_step_s") or 0.0) * ms for r in plans], width,
               label="predicted from in-run kernel times")
    med = [r["measured_step_s"] * ms for r in plans]
    low = [max(m - r["measured_step_min_s"] * ms, 0.0) for m, r in zip(med, plans)]
    high = [max(r["measured_step_max_s"] * ms - m, 0.0) for m, r in zip(med, plans)]
    ax.bar([x + width / 2 * (2 if in_run else 1) for x in xs], med, width, yerr=[low, high], capsize=4,
           label="measured (median; min to max)")
    ax.set_xticks(list(xs), _names(plans), rotation=15)
    ax.set_ylabel("step time (ms)")
    ax.set_title(title)
    ax.legend()
    _save(plt, fig, path)


def layer_figure(plans: list[dict], path: str, title: str) -> None:
    plt = pyplot()
    names = [l["name"] for l in plans[0].get("layers", [])] if plans else []
    for r in plans[1:]:
        names += [l["name"] for l in r.get("layers", []) if l["name"] not in names]
    fig, ax = plt.subplots(figsize=(min(max(6.0, 0.22 * len(names) * max(len(plans), 1) + 2), 40), 4.5))
    width = 0.8 / max(len(plans), 1)
    for k, r in enumerate(plans):
        rel = {l["name"]: l["rel"] for l in r.get("layers", [])}
        ax.bar([i - 0.4 + width * (k + 0.5) for i in range(len(names))],
               [100 * rel[n] if rel.get(n) is not None else 0.0 for n in names], width, label=r["name"])
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_yscale("symlog", linthresh=100)  # linear within +-100%, logarithmic beyond: outliers stay readable
    top = max([100 * l["rel"] for r in plans for l in r.get("layers", []) if l.get("rel") is not None] + [100.0])
    ticks = error_ticks(top)
    ax.set_yticks(ticks, [f"{t:+,.0f}%" if t else "0" for t in ticks])
    ax.set_ylim(-100, max(ticks))
    ax.set_xticks(range(len(names)), names, rotation=90, fontsize=7)
    ax.set_xlabel("layer")
    ax.set_ylabel("error of the layer's time (%)\n(measured - predicted) / predicted;\n"
                  "linear to +100%, logarithmic above", fontsize=8)
    ax.set_title(title)
    ax.legend(fontsize=8)
    _save(plt, fig, path)


def error_ticks(top_pct: float) -> list[float]:
    """Ticks a reader takes in at a glance on the layer-error axis: every 50% from -100% to +100%
    (the linear part), then 1, 2 and 5 times the powers of ten up to the largest error (the
    logarithmic part), in per cent."""
    ticks = [-100.0, -50.0, 0.0, 50.0, 100.0]
    decade = 100.0
    while ticks[-1] < top_pct:
        for k in (2, 5, 10):
            ticks.append(decade * k)
            if ticks[-1] >= top_pct:
                break
        decade *= 10
    return ticks


def memory_figure(plans: list[dict], path: str, title: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(plans) + 2), 4))
    xs = range(len(plans))
    mib = 2**20
    ax.bar([x - 0.2 for x in xs], [(r.get("predicted_peak_bytes") or 0) / mib for r in plans], 0.4, label="predicted")
    ax.bar([x + 0.2 for x in xs], [(r.get("measured_peak_bytes") or 0) / mib for r in plans], 0.4,
           label="measured (largest rank)")
    ax.set_xticks(list(xs), _names(plans), rotation=15)
    ax.set_ylabel("peak memory per rank (MiB)")
    ax.set_title(title)
    ax.legend()
    _save(plt, fig, path)


def write_figures(plans: list[dict], folder: str, title: str) -> list[str]:
    """Draw the figures into ``folder``; the file names written (memory only when it was measured)."""
    step_figure(plans, f"{folder}/{STEP_PNG}", f"step time: {title}")
    layer_figure(plans, f"{folder}/{LAYER_PNG}", f"layer error: {title}")
    written = [STEP_PNG, LAYER_PNG]
    if any(r.get("measured_peak_bytes") for r in plans):
        memory_figure(plans, f"{folder}/{MEMORY_PNG}", f"peak memory: {title}")
        written.append(MEMORY_PNG)
    return written
