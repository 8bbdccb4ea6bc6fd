"""Predicted H100-era training runs against their published figures (bench/assets/published-modern.yaml).

    PYTHONPATH=. python bench/published/bench_published_modern.py [--json] [--write] [--rows REGEX] [--planner [--planner-gpus N]]

Every row is predicted ahead of time as the run was configured (bench/published/published_modern.py: the
model from the row's cited dimensions, the row's machine, precision, tensor x pipeline x context x
data layout with expert parallelism, micro-batch, sequence, recomputation, attention algorithm and
data-parallel sharding), converted to the row's published metric (TFLOP/s per GPU by the source's
own FLOP convention, or tokens/s) and compared: ``error`` = predicted / published metric - 1
(negative: predicted slower than published), ``step_error`` = predicted / published step - 1.

Two predictions per row: ``shipped``, on the machine files as shipped (ahead of time, nothing fitted
to these rows), and ``calibrated``, on the four kernel efficiencies (costmodel.compute.calibration) fitted
to this file's calibration rows whose kernels are known and priced as they ran
(published_modern.kernels_as_run: no FlashAttention-1 row, not FlashAttention-2's unpublished
baseline) together with bench_megatron.py's calibration rows: one set for the A100 and H100
machines, as their shipped files carry one, nothing per row. A newer generation of GPUs
(:data:`GENERATIONS`: B200 and GB200) gets a set of its own, fitted on its own calibration rows
alone. Held-out rows are reported apart, and each generation's rows apart (``all blackwell``).
``memory_fits``: the predicted peak of the busiest device within its GPU's memory, as the
published run fitted.

``--planner`` also runs `dnnplan plan` on each distinct (model spec, GPUs, batch, machine,
precision) of rows up to ``--planner-gpus`` GPUs and holds its predicted step against the published
configuration's predicted step (the planner's choice should never be slower). ``--write`` stores
the results in bench/assets/published-modern-results.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import bench_megatron  # noqa: E402  (bench/ is not a package)
import published_modern as pm  # noqa: E402

from costmodel.compute.calibration import fit_efficiencies, with_efficiencies  # noqa: E402
from costmodel.machine.loading import load_machine  # noqa: E402
from costmodel.machine.model import EFFICIENCY_CLASSES, Machine  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "assets" / "published-modern-results.json"
#: machines whose kernels reach other fractions of their peaks than the A100 and H100 the shared
#: set is fitted on: a generation's rows are calibrated on that generation's calibration rows alone
#: (at most half of each of its tables), from its machine file's shipped values; "" is the shared set
GENERATIONS = {"dgx-b200": "blackwell", "gb200-nvl72": "blackwell"}
#: the classes a generation's own set fits (the others keep its machine file's values): the B200/GB200
#: rows are transformer trainings, whose time is FP8/BF16 GEMMs and memory-bound kernels; their few
#: rows do not identify the CUDA-core and TF32 fractions (fitting all four drove the CUDA-core one to
#: the grid's floor, 0.02, to slow the B200 MoE rows down, whose gap is not kernel speed: docs/VALIDATION.md)
GENERATION_CLASSES = ("tensor_16bit", "memory")
ROOT = Path(__file__).resolve().parents[2]


def baseline_layout(row: dict, rows: list[dict], machine: Machine) -> dict:
    """The micro-batch and recomputation of a row that publishes no micro-batch (FlashAttention-2's
    baseline column), as a user would run it: its table's FlashAttention row of the same model and
    sequence's micro-batch, halved until the predicted step fits the GPU's memory; where even one
    sequence does not fit with the row's recomputation, the least recomputation that fits
    (``selective``: attention's core, then ``full``), else one sequence as the row has it (and the
    row is shown not to fit). A row that publishes its micro-batch keeps it and its recomputation."""
    c = row["config"]
    if c["micro"] is not None:
        return {"micro": c["micro"], "recompute": c["recompute"]}
    twin = next(r for r in rows if r["model"] == row["model"] and r["config"]["sequence"] == c["sequence"]
                and r["config"]["micro"] is not None)
    cap = machine.device.mem_capacity_bytes

    def fits(micro: int, recompute: str) -> bool:
        return pm.predict_row(row, machine, micro=micro, recompute=recompute).memory_peak_bytes <= cap

    micro = twin["config"]["micro"]
    while micro > 1 and not fits(micro, c["recompute"]):
        micro //= 2
    if fits(micro, c["recompute"]):
        return {"micro": micro, "recompute": c["recompute"]}
    ladder = ("none", "selective", "full")
    for recompute in ladder[ladder.index(c["recompute"]) + 1:]:
        if fits(1, recompute):
            return {"micro": 1, "recompute": recompute}
    return {"micro": 1, "recompute": c["recompute"]}


def micros(rows: list[dict]) -> dict[str, dict]:
    """Each row's micro-batch and recomputation as priced (:func:`baseline_layout`)."""
    return {r["name"]: baseline_layout(r, rows, pm.machine_of(r)) for r in rows}


