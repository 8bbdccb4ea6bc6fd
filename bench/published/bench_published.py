"""Predicted training throughput against published measurements (bench/assets/published.yaml).

    PYTHONPATH=. python bench/published/bench_published.py [--calibrate] [--json]

Each row is a published configuration (network, machine, precision, GPUs, batch per GPU) run as its
publisher ran it: data parallel, every convolution on its fastest algorithm (cuDNN's benchmark
mode). The prediction is made from the shipped machine YAML alone, before any run. Rows marked
``calibration`` are the ones the machines' efficiencies were fitted on (at most half of them);
the error is reported separately for them and for the held-out rest.

``--calibrate`` fits the efficiencies again on the calibration rows (costmodel.compute.calibration) and
prints them: the shipped machines carry these values (docs/VALIDATION.md).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from costmodel.compute.calibration import fit_efficiencies, step_s, step_terms, with_efficiencies
from costmodel.layer.candidates import algorithms
from costmodel.calls.layer_calls import PASSES
from costmodel.compute.roofline import Roofline
from costmodel.parallel.shard import local_layer
from costmodel.machine.loading import load_machine
from costmodel.machine.model import DEFAULT_EFFICIENCY, EFFICIENCY_CLASSES, Machine
from costmodel.choices.precision import get_precision, with_precision
from costmodel.step.prediction import predict_step
from costmodel.parallel.strategy import make_strategy
from costmodel.frameworks.uniform import uniform_strategies
from networks.loader import load_network
from networks.spec import parse_network
from planner.problem.solve import fastest_algorithms

ASSET = Path(__file__).resolve().parents[1] / "assets" / "published.yaml"
DEEPBENCH = Path(__file__).resolve().parents[1] / "assets" / "deepbench_v100.yaml"


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
    """The step terms (costmodel.compute.calibration) of ``row`` on ``machine``, with the algorithms the
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


@functools.cache
def megatron():
    """bench/published/bench_megatron.py as a module (loaded once): its calibration rows are fitted with these."""
    spec = importlib.util.spec_from_file_location("bench_megatron", Path(__file__).parent / "bench_megatron.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def calibration_data(rows: list[Row], effs: dict[str, float]) -> list[tuple]:
    """(step terms, published step seconds) of every calibration row: this file's ResNet-50 rows
    and bench_megatron.py's Megatron-LM ones, priced with ``effs``."""
    data = [(terms_of(r, with_efficiencies(load_machine(r.machine), effs)), r.gpus * r.batch_per_gpu / r.published)
            for r in rows if r.set == "calibration"]
    mega = megatron()
    return data + [(mega.terms_of(r, with_efficiencies(load_machine(mega.MACHINE), effs)), mega.published_s(r))
                   for r in mega.load_rows() if r["set"] == "calibration"]


def calibrate(rows: list[Row]) -> dict[str, float]:
    """Efficiencies fitted on the calibration rows, ResNet-50's here and Megatron-LM's
    (bench_megatron.py): fit, re-choose the convolution algorithms, fit again."""
    effs = {k: DEFAULT_EFFICIENCY for k in EFFICIENCY_CLASSES}  # the same start always, not the shipped values
    for _ in range(4):
        new = fit_efficiencies(calibration_data(rows, effs), effs)
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


def deepbench_layers(path: Path = DEEPBENCH) -> list[dict]:
    """Each DeepBench convolution pass on the V100, predicted by the shipped dgx1-v100 roofline
    (the fastest algorithm that applies, per pass, as cuDNN chooses per pass) against its time."""
    doc = yaml.safe_load(path.read_text())
    machine = load_machine("dgx1-v100")
    out = []
    for values in doc["rows"]:
        r = dict(zip(doc["columns"], values))
        precision = "fp16" if r["sheet"] == "fp16" else "fp32"
        spec = (f"name: deepbench\ninputs:\n  x: {{shape: [{r['C']}, {r['H']}, {r['W']}]}}\nlayers:\n"
                f"  - {{name: conv, op: conv2d, filters: {r['K']}, kernel: [{r['R']}, {r['S']}], "
                f"stride: [{r['stride_h']}, {r['stride_w']}], padding: [{r['pad_h']}, {r['pad_w']}], bias: false}}\n")
        net = with_precision(parse_network(spec, "deepbench"), precision)
        layer = net.layers[0]
        local = local_layer(layer, make_strategy(1, {}), r["N"])
        model = Roofline(machine)
        for pass_, key in zip(PASSES, ("forward_ms", "wrt_inputs_ms", "wrt_parameters_ms")):
            predicted = min(model.pass_s(local, pass_, a) for a in algorithms(layer))
            measured = r[key] / 1e3
            out.append({"sheet": r["sheet"], "row": r["row"], "pass": pass_, "predicted_s": predicted,
                        "measured_s": measured, "error": predicted / measured - 1})
    return out


def layer_summary(layers: list[dict]) -> dict:
    """Per sheet and pass: how many passes, the median |error| and median signed error."""
    out = {}
    keys = sorted({(x["sheet"], x["pass"]) for x in layers})
    for sheet, pass_ in keys + [(s, "all") for s in sorted({x["sheet"] for x in layers})]:
        errs = sorted(x["error"] for x in layers if x["sheet"] == sheet and pass_ in ("all", x["pass"]))
        abss = sorted(abs(e) for e in errs)
        out[f"{sheet} {pass_}"] = {"passes": len(errs), "median_abs_error": abss[len(abss) // 2],
                                   "median_error": errs[len(errs) // 2],
                                   "within_30": sum(a <= 0.3 for a in abss) / len(abss)}
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
    layers = deepbench_layers()
    per_layer = layer_summary(layers)
    if args.json:
        print(json.dumps({"rows": results, "summary": summ, "fitted": fitted, "deepbench": layers,
                          "deepbench_summary": per_layer}))
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
    print("\nDeepBench ResNet convolutions on a V100, per pass (held out; bench/assets/deepbench_v100.yaml):")
    for key, s in per_layer.items():
        print(f"  {key}: {s['passes']} passes, median |error| {s['median_abs_error']:.1%}, "
              f"median error {s['median_error']:+.1%}, within 30%: {s['within_30']:.0%}")
    print(f"({time.perf_counter() - start:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
