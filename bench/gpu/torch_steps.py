"""Time whole training steps of zoo networks with PyTorch on one NVIDIA GPU (the clock that
``bench/frameworks/bench_gpu_steps.py`` holds dnnplan's ahead-of-time predictions against).

Run on a machine with a CUDA GPU, PyTorch and torchvision::

    python bench/gpu/torch_steps.py --out steps.json

The transformers mirror the zoo specs layer for layer (networks/zoo/gpt2.yaml, gpt2-xl.yaml):
pre-norm blocks, tanh GELU, dropout 0.1 after the embedding, the attention output and the MLP and
on the attention probabilities, a tied LM head, softmax cross-entropy. Attention is computed as the
spec prices it (scores materialised, masked, softmax, dropout, times V: ``--attention math``); the
``sdpa`` rows use PyTorch's fused attention instead, as users would, and have no dnnplan twin.
The CNNs are torchvision's resnet50 and vgg16 (the zoo's parameter counts are theirs). Rows named
``-compiled`` run the same model through torch.compile, which fuses each elementwise chain (the
attention's scale, mask, softmax and dropout; layer norm; GELU) into one kernel.

Precision as dnnplan names it: fp32 (TF32 off for matmuls and cuDNN), tf32, and fp16/bf16 mixed
precision (autocast over float32 weights; fp16 with a gradient scaler). Optimisers: adam is
torch.optim.Adam (fused), momentum is SGD with momentum 0.9. Each row: a few warm-up steps, then
``--steps`` steps each timed with CUDA events; the median, min and max per step and the peak of
torch.cuda.max_memory_allocated over the timed steps. Inputs are random, never zeros. Also
measured once: the dense-GEMM rate at 8192^3 per precision and the device-to-device copy bandwidth
(bytes read plus written), the two ceilings the model's efficiencies are read against.

``--smoke`` runs every row at toy sizes on the CPU (to check the script, not to time anything).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import time
import traceback

import torch
import torch.nn.functional as F
from torch import nn

# name, network, batch, precision, optimizer, attention (transformers) or channels_last (CNNs)
ROWS = (
    ("gpt2-b8-bf16", "gpt2", 8, "bf16", "adam", "math"),
    ("gpt2-b8-bf16-sdpa", "gpt2", 8, "bf16", "adam", "sdpa"),
    ("gpt2-b8-fp32", "gpt2", 8, "fp32", "adam", "math"),
    ("gpt2-b16-fp16", "gpt2", 16, "fp16", "adam", "math"),
    ("gpt2xl-b4-bf16", "gpt2-xl", 4, "bf16", "adam", "math"),
    ("resnet50-b256-fp16", "resnet50", 256, "fp16", "momentum", "channels_last"),
    ("resnet50-b128-fp32", "resnet50", 128, "fp32", "momentum", "channels_first"),
    ("resnet50-b128-tf32", "resnet50", 128, "tf32", "momentum", "channels_first"),
    ("vgg16-b128-fp16", "vgg16", 128, "fp16", "momentum", "channels_last"),
    ("gpt2-b8-bf16-compiled", "gpt2", 8, "bf16", "adam", "math+compile"),
    ("gpt2-b8-fp32-compiled", "gpt2", 8, "fp32", "adam", "math+compile"),
    ("gpt2-b16-fp16-compiled", "gpt2", 16, "fp16", "adam", "math+compile"),
    ("resnet50-b256-fp16-compiled", "resnet50", 256, "fp16", "momentum", "channels_last+compile"),
    ("gpt2xl-b4-bf16-compiled", "gpt2-xl", 4, "bf16", "adam", "math+compile"),
    # issue 51's rows beside dnnplan's executed step (bench/gpu/prove.py): its optimiser (SGD with
    # momentum) and layout (NCHW, channels first), PyTorch's fused attention for GPT-2
    ("resnet50-b64-tf32-sgd", "resnet50", 64, "tf32", "momentum", "channels_first"),
    ("resnet50-b64-bf16-sgd", "resnet50", 64, "bf16", "momentum", "channels_first"),
    ("vgg16-b64-tf32-sgd", "vgg16", 64, "tf32", "momentum", "channels_first"),
    ("gpt2-b8-bf16-sgd-sdpa", "gpt2", 8, "bf16", "momentum", "sdpa"),
    ("gpt2-b8-bf16-sgd", "gpt2", 8, "bf16", "momentum", "math"),
    # the proof's transformer row: one Llama 3 8B block (bench/gpu/llama3-8b-block.yaml)
    ("llama3-8b-block-b1-bf16-sgd-sdpa", "llama3-8b-block", 1, "bf16", "momentum", "sdpa"),
)
GPT = {"gpt2": (768, 12, 12), "gpt2-xl": (1600, 25, 48)}  # dim, heads, blocks
VOCAB, CONTEXT, RATE = 50257, 1024, 0.1
#: dim, query heads, key/value heads, intermediate, vocabulary, tokens, blocks (bench/gpu/llama3-8b-block.yaml)
LLAMA = {"llama3-8b-block": (4096, 32, 8, 14336, 128256, 4096, 1)}


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, attention: str):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc, self.proj = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def attend(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2)
                   for t in self.qkv(x).split(d, dim=2))
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=RATE, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
            probs = F.dropout(scores.masked_fill(mask, float("-inf")).softmax(-1), RATE, True)
            y = probs @ v
        return self.out(y.transpose(1, 2).reshape(b, s, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + F.dropout(self.attend(self.ln1(x)), RATE, True)
        return x + F.dropout(self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh")), RATE, True)


class GPT2(nn.Module):
    def __init__(self, dim: int, heads: int, blocks: int, attention: str, vocab: int, context: int):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, attention) for _ in range(blocks))
        self.ln_f = nn.LayerNorm(dim)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = F.dropout(self.wte(tokens) + self.wpe(pos), RATE, True)
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # the head tied to the token embedding
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary positions on (batch, heads, tokens, head dim), the halves rotated (Llama's)."""
    a, b = x.chunk(2, dim=-1)
    return x * cos.to(x.dtype) + torch.cat((-b, a), dim=-1) * sin.to(x.dtype)  # in the activations' format