def generation(row: dict) -> str:
    """The set of efficiencies a row is calibrated with (:data:`GENERATIONS`; "" the shared one)."""
    return GENERATIONS.get(row["machine"], "")


def fitting_rows(rows: list[dict], gen: str = "") -> list[dict]:
    """The calibration rows of generation ``gen`` priced as they ran, less those the publisher filed
    as its framework's regression (``regression``: a recipe or host fault, not the kernels' speed,
    sets their step; they are still predicted and reported)."""
    return [r for r in rows if r["set"] == "calibration" and pm.kernels_as_run(r) and generation(r) == gen
            and not r.get("regression")]


def calibration_data(rows: list[dict], micro: dict[str, dict], gen: str = "") -> list[tuple]:
    """(step terms on the shipped machine, published step seconds) of generation ``gen``'s
    calibration rows priced as they ran, and for the shared set bench_megatron.py's calibration rows
    too (the A100 GPT trainings the shipped efficiencies were fitted on, so the fit keeps holding them)."""
    data = [(pm.terms_of(r, pm.machine_of(r), **micro[r["name"]]), pm.published_s(r, pm.network_of(r)))
            for r in fitting_rows(rows, gen)]
    if gen:
        return data
    return data + [(bench_megatron.terms_of(r), bench_megatron.published_s(r))
                   for r in bench_megatron.load_rows() if r["set"] == "calibration"]


def calibrate(rows: list[dict], micro: dict[str, dict]) -> dict[str, dict[str, float]]:
    """One set of efficiencies per generation (:data:`GENERATIONS`; the A100/H100 machine files carry
    one set), each fitted on :func:`calibration_data` from its machine file's shipped values;
    nothing per row."""
    out = {}
    for gen in dict.fromkeys(["", *(generation(r) for r in rows)]):
        machine = next((m for m, g in GENERATIONS.items() if g == gen), "dgx-h100")
        shipped = load_machine(machine)
        out[gen] = fit_efficiencies(calibration_data(rows, micro, gen),
                                    {k: shipped.device.efficiency_of(k) for k in EFFICIENCY_CLASSES},
                                    classes=GENERATION_CLASSES if gen else EFFICIENCY_CLASSES)
    return out


def predict(row: dict, machine: Machine, chosen: dict) -> dict:
    net = pm.network_of(row)
    pred = pm.predict_row(row, machine, **chosen)
    published_s = pm.published_s(row, net)
    key = pm.metric_of(row)
    predicted = pm.metric_at(row, net, pred.step_s)
    return {"predicted": predicted, "error": predicted / row["published"][key] - 1, "step_s": pred.step_s,
            "step_error": pred.step_s / published_s - 1, "bubble_fraction": pred.bubble_fraction,
            "memory_peak_gib": pred.memory_peak_bytes / 2 ** 30,
            "memory_fits": pred.memory_peak_bytes <= machine.device.mem_capacity_bytes}


def run(rows: list[dict], micro: dict[str, dict], fitted: dict[str, dict[str, float]]) -> list[dict]:
    out = []
    for row in rows:
        shipped = pm.machine_of(row)
        net = pm.network_of(row)
        key = pm.metric_of(row)
        ahead = predict(row, shipped, micro[row["name"]])
        cal = predict(row, with_efficiencies(shipped, fitted[generation(row)]), micro[row["name"]])
        out.append({"name": row["name"], "source": row["group"], "citation": row["source"], "split": row["set"],
                    "machine": row["machine"], "generation": generation(row), "metric": key, "flops": row["flops"],
                    "published": row["published"][key], "published_step_s": pm.published_s(row, net),
                    "parameters": pm.parameter_count(net), "layout": pm.layout(row) | micro[row["name"]],
                    "framework": pm.framework_of(row), "moe": bool(row["model"].get("moe")),
                    "regression": row.get("regression", ""),
                    "kernels_as_run": pm.kernels_as_run(row), "deviations": pm.deviations(row),
                    "shipped": ahead, "calibrated": cal,
                    "predicted": cal["predicted"], "error": cal["error"], "memory_fits": cal["memory_fits"]})
    return out


