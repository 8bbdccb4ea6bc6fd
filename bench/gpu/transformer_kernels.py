"""The dgx-h100 machine's price of a transformer's kernels against the GPU clock (issue 52).

    python bench/gpu/transformer_kernels.py --out DIR [--machine dgx-h100] [--dry-run]

For the attention cores and GEMMs of Llama 3 8B (one GPU), Llama 3 70B and 3.1 405B (a tensor-parallel
rank of 8) at sequence 8,192, GPT-3 2.7B at 2,048 (the FlashAttention-2 paper's Table 1 model), and
the experts of Qwen3-30B-A3B under expert parallelism 8, this prints and writes (``DIR/kernels.json``)
per kernel:

* ``predicted_s``: the machine file's roofline price of the call, ahead of time, from the work and
  bytes the cost model counts (costmodel.calls.flash.flash_counts for FlashAttention-2's forward and
  backward, costmodel.calls.kernel_call.linear_call for a GEMM) at the machine's fitted efficiencies;
* ``floor_s``: the same work at the datasheet's peak and full bandwidth (efficiency 1): no measured
  time may be below it;
* ``measured_s``: the median of CUDA-event timings on this GPU of what frameworks run: PyTorch's
  scaled_dot_product_attention with the FlashAttention backend and with cuDNN's (grouped-query heads
  passed as such where the backend takes them, else K and V expanded, as ``note`` says); cuBLAS
  GEMMs through torch.matmul in bf16; FP8 GEMMs through torch._scaled_mm (per-tensor scales).

The machine's efficiencies were fitted on published training runs (docs/VALIDATION.md), never on
these timings: each row is a held-out check of the cost model's kernel prices on the card.
``--dry-run`` computes the predictions alone (no GPU, no torch).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from costmodel.compute.calibration import with_efficiencies  # noqa: E402
from costmodel.compute.roofline import Roofline  # noqa: E402
from costmodel.machine.loading import load_machine  # noqa: E402
from costmodel.calls.flash import flash_counts  # noqa: E402
from costmodel.calls.kernel_call import linear_call  # noqa: E402
from costmodel.machine.model import EFFICIENCY_CLASSES  # noqa: E402

#: (name, samples, query heads, key/value heads, sequence, head width): causal self-attention
ATTENTION = (
    ("llama3-8b tp1 s8192", 1, 32, 8, 8192, 128),
    ("llama3-70b tp8 s8192", 1, 8, 1, 8192, 128),
    ("llama3.1-405b tp8 s8192", 1, 16, 1, 8192, 128),
    ("gpt3-2.7b s2048 b4", 4, 32, 32, 2048, 80),
)
#: (name, rows, in features, out features): y = x w^T; each timed forward, backward-data and
#: backward-weights
GEMMS = (
    ("llama3-8b qkv", 8192, 4096, 6144),
    ("llama3-8b mlp up+gate", 8192, 4096, 28672),
    ("llama3-8b mlp down", 8192, 14336, 4096),
    ("llama3-70b tp8 qkv", 8192, 8192, 1280),
    ("llama3-70b tp8 mlp up+gate", 8192, 8192, 7168),
    ("llama3-70b tp8 mlp down", 8192, 3584, 8192),
    ("qwen3-30b-a3b expert up+gate", 2048, 2048, 1536),
    ("qwen3-30b-a3b expert down", 2048, 768, 2048),
)
#: FP8 GEMMs (forward): Transformer Engine runs a layer's GEMMs in FP8
FP8_GEMMS = GEMMS[:3]
PASSES = ("linear.fwd", "linear.bwd_data", "linear.bwd_weights")


#: The efficiencies fitted on the published H100-era runs (bench/published/bench_published_modern.py --write)
FIT = Path(__file__).resolve().parents[1] / "assets" / "published-modern-results.json"


def predictions(machine, fit: dict | None = None) -> list[dict]:
    """Every row with its predicted and floor times (pure): ``predicted_s`` at the machine file's
    efficiencies, ``predicted_fit_s`` at ``fit`` (the published runs' fitted ones) where given."""
    rows = []
    sram = machine.device.sram_bytes
    for name, n, heads, kv, s, dh in ATTENTION:
        for backward in (False, True):
            got = flash_counts(n, heads, s, s, dh, True, 2, sram, backward)
            rows.append({"kernel": "attention.bwd" if backward else "attention.fwd", "name": name,
                         "shape": [n, heads, kv, s, dh], "dtype": "bfloat16", "flops": got.flops,
                         "bytes": got.bytes})
    for name, r, c, f in GEMMS:
        for kernel in PASSES:
            call = linear_call(kernel, r, c, f, False, "bfloat16", 2)
            rows.append({"kernel": kernel, "name": name, "shape": [r, c, f], "dtype": "bfloat16",
                         "flops": call.flops, "bytes": call.bytes})
    for name, r, c, f in FP8_GEMMS:
        call = linear_call("linear.fwd", r, c, f, False, "bfloat16", 2)  # bytes of the bf16 operands
        rows.append({"kernel": "linear.fwd", "name": name, "shape": [r, c, f], "dtype": "float8",
                     "flops": call.flops, "bytes": call.bytes})
    # the planner's roofline at the machine file's efficiencies, at the fitted ones, and at 1 (the floor)
    models = {"predicted_s": Roofline(machine),
              "floor_s": Roofline(with_efficiencies(machine, dict.fromkeys(EFFICIENCY_CLASSES, 1.0)))}
    if fit:
        models["predicted_fit_s"] = Roofline(with_efficiencies(machine, fit))
    for row in rows:
        key = "float8" if row["dtype"] == "float8" else "bfloat16"
        for field, model in models.items():
            row[field] = model._time(row["flops"], row["bytes"], key, "tensor_16bit")
    return rows


# ---- the GPU clock (torch: what frameworks run) ----

def _time(torch, fn, warmup: int = 3, reps: int = 15) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times)