class LlamaBlock(nn.Module):
    """Pre-norm: h = x + attn(rmsnorm(x)) with rotary queries and keys and grouped key/value heads,
    then h + down(silu(gate) * up), gate and up one linear (networks/zoo/llama3-8b.yaml); no bias,
    no dropout."""

    def __init__(self, dim: int, heads: int, kv_heads: int, ffn: int):
        super().__init__()
        self.heads, self.kv_heads, self.dh = heads, kv_heads, dim // heads
        self.norm1, self.norm2 = nn.RMSNorm(dim, eps=1e-5), nn.RMSNorm(dim, eps=1e-5)
        self.qkv = nn.Linear(dim, (heads + 2 * kv_heads) * self.dh, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.gate_up, self.down = nn.Linear(dim, 2 * ffn, bias=False), nn.Linear(ffn, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split([d, self.kv_heads * self.dh, self.kv_heads * self.dh], dim=2)
        q = rotate(q.view(b, s, self.heads, self.dh).transpose(1, 2), cos, sin)
        k = rotate(k.view(b, s, self.kv_heads, self.dh).transpose(1, 2), cos, sin)
        v = v.view(b, s, self.kv_heads, self.dh).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        h = x + self.out(y.transpose(1, 2).reshape(b, s, d))
        gate, up = self.gate_up(self.norm2(h)).chunk(2, dim=-1)
        return h + self.down(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, ffn: int, vocab: int, blocks: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(LlamaBlock(dim, heads, kv_heads, ffn) for _ in range(blocks))
        self.norm, self.head = nn.RMSNorm(dim, eps=1e-5), nn.Linear(dim, vocab, bias=False)
        self.dh = dim // heads

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        s = tokens.shape[1]
        inv = 1.0 / 500000.0 ** (torch.arange(0, self.dh, 2, device=tokens.device).float() / self.dh)
        angles = torch.outer(torch.arange(s, device=tokens.device).float(), inv)
        cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, cos, sin)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


class Classifier(nn.Module):
    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.net(images).float(), labels)


def build(network: str, batch: int, layout: str, device: str, smoke: bool):
    """The model and one batch of random inputs for it."""
    if network in GPT:
        dim, heads, blocks = GPT[network]
        vocab, context = (VOCAB, CONTEXT) if not smoke else (512, 32)
        if smoke:
            dim, heads, blocks = heads * 8, heads, 2
        model = GPT2(dim, heads, blocks, layout.split("+")[0], vocab, context)
        tokens = torch.randint(0, vocab, (batch, context + 1), device=device)
        return model.to(device), (tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())
    if network in LLAMA:
        dim, heads, kv_heads, ffn, vocab, tokens_n, blocks = LLAMA[network]
        if smoke:
            dim, heads, kv_heads, ffn, vocab, tokens_n = 64, 4, 2, 128, 512, 32
        model = Llama(dim, heads, kv_heads, ffn, vocab, blocks)
        tokens = torch.randint(0, vocab, (batch, tokens_n + 1), device=device)
        return model.to(device), (tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())
    import torchvision  # noqa: PLC0415 - only the CNN rows need it

    model = Classifier(getattr(torchvision.models, network)(num_classes=1000)).to(device)
    side = 224 if not smoke else 64
    images = torch.randn(batch, 3, side, side, device=device)
    if layout.split("+")[0] == "channels_last":
        model, images = model.to(memory_format=torch.channels_last), images.contiguous(
            memory_format=torch.channels_last)
    return model, (images, torch.randint(0, 1000, (batch,), device=device))


def set_precision(precision: str):
    """Autocast dtype (or None) and a gradient scaler (or None) for dnnplan's precision name."""
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    scaler = torch.amp.GradScaler("cuda") if precision == "fp16" and torch.cuda.is_available() else None
    return dtype, scaler


def make_step(model, inputs, precision: str, optimizer: str, device: str, compiled: bool = False):
    dtype, scaler = set_precision(precision)
    if optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=1e-4, fused=device == "cuda")
    else:
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    forward = torch.compile(model) if compiled else model

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = forward(*inputs)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss

    return step