def summary(results: list[dict], which: str) -> dict:
    """Per source and split: rows, mean |error|, worst |error|, mean signed error, rows over 30%."""
    def of(rs: list[dict]) -> dict:
        errs = [r[which]["error"] for r in rs]
        return {"rows": len(errs), "mean_abs_error": sum(map(abs, errs)) / len(errs),
                "worst_abs_error": max(map(abs, errs)), "mean_error": sum(errs) / len(errs),
                "over_30": sum(abs(e) > 0.30 for e in errs)}
    out = {}
    for source in dict.fromkeys(r["source"] for r in results):
        for split in ("held-out", "calibration"):
            if rs := [r for r in results if r["source"] == source and r["split"] == split]:
                out[f"{source} | {split}"] = of(rs)
    for split in ("held-out", "calibration"):
        if rs := [r for r in results if r["split"] == split]:  # --rows may select one split only
            out[f"all | {split}"] = of(rs)
    for split in ("held-out", "calibration"):
        if rs := [r for r in results if not r.get("generation") and r["split"] == split]:
            out[f"all h100-era | {split}"] = of(rs)
    for gen, label in (("", "h100-era"), ("blackwell", "blackwell")):
        if rs := [r for r in results if r.get("generation", "") == gen and r["split"] == "held-out"
                  and not r.get("regression")]:
            out[f"all {label} but cited regressions | held-out"] = of(rs)
    for gen, label in (("", "h100-era"), ("blackwell", "blackwell")):
        for split in ("held-out", "calibration"):
            if rs := [r for r in results if r.get("moe") and r.get("generation", "") == gen and r["split"] == split]:
                out[f"all {label} moe | {split}"] = of(rs)
    gens = dict.fromkeys(r.get("generation", "") for r in results)
    for gen in gens if len(gens) > 1 else ():
        for split in ("held-out", "calibration"):
            if gen and (rs := [r for r in results if r.get("generation") == gen and r["split"] == split]):
                out[f"all {gen} | {split}"] = of(rs)
    return out


def plan_step(row: dict, time_limit: float) -> dict:
    """`dnnplan plan` on the row's devices, batch, sequence, machine and precision (Adam), with the
    overlap the row's run had (``--overlap``, published_modern.overlap_of) and its experts' token
    dispatcher (``--moe-dispatch``)."""
    c = row["config"]
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(pm.model_spec(row))
    cmd = [str(Path(sys.executable).parent / "dnnplan"), "plan", f.name, "-p", str(c["gpus"]), "-b", str(c["batch"]),
           "--machine", row["machine"], "--precision", pm.precision_of(row), "--optimizer", "adam",
           "--time-limit", str(time_limit), "--json", "--overlap", pm.overlap_of(row),
           "--moe-dispatch", pm.moe_dispatch_of(row)]
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        os.unlink(f.name)
    took = time.perf_counter() - start
    if done.returncode or not done.stdout.strip():
        return {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1], "seconds": took}
    got = json.loads(done.stdout)
    return {"step_s": got["step_s"], "zero": got.get("zero"), "pipeline": bool(got.get("pipeline")),
            "memory_peak_gib": got["memory_peak_bytes"] / 2 ** 30, "seconds": took}


def plan_key(row: dict) -> tuple:
    """What `dnnplan plan` is given for a row (:func:`plan_step`): rows with the same key share one
    plan. The spec's text, not the model's name: two runs of one model may differ in a layer (NeMo
    25.11's fused cross-entropy loss against 24.07's unfused one)."""
    c = row["config"]
    return (pm.model_spec(row), c["gpus"], c["batch"], row["machine"], pm.precision_of(row), pm.overlap_of(row),
            pm.moe_dispatch_of(row))


