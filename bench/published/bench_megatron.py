"""Predicted Megatron-LM training steps against published ones (bench/assets/megatron.yaml).

    PYTHONPATH=. python bench/published/bench_megatron.py [--json]

Each row is a GPT trained by Megatron-LM on DGX A100 80GB nodes as its paper configures it:
tensor parallelism of degree t inside each of p pipeline stages of whole transformer blocks
(costmodel.frameworks.megatron, costmodel.step.pipeline), data parallelism over the rest, micro-batches of the
published size in a 1F1B schedule, full or selective activation recomputation, sequence
parallelism where used, fp16 with Adam, attention materialised as those runs had it
(``ATTENTION``); the ZeRO-3 rows of Narayanan's Table 2, run by DeepSpeed
without model parallelism, as costmodel.frameworks.deepspeed prices DeepSpeed's step. The prediction is made from the shipped dgx-a100 machine
before any run. Its efficiencies were fitted on the rows marked ``calibration`` here (every other
row of each table, half of the Megatron rows) together with bench_published.py's ResNet-50 rows
(``bench_published.py --calibrate``); the error is reported separately for the held-out rest. The
error is predicted / published step time - 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import yaml

from costmodel.compute.calibration import PipelineTerms, pipeline_terms, stage_compute
from costmodel.calls.algorithms import recompute_algorithms
from costmodel.frameworks.deepspeed import zero3_step
from costmodel.machine.loading import load_machine
from costmodel.machine.model import Machine
from costmodel.frameworks.megatron import megatron_strategies
from costmodel.choices.optimizer import Optimizer
from costmodel.step.pipeline import INTERLEAVED, predict_pipeline
from costmodel.choices.precision import with_precision
from costmodel.step.prediction import predict_step
from networks.ir import Network
from networks.spec import parse_network

ASSET = Path(__file__).resolve().parents[1] / "assets" / "megatron.yaml"
MACHINE = "dgx-a100"
SEQUENCE, VOCABULARY = 2048, 51200  # Narayanan et al. section 5.1; Korthikanti et al. section 6
#: The attention algorithm of these runs: Megatron-LM of 2021-22 ran attention unfused (the scores
#: materialised; FlashAttention came later), so the machine's default (flash on an A100) is not used
ATTENTION = "materialized"


def gpt_spec(layers: int, hidden: int, heads: int, seq: int = SEQUENCE, vocab: int = VOCABULARY) -> str:
    """A Megatron GPT as a network spec: the pre-norm blocks of networks/zoo/gpt3-175b.yaml."""
    return f"""name: gpt-{layers}x{hidden}
inputs:
  tokens: {{shape: [{seq}], dtype: int64}}
blocks:
  transformer:
    params: {{dim: {hidden}, heads: {heads}, rate: 0.1}}
    layers:
      - {{name: ln1, op: layernorm}}
      - {{name: attn, op: attention, heads: "{{heads}}", causal: true}}
      - {{name: attn_drop, op: dropout, rate: "{{rate}}"}}
      - {{name: add1, op: add, inputs: [$input, attn_drop]}}
      - {{name: ln2, op: layernorm}}
      - {{name: fc, op: linear, features: "{{4 * dim}}"}}
      - {{name: gelu, op: gelu}}
      - {{name: proj, op: linear, features: "{{dim}}"}}
      - {{name: mlp_drop, op: dropout, rate: "{{rate}}"}}
      - {{name: add2, op: add, inputs: [add1, mlp_drop]}}
layers:
  - {{name: embed, op: embedding, inputs: tokens, vocab: {vocab}, dim: {hidden}, positions: {seq}}}
  - {{name: embed_drop, op: dropout, rate: 0.1}}
  - {{use: transformer, name: "h{{i}}", repeat: {layers}}}
  - {{name: ln_f, op: layernorm}}
  - {{name: lm_head, op: linear, features: {vocab}, bias: false, tied_to: embed}}
  - {{name: loss, op: softmax_cross_entropy}}