def time_steps(step, steps: int, warmup: int, device: str) -> dict:
    """Per-step times (CUDA events on a GPU, the host clock otherwise) and peak memory."""
    for _ in range(warmup):
        step()
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
        marks[0].record()
        for i in range(steps):
            loss = step()
            marks[i + 1].record()
        torch.cuda.synchronize()
        times = [marks[i].elapsed_time(marks[i + 1]) / 1e3 for i in range(steps)]
    else:
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            loss = step()
            times.append(time.perf_counter() - t0)
    assert math.isfinite(float(loss)), "the loss is not finite"
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
            "steps": steps, "peak_memory_bytes": torch.cuda.max_memory_allocated() if cuda else None}


def kernel_breakdown(step, device: str, steps: int = 3) -> list[list]:
    """[kernel name, calls per step, device seconds per step] of the kernels one step runs,
    from torch.profiler over a few steps, largest first."""
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

    acts = [ProfilerActivity.CUDA] if device == "cuda" else [ProfilerActivity.CPU]
    with profile(activities=acts) as prof:
        for _ in range(steps):
            step()
        if device == "cuda":
            torch.cuda.synchronize()
    totals: dict[str, list] = {}
    for ev in prof.events():
        if device == "cuda" and ev.device_type.name != "CUDA":
            continue
        t = totals.setdefault(ev.name[:160], [0, 0.0])
        t[0] += 1
        t[1] += (ev.device_time if device == "cuda" else ev.cpu_time) / 1e6
    rows = sorted(([k, c / steps, s / steps] for k, (c, s) in totals.items()), key=lambda r: -r[2])
    return rows[:400]


def ceilings(device: str, smoke: bool) -> dict:
    """Dense GEMM rate per precision at n^3 and the device-to-device copy bandwidth."""
    n = 8192 if not smoke else 256
    out = {}
    for name, dtype, tf32 in (("bf16", torch.bfloat16, False), ("fp16", torch.float16, False),
                              ("tf32", torch.float32, True), ("fp32", torch.float32, False)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
        out[f"gemm_{name}_flops"] = 2 * n ** 3 / _median_time(lambda: a @ b, device)
    x = torch.randn((1 << 28) if not smoke else (1 << 16), device=device)
    y = torch.empty_like(x)
    out["copy_bytes_per_s"] = 2 * x.numel() * 4 / _median_time(lambda: y.copy_(x), device)
    return out


def _median_time(fn, device: str, reps: int = 10) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rows", default="", help="comma-separated row names (default: all)")
    ap.add_argument("--breakdown", default="", help="rows whose GPU kernels are listed (torch.profiler)")
    ap.add_argument("--smoke", action="store_true", help="toy sizes on the CPU: checks the script")
    args = ap.parse_args()
    device = "cpu" if args.smoke else "cuda"
    torch.backends.cudnn.benchmark = True
    report = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu (smoke)",
              "torch": torch.__version__, "cuda": torch.version.cuda, "date": time.strftime("%Y-%m-%d"),
              "ceilings": ceilings(device, args.smoke), "rows": []}
    print(json.dumps(report["ceilings"]), flush=True)
    wanted = set(filter(None, args.rows.split(",")))
    breakdown = set(filter(None, args.breakdown.split(",")))
    for name, network, batch, precision, optimizer, layout in ROWS:
        if wanted and name not in wanted:
            continue
        row = {"name": name, "network": network, "batch": batch if not args.smoke else 2,
               "precision": precision, "optimizer": optimizer, "layout": layout}
        try:
            model, inputs = build(network, row["batch"], layout, device, args.smoke)
            step = make_step(model, inputs, precision, optimizer, device, layout.endswith("+compile"))
            row.update(time_steps(step, args.steps if not args.smoke else 2, args.warmup if not
                                  args.smoke else 1, device))
            if name in breakdown:
                row["kernels"] = kernel_breakdown(step, device)
            del model, inputs, step
        except Exception as err:  # noqa: BLE001 - one failing row must not lose the others
            row["error"] = f"{type(err).__name__}: {err}"
            traceback.print_exc()
        if device == "cuda":
            torch.cuda.empty_cache()
        report["rows"].append(row)
        print(json.dumps(row), flush=True)
        with open(args.out, "w") as fh:
            json.dump(report, fh, indent=1)


if __name__ == "__main__":
    main()