def _attention(torch, row: dict, backend_name: str) -> tuple[float, str]:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    n, heads, kv, s, dh = row["shape"]
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend_name]
    dev, dt = "cuda", torch.bfloat16

    def bshd(h):  # (batch, sequence, heads, width) storage, as models hold it, viewed (B, H, S, D)
        return torch.randn(n, s, h, dh, device=dev, dtype=dt).transpose(1, 2).requires_grad_(True)

    q, k, v = bshd(heads), bshd(kv), bshd(kv)
    note = "grouped-query heads as such" if kv != heads else ""
    with sdpa_kernel([backend]):
        try:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv != heads)
        except RuntimeError:
            if kv == heads:
                raise
            rep = heads // kv
            k = k.detach().repeat_interleave(rep, dim=1).requires_grad_(True)
            v = v.detach().repeat_interleave(rep, dim=1).requires_grad_(True)
            note = "K and V expanded to the query heads (the backend refused grouped-query heads)"
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if row["kernel"] == "attention.fwd":
            with torch.no_grad():
                t = _time(torch, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                        enable_gqa=k.shape[1] != heads))
        else:
            grad = torch.randn_like(out)
            t = _time(torch, lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True))
    return t, note


def _gemm(torch, row: dict) -> float:
    r, c, f = row["shape"]
    dev, dt = "cuda", torch.bfloat16
    copies = 1 if r * c * f >= 2**34 else 4  # small ones rotate inputs so repeats do not run from L2
    if row["dtype"] == "float8":
        e4m3 = torch.float8_e4m3fn
        xs = [torch.randn(r, c, device=dev, dtype=dt).to(e4m3) for _ in range(copies)]
        ws = [torch.randn(f, c, device=dev, dtype=dt).to(e4m3) for _ in range(copies)]
        one = torch.ones((), device=dev, dtype=torch.float32)
        turn = itertools.cycle(range(copies)).__next__
        return _time(torch, lambda: (lambda i: torch._scaled_mm(xs[i], ws[i].t(), scale_a=one, scale_b=one,
                                                                 out_dtype=dt))(turn()))
    x = [torch.randn(r, c, device=dev, dtype=dt) for _ in range(copies)]
    w = [torch.randn(f, c, device=dev, dtype=dt) for _ in range(copies)]
    dy = [torch.randn(r, f, device=dev, dtype=dt) for _ in range(copies)]
    turn = itertools.cycle(range(copies)).__next__
    fn = {"linear.fwd": lambda i: x[i] @ w[i].t(), "linear.bwd_data": lambda i: dy[i] @ w[i],
          "linear.bwd_weights": lambda i: dy[i].t() @ x[i]}[row["kernel"]]
    return _time(torch, lambda: fn(turn()))