def planner_check(rows: list[dict], results: list[dict], max_gpus: int, time_limit: float) -> None:
    """Adds ``planner`` to each result of up to ``max_gpus`` GPUs: the planner's own step on the
    row's shipped machine against the published configuration's (both ahead of time, on one stack:
    :func:`published_as_planned`)."""
    seen: dict[tuple, dict] = {}
    for row, res in zip(rows, results, strict=True):
        c = row["config"]
        if c["gpus"] > max_gpus:
            continue
        placed = pm.machine_of(row).domain_size
        if placed != load_machine(row["machine"]).domain_size:  # the planner plans on the rack as shipped
            res["planner"] = {"error": f"run in Slurm segments of {placed} GPUs (published_modern.machine_of); "
                                       f"`dnnplan plan` prices {row['machine']}'s racks as shipped"}
            continue
        key = plan_key(row)
        if key not in seen:
            seen[key] = plan_step(row, time_limit)
            print(f"  planned {key[1:]}: {seen[key]}", file=sys.stderr, flush=True)
        got = seen[key]
        res["planner"] = got | ({"published_step_s": (ref := published_as_planned(row, res)),
                                 "not_slower": got["step_s"] <= ref * (1 + 1e-9)} if "step_s" in got else {})


#: the run's settings `dnnplan plan` has no option for (it plans dnnplan's stack: fused Adam, the
#: gradients reduced in their own precision when their ZeRO stage reduces them)
STACK = ("grad_reduce", "reduce_each_micro", "optimizer")


def published_as_planned(row: dict, res: dict) -> float:
    """The published configuration's step on the shipped machine on the stack `dnnplan plan`
    prices: a row whose run differs in a :data:`STACK` setting (Composer's float32 reduce-scatter in
    every micro-batch with torch FSDP's kernels, unfused AdamW) is priced again without it, so the
    planner's plan and the layout run one stack (the run's overlap is given to both)."""
    if not any(row["config"].get(k) for k in STACK):
        return res["shipped"]["step_s"]
    plain = {**row, "config": {k: v for k, v in row["config"].items() if k not in STACK}}
    return pm.predict_row(plain, pm.machine_of(row), **{k: res["layout"][k] for k in ("micro", "recompute")}).step_s


def _commit() -> str:
    got = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    return got.stdout.strip()


def fitted_on(rows: list[dict]) -> dict:
    """The rows the shared efficiencies were fitted on: this file's by name, and bench_megatron.py's
    count; each other generation's rows by name."""
    return {"rows": [r["name"] for r in fitting_rows(rows)],
            "bench_megatron_rows": sum(r["set"] == "calibration" for r in bench_megatron.load_rows()),
            "by_generation": {g: [r["name"] for r in fitting_rows(rows, g)] for g in dict.fromkeys(GENERATIONS.values())}}


def report(rows: list[dict], results: list[dict], fitted: dict, took: float) -> dict:
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": _commit(), "cpus": os.cpu_count(), "host_load": os.getloadavg()[0], "seconds": took,
            "command": "PYTHONPATH=. python bench/published/bench_published_modern.py --write"
                       + (" --planner" if any("planner" in r for r in results) else ""),
            "fitted_efficiencies": fitted[""],
            "fitted_efficiencies_by_generation": {g: e for g, e in fitted.items() if g}, "fitted_on": fitted_on(rows), "summary_calibrated": summary(results, "calibrated"),
            "summary_shipped": summary(results, "shipped"), "rows": results}


