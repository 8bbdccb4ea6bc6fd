"""Predicted training throughput against published measurements (bench/assets/published.yaml).

    PYTHONPATH=. python bench/bench_published.py [--calibrate] [--json]

Each row is a published configuration (network, machine, precision, GPUs, batch per GPU) run as its
publisher ran it: data parallel, every convolution on its fastest algorithm (cuDNN's benchmark
mode). The prediction is made from the shipped machine YAML alone, before any run. Rows marked
``calibration`` are the ones the machines' efficiencies were fitted on (at most half of them);
the error is reported separately for them and for the held-out rest.

``--calibrate`` fits the efficiencies again on the calibration rows (costmodel.calibration) and
prints them: the shipped machines carry these values (docs/VALIDATION.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from costmodel.calibration import fit_efficiencies, step_s, step_terms, with_efficiencies
from costmodel.files import load_machine
from costmodel.machine import DEFAULT_EFFICIENCY, EFFICIENCY_CLASSES, Machine
from costmodel.precision import get_precision, with_precision
from costmodel.step import predict_step
from costmodel.uniform import uniform_strategies
from networks.loader import load_network
from planner.optimize import fastest_algorithms

ASSET = Path(__file__).parent / "assets" / "published.yaml"


@dataclass(frozen=True)
class Row:
    name: str
    network: str
    machine: str
    precision: str
    gpus: int
    batch_per_gpu: int
    published: float  # samples per second, all GPUs together
    unit: str
    source: str
    set: str  # "calibration" or "held-out"


def load_rows(path: Path = ASSET) -> list[Row]:
    rows = [Row(**r) for r in yaml.safe_load(path.read_text())["rows"]]
    calib = sum(r.set == "calibration" for r in rows)
    if calib * 2 > len(rows):
        raise SystemExit(f"{path}: {calib} of {len(rows)} rows are for calibration; at most half may be")
    return rows


def terms_of(row: Row, machine: Machine):
    """The step terms (costmodel.calibration) of ``row`` on ``machine``, with the algorithms the
    machine's current efficiencies make fastest."""
    prec = get_precision(row.precision)
    net = with_precision(load_network(row.network), prec.name)
    batch = row.gpus * row.batch_per_gpu
    strategies, _ = uniform_strategies(net, row.gpus, batch, "data")

    def predict(compute) -> float:
        algos = fastest_algorithms(net, strategies, batch, machine, compute)
        compute.calls.clear()  # only the prediction's own kernels
        return predict_step(net, batch, strategies, algos, machine, compute).step_s

    return step_terms(machine, predict, tf32=prec.matmul == "tf32")


def calibrate(rows: list[Row]) -> dict[str, float]:
    """Efficiencies fitted on the calibration rows: fit, re-choose the algorithms, fit again."""
    effs = {k: DEFAULT_EFFICIENCY for k in EFFICIENCY_CLASSES}  # the same start always, not the shipped values
    for _ in range(4):
        data = [(terms_of(r, with_efficiencies(load_machine(r.machine), effs)),
                 r.gpus * r.batch_per_gpu / r.published) for r in rows if r.set == "calibration"]
        new = fit_efficiencies(data, effs)
        if new == effs:
            break
        effs = new
    return effs


def predict_rows(rows: list[Row], fitted: dict[str, float] | None = None) -> list[dict]:
    """Each row predicted on its shipped machine, or with the ``fitted`` efficiencies."""
    out = []
    for r in rows:
        machine = load_machine(r.machine)
        if fitted:
            machine = with_efficiencies(machine, fitted)
        effs = {k: machine.device.efficiency_of(k) for k in EFFICIENCY_CLASSES}
        step = step_s(terms_of(r, machine), effs)
        predicted = r.gpus * r.batch_per_gpu / step
        out.append({"name": r.name, "set": r.set, "predicted": predicted, "published": r.published,
                    "unit": r.unit, "error": predicted / r.published - 1, "source": r.source})
    return out


def summary(results: list[dict]) -> dict:
    out = {}
    for which in ("calibration", "held-out"):
        errs = [abs(x["error"]) for x in results if x["set"] == which]
        out[which] = {"rows": len(errs), "mean_abs_error": sum(errs) / len(errs) if errs else None,
                      "worst_abs_error": max(errs) if errs else None}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calibrate", action="store_true", help="fit the efficiencies on the calibration rows")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    rows = load_rows()
    fitted = calibrate(rows) if args.calibrate else None
    results = predict_rows(rows, fitted)
    summ = summary(results)
    if args.json:
        print(json.dumps({"rows": results, "summary": summ, "fitted": fitted}))
        return 0
    if fitted:
        print("fitted on the calibration rows (the rows below use these): "
              + ", ".join(f"{k} {v:.2f}" for k, v in fitted.items()))
    print(f"{'configuration':44s} {'set':12s} {'predicted':>10s} {'published':>10s} {'error':>7s}  source")
    for x in results:
        print(f"{x['name']:44s} {x['set']:12s} {x['predicted']:10.0f} {x['published']:10.0f} "
              f"{x['error']:+7.1%}  {x['source']}")
    for which, s in summ.items():
        if s["rows"]:
            print(f"{which}: {s['rows']} rows, mean |error| {s['mean_abs_error']:.1%}, "
                  f"worst {s['worst_abs_error']:.1%}")
    print(f"({time.perf_counter() - start:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