def measure(rows: list[dict]) -> dict:
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    props = torch.cuda.get_device_properties(0)
    for row in rows:
        try:
            if row["kernel"].startswith("attention."):
                for backend in ("flash", "cudnn"):
                    try:
                        t, note = _attention(torch, row, backend)
                        row[f"measured_{backend}_s"] = t
                        if note:
                            row[f"note_{backend}"] = note
                    except Exception as err:  # a backend that refuses a shape: reported, not guessed
                        row[f"measured_{backend}_s"] = None
                        row[f"note_{backend}"] = f"{type(err).__name__}: {str(err)[:200]}"
                got = [row[k] for k in ("measured_flash_s", "measured_cudnn_s") if row.get(k)]
                row["measured_s"] = min(got) if got else None
            else:
                row["measured_s"] = _gemm(torch, row)
        except Exception as err:
            row["measured_s"] = None
            row["note"] = f"{type(err).__name__}: {str(err)[:200]}"
        torch.cuda.empty_cache()
    return {"device": torch.cuda.get_device_name(0), "sms": props.multi_processor_count,
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--machine", default="dgx-h100")
    ap.add_argument("--dry-run", action="store_true", help="predictions only (no GPU)")
    args = ap.parse_args(argv)
    machine = load_machine(args.machine)
    fit = json.loads(FIT.read_text()).get("fitted_efficiencies") if FIT.is_file() else None
    rows = predictions(machine, fit)
    env = {"device": "none (dry run)"} if args.dry_run else measure(rows)
    print(f"{'kernel':19} {'dtype':8} {'case':30} {'predicted':>10} {'fit':>10} {'measured':>10} {'meas/pred':>9} "
          f"{'meas/fit':>8} {'TFLOP/s':>8} {'>=floor':>7}")
    for row in rows:
        m, fit_s = row.get("measured_s"), row.get("predicted_fit_s")
        row["ratio"] = m / row["predicted_s"] if m else None
        row["ratio_fit"] = m / fit_s if m and fit_s else None
        row["above_floor"] = None if m is None else m >= row["floor_s"]
        print(f"{row['kernel']:19} {row['dtype']:8} {row['name']:30} {row['predicted_s'] * 1e6:8.1f}us "
              + (f"{fit_s * 1e6:8.1f}us " if fit_s else f"{'-':>10} ")
              + (f"{m * 1e6:8.1f}us {row['ratio']:9.2f} {row['ratio_fit'] or 0:8.2f} {row['flops'] / m / 1e12:8.0f} "
                 f"{str(row['above_floor']):>7}" if m else f"{'-':>10} {'-':>9} {'-':>8} {'-':>8} {'-':>7}"))
    summary = {"machine": args.machine, "fit": fit, "env": env, "rows": rows}
    for kind in ("attention", "linear", ""):
        for key in ("ratio", "ratio_fit"):
            got = [r[key] for r in rows if r.get(key) and r["kernel"].startswith(kind)]
            summary[f"median_{key}{'_' + kind if kind else ''}"] = statistics.median(got) if got else None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "kernels.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