def show(out: dict) -> None:
    print(f"{'row':44s} {'split':11s} {'metric':20s} {'published':>10s} {'shipped':>10s} {'err':>7s} "
          f"{'calibr.':>10s} {'err':>7s} {'memory':>9s}")
    for r in out["rows"]:
        s, c = r["shipped"], r["calibrated"]
        fits = "" if c["memory_fits"] else " > GPU"
        plan = r.get("planner")
        planned = (f"  plan {plan['step_s']:.2f}s vs {plan.get('published_step_s', s['step_s']):.2f}s"
                   if plan and "step_s" in plan else "")
        print(f"{r['name']:44s} {r['split']:11s} {r['metric']:20s} {r['published']:10.4g} {s['predicted']:10.4g} "
              f"{s['error']:+7.1%} {c['predicted']:10.4g} {c['error']:+7.1%} {c['memory_peak_gib']:6.1f} GiB{fits}"
              f"{planned}")
    print("fitted efficiencies:", json.dumps(out["fitted_efficiencies"]))
    for gen, eff in out.get("fitted_efficiencies_by_generation", {}).items():
        print(f"fitted efficiencies ({gen}):", json.dumps(eff))
    for label, key in (("shipped efficiencies", "summary_shipped"), ("calibrated", "summary_calibrated")):
        print(label)
        for g, x in out[key].items():
            print(f"  {g:70s} {x['rows']:3d} rows: mean |error| {x['mean_abs_error']:6.1%}, worst "
                  f"{x['worst_abs_error']:6.1%}, mean signed {x['mean_error']:+6.1%}, over 30%: {x['over_30']}")


def markdown(out: dict, generation_: str | None = None) -> str:
    """docs/VALIDATION.md's tables: per source and split, then per row; with ``generation_``, only
    that generation's rows ("" the A100/H100 ones, "blackwell"), their summaries recomputed."""
    if generation_ is not None:
        rows = [r for r in out["rows"] if r.get("generation", "") == generation_]
        out = {**out, "rows": rows, "summary_calibrated": summary(rows, "calibrated"),
               "summary_shipped": summary(rows, "shipped")}
    lines = ["| source | split | rows | mean \\|error\\| shipped | worst | mean \\|error\\| calibrated | worst | over 30% |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for key, cal in out["summary_calibrated"].items():
        ship = out["summary_shipped"][key]
        source, split = key.split(" | ")
        lines.append(f"| {source} | {split} | {cal['rows']} | {ship['mean_abs_error']:.1%} | {ship['worst_abs_error']:.1%} "
                     f"| {cal['mean_abs_error']:.1%} | {cal['worst_abs_error']:.1%} | {cal['over_30']} |")
    lines += ["", "| row | split | metric | published | predicted (shipped) | error | calibrated | error | memory GiB "
                  "| fits | planner s / published layout s |", "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for r in out["rows"]:
        s, c, plan = r["shipped"], r["calibrated"], r.get("planner") or {}
        planned = (f"{plan['step_s']:.2f} / {plan.get('published_step_s', s['step_s']):.2f}" if "step_s" in plan
                   else plan.get("error", "")[:40])
        lines.append(f"| {r['name']} | {r['split']} | {r['metric']} | {r['published']:.4g} | {s['predicted']:.4g} | "
                     f"{s['error']:+.1%} | {c['predicted']:.4g} | {c['error']:+.1%} | {c['memory_peak_gib']:.1f} | "
                     f"{'yes' if c['memory_fits'] else '**no**'} | {planned} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("--write", action="store_true", help=f"write {RESULTS.relative_to(ROOT)}")
    ap.add_argument("--markdown", metavar="RESULTS", help="print the tables of a results file and stop")
    ap.add_argument("--generation", choices=["", *dict.fromkeys(GENERATIONS.values())],
                    help="with --markdown: only this generation's rows ('' the A100/H100 ones)")
    ap.add_argument("--rows", metavar="REGEX", help="predict only the rows whose name matches (the calibration "
                    "still fits on every calibration row); not with --write")
    ap.add_argument("--planner", action="store_true", help="also run `dnnplan plan` per distinct configuration")
    ap.add_argument("--planner-gpus", type=int, default=64, help="only configurations of at most this many GPUs")
    ap.add_argument("--planner-limit", type=float, default=60.0, help="each plan's --time-limit in seconds")
    args = ap.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text()), args.generation))
        return 0
    start = time.perf_counter()
    rows = pm.load_rows()
    micro = micros(rows)
    fitted = calibrate(rows, micro)
    if args.rows and args.write:
        ap.error("--rows predicts a subset: leave --write out")
    results = run([r for r in rows if re.search(args.rows, r["name"])] if args.rows else rows, micro, fitted)
    if args.planner:
        planner_check(rows, results, args.planner_gpus, args.planner_limit)
    out = report(rows, results, fitted, time.perf_counter() - start)
    if args.write:
        RESULTS.write_text(json.dumps(out, indent=1) + "\n")
    if args.json:
        print(json.dumps(out))
    else:
        show(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