"""


def narayanan_flops(batch: int, layers: int, hidden: int, seq: int = SEQUENCE, vocab: int = VOCABULARY) -> float:
    """Narayanan et al. SC21, equation (3): FLOPs of one iteration with full recomputation."""
    return 96 * batch * seq * layers * hidden ** 2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))


def published_s(row: dict) -> float:
    pub, m, c = row["published"], row["model"], row["config"]
    if "seconds" in pub:
        return float(pub["seconds"])
    return narayanan_flops(c["batch"], m["layers"], m["hidden"]) / (pub["tflops_per_gpu"] * 1e12 * c["gpus"])


def network_of(row: dict) -> Network:
    m = row["model"]
    return with_precision(parse_network(gpt_spec(m["layers"], m["hidden"], m["heads"]), row["name"]), "fp16")


def predict_row(row: dict, machine: Machine | None = None, recorders: list | None = None):
    """The pipelined step (costmodel.step.pipeline.PipelinePrediction) of the row's configuration on
    ``machine`` (the shipped dgx-a100 by default), or DeepSpeed's ZeRO-3 step
    (costmodel.frameworks.deepspeed.Zero3Step) for the ZeRO-3 rows. Each stage is priced by a roofline of its own,
    appended to ``recorders`` when given (a :class:`StageRecorder` each: :func:`terms_of`)."""
    c = row["config"]
    net = network_of(row)
    machine = machine or load_machine(MACHINE)
    opt = Optimizer("adam", c.get("zero", 0))
    algorithms = recompute_algorithms(net, c.get("recompute", "none"), ATTENTION)
    data = c["gpus"] // (c["tensor"] * c["pipeline"])
    micro_batches = c["batch"] // (data * c["micro"])

    def stage(stage_net: Network, ranks: int, micro: int, view: Machine = machine):
        strategies, fallbacks = megatron_strategies(stage_net, ranks, micro, c["tensor"],
                                                    c.get("sequence_parallel", False))
        if fallbacks:
            raise SystemExit(f"{row['name']}: {fallbacks[0].layer} cannot take {fallbacks[0].wanted}: "
                             f"{fallbacks[0].reason}")
        compute = stage_compute(machine, recorders)
        # Megatron-LM as run in 2021-22 all-reduced the gradients after the backward pass (its local
        # DDP; --overlap-grad-reduce came with Megatron-Core): no overlap (costmodel.comm.overlap)
        return predict_step(stage_net, micro, strategies, algorithms, view, compute, opt,
                            checkpoints=c.get("recompute") == "full", overlap="none")

    chunks = c.get("chunks", 1)  # model chunks a device: the interleaved schedule (Korthikanti's 175B and 530B)
    if c.get("zero") == 3:  # DeepSpeed's ZeRO-3 over every rank, no model parallelism (costmodel.frameworks.deepspeed)
        return zero3_step(net, c["gpus"], micro_batches, stage(net, c["gpus"], c["gpus"] * c["micro"]), machine,
                          c.get("recompute", "none") != "none")
    return predict_pipeline(net, c["batch"], c["gpus"], c["pipeline"], micro_batches,
                            INTERLEAVED if chunks > 1 else "1f1b", machine, stage, chunks=chunks)


def terms_of(row: dict, machine: Machine | None = None) -> PipelineTerms:
    """The row's predicted step as priced terms (costmodel.compute.calibration), for re-pricing it under
    other efficiencies without predicting again."""
    recorders: list = []
    pred = predict_row(row, machine, recorders)
    return pipeline_terms(machine or load_machine(MACHINE),
                          [(r, s.per_micro_s, s.once_s) for r, s in zip(recorders, pred.stages, strict=True)],
                          pred.micro_batches, pred.chunks)


def load_rows(path: Path = ASSET) -> list[dict]:
    """The rows, each marked ``calibration`` or ``held-out`` (at most half calibrate)."""
    rows = yaml.safe_load(path.read_text())["rows"]
    calib = sum(r["set"] == "calibration" for r in rows)
    if calib * 2 > len(rows) or any(r["set"] not in ("calibration", "held-out") for r in rows):
        raise SystemExit(f"{path}: every row is calibration or held-out, and at most half calibrate")
    return rows


def group_of(row: dict) -> str:
    """The table a row comes from, ZeRO-3 rows apart (DeepSpeed's, not Megatron's, parallelism)."""
    paper, table = row["source"].split(" et al.")[0], row["source"].split("Table ")[1].split(",")[0]
    return f"{paper} Table {table}" + (" ZeRO-3" if row["config"].get("zero") else "")


def run(rows: list[dict]) -> list[dict]:
    out = []
    for row in rows:
        pred = predict_row(row)
        pub = published_s(row)
        out.append({"name": row["name"], "group": group_of(row), "set": row["set"], "predicted_s": pred.step_s, "published_s": pub,
                    "error": pred.step_s / pub - 1, "bubble": pred.bubble_fraction,
                    "memory_peak_gib": pred.memory_peak_bytes / 2 ** 30, "source": row["source"]})
    return out


def summary(results: list[dict]) -> dict:
    """Mean and worst |error| over all rows, over each table, and over the Megatron rows (tensor and
    pipeline parallelism: every row but ZeRO-3's)."""
    def of(rs: list[dict]) -> dict:
        errs = [abs(r["error"]) for r in rs]
        return {"rows": len(errs), "mean_abs_error": sum(errs) / len(errs), "worst_abs_error": max(errs),
                "mean_error": sum(r["error"] for r in rs) / len(rs)}
    megatron = [r for r in results if "ZeRO" not in r["group"]]
    out = {"all": of(results), "megatron": of(megatron),
           "megatron held-out": of([r for r in megatron if r["set"] == "held-out"]),
           "megatron calibration": of([r for r in megatron if r["set"] == "calibration"])}
    for g in dict.fromkeys(r["group"] for r in results):
        for which in ("held-out", "calibration"):
            if rs := [r for r in results if r["group"] == g and r["set"] == which]:
                out[f"{g}, {which}"] = of(rs)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    results = run(load_rows())
    summ = summary(results)
    if args.json:
        print(json.dumps({"rows": results, "summary": summ}))
        return 0
    print(f"{'configuration':34s} {'set':11s} {'predicted':>10s} {'published':>10s} {'error':>7s} {'bubble':>7s} "
          f"{'memory':>9s}  source")
    for r in results:
        print(f"{r['name']:34s} {r['set']:11s} {r['predicted_s']:9.3f}s {r['published_s']:9.3f}s {r['error']:+7.1%} "
              f"{r['bubble']:7.1%} {r['memory_peak_gib']:6.1f} GiB  {r['source']}")
    print("calibration rows: the shipped efficiencies were fitted on them with the ResNet-50 ones "
          "(bench_published.py --calibrate); held-out rows: not")
    for g, x in summ.items():
        print(f"  {g:42s} {x['rows']:3d} rows: mean |error| {x['mean_abs_error']:6.1%}, worst "
              f"{x['worst_abs_error']:6.1%}, mean signed {x['mean_error']:+6.1%}")
    print(f"({time.perf_counter() - start:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
