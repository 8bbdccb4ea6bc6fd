"""`dnnplan plan`'s answer, first: what was planned and assumed, the step and its parts, memory,
model FLOP utilisation, the layout in one line and the gap proven to the optimum.

The lines every command shares (the step's breakdown, memory and MFU) are drawn by
:func:`step_line` and :func:`memory_mfu_line` here, so `plan`, `predict` and `execute` name the
parts of a step alike (costmodel.step.breakdown).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.markup import escape

from costmodel.comm.overlap import Overlap
from dnnplan.render import fmt

GIB = 2.0 ** 30


@dataclass(frozen=True)
class Facts:
    """What a plan was made for, as the summary states it."""

    network: str
    devices: int
    machine: str
    device: str
    precision: str
    optimizer: str  # its label: "adam, ZeRO-1"
    batch: int
    defaults: tuple[str, ...]  # the flags assumed, e.g. "--machine dgx-a100"
    why: str = ""  # why the pipeline search ran
    timed: tuple = ()  # machine `local`: candidates weighed in step context
    layers: int = 0
    has_batchnorm: bool = False
    attention: tuple[str, ...] = ()  # the attention algorithms the plan's layers run
    overlap: str = ""  # what overlaps compute, in words (costmodel.comm.overlap.Overlap.label)
    batch_norm: str = "sync"  # costmodel.choices.batch_norm
    moe_dispatch: str = ""  # costmodel.choices.moe_dispatch, "" for a network without experts
    axes: str = ""  # the layout by parallel axis in one line (planner.plan.layout_by_axis)
    zero_why: str = ""  # why the plan's ZeRO stage, when the planner chose it (planner.zero_choice)
    #: the memory limit asked for (a device's memory, or --memory); the plan's solver record keeps the
    #: limit it was solved under, lower where the answer was planned again (planner.fit_check)
    limit_bytes: float | None = None
    train: object = None  # a token budget's time and cost (costmodel.step.train_time.TrainTime), or None


def breakdown_text(terms) -> str:
    """``forward 1.2 ms + backward 2.3 ms + ...`` (costmodel.step.breakdown's terms)."""
    return " + ".join(f"{name} {fmt.seconds(secs)}" for name, secs in terms)


def step_line(step_s: float, terms) -> str:
    """The step and its parts, the same words in every command."""
    return f"[bold]step {fmt.seconds(step_s)}[/bold] = {breakdown_text(terms)}"


def comm_line(parts, overlap: str) -> str | None:
    """The collectives' time exposed (in the step's terms) and overlapped with compute (not in them);
    None for a step without collectives."""
    d = dict(parts)
    if d["exposed"] + d["overlapped"] <= 0:
        return None
    return (f"communication {fmt.seconds(d['exposed'] + d['overlapped'])}: {fmt.seconds(d['exposed'])} exposed "
            f"(in the terms above), {fmt.seconds(d['overlapped'])} overlapped with compute (overlap {overlap})")


def memory_mfu_line(peak_bytes: float, limit_bytes: float | None, mfu: float | None,
                    allocated_bytes: float | None = None) -> str:
    """Peak memory a device (of its limit) and the model FLOP utilisation; where the framework adds
    memory beyond the tensors (``allocated_bytes`` below the peak), the peak is its reserved one
    and the tensors' (allocated) peak is said beside it."""
    limit = f" (limit {fmt.nbytes(limit_bytes)})" if limit_bytes else ""
    if limit_bytes and peak_bytes > limit_bytes * (1 + 1e-9):  # a layout predicted as given, over the limit
        limit = f" (over the limit of {fmt.nbytes(limit_bytes)}: it does not fit)"
    util = "" if mfu is None else f";  model FLOP utilisation {mfu:.1%}{mfu_note(mfu)}"
    if allocated_bytes is not None and allocated_bytes < peak_bytes:
        return (f"memory {fmt.nbytes(peak_bytes)} reserved a device{limit}, {fmt.nbytes(allocated_bytes)} "
                f"allocated{util}")
    return f"memory {fmt.nbytes(peak_bytes)} a device{limit}{util}"


def memory_json(peak_bytes: int, limit_bytes: int | None) -> dict:
    """The JSON's device memory limit and whether the peak fits it (every answer with a step says
    so: a script pricing a layout that cannot run learns it); no limit known: fits."""
    return {"memory_limit_bytes": None if limit_bytes is None else int(limit_bytes),
            "memory_fits": limit_bytes is None or peak_bytes <= limit_bytes * (1 + 1e-9)}


def train_line(t, fits: bool = True) -> str:
    """Time and cost to train a token budget (costmodel.step.train_time.TrainTime) at the step;
    ``fits``: whether the layout fits the devices' memory (said first where it does not: no run of
    it trains at all)."""
    cost = "" if t.cost is None else f", {_amount(t.cost)} at {t.price_per_device_hour:g} a device-hour"
    hours = t.days * 24  # a small budget: not 0.0 days, nor hours in powers of ten
    span = (f"{t.days:.3g} days" if 1 <= t.days < 100 else f"{t.days:,.1f} days" if t.days >= 1 else f"{hours:.3g} hours" if hours >= 0.1 else
            f"{hours * 60:.3g} minutes" if hours * 60 >= 0.1 else f"{hours * 3600:.3g} seconds")
    steps = "1 step" if t.steps == 1 else f"{t.steps:,} steps"
    return ("" if fits else "were it to fit in memory (it does not): ") + (
            f"to train {_count(t.tokens)} tokens: {steps} of {t.tokens_per_step:,} tokens, {span} on "
            f"{t.devices:,} device{'s' if t.devices != 1 else ''} ({_amount(t.device_hours)} device-hours{cost}; "
            "the steps alone: no warm-up, "
            "evaluation, checkpoints or failures)")


def _amount(x: float) -> str:
    """A count of device-hours or a cost: whole from 100 on, else three figures (not 0 for a small budget)."""
    return f"{x:,.0f}" if x >= 100 or x == 0 else f"{x:.3g}"


def _count(n: float) -> str:
    """A count with its suffix: 15T, 300B, 2.5M (past a thousand T in whole T: 1,000,000T)."""
    if n >= 1e15:
        return f"{n / 1e12:,.0f}T"
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.4g}{suffix}"
    return f"{n:g}"


def mfu_note(mfu: float) -> str:
    """Why a model FLOP utilisation can pass 100%: it counts the network's own FLOPs (PaLM's
    definition) against the precision's peak, which kernels beat where they run float32 on TF32
    tensor cores (PyTorch's convolutions by default: a framework's ``precision`` setting) or do less
    arithmetic (FFT and Winograd convolutions)."""
    return (" (over 100%: counted against the precision's peak, which kernels beat on TF32 tensor cores, as "
            "PyTorch runs float32 convolutions by default, or with less arithmetic, as FFT and Winograd "
            "convolutions)" if mfu > 1 else "")


def header_lines(f: Facts) -> list[str]:
    out = [f"[bold]{escape(f.network)}[/bold] on {f.devices} x {escape(f.machine)} ({escape(f.device)}): batch "
           f"{f.batch}, {f.precision}, {escape(f.optimizer)}"]
    if f.defaults:
        out.append("assumed, the flag not given: " + escape("; ".join(f.defaults)))
    return out


#: How the summary names the attention kernels a plan runs (costmodel.calls.attention)
ATTENTION_WORDS = {
    ("flash",): "attention by one fused flash-attention kernel a pass (priced as FlashAttention-2's algorithm; "
                "a vendor's own fused kernel may run faster at long sequences, as cuDNN's on an H100 does, "
                "docs/VALIDATION.md; --attention materialized on `dnnplan predict` prices the unfused kernels)",
    ("materialized",): "attention by its unfused kernels (the scores materialised, as Megatron-LM's unfused "
                       "attention), not flash attention",
}


#: How the summary names the batch normalisation a plan assumes (costmodel.choices.batch_norm)
BATCH_NORM_WORDS = {
    "sync": "batch-norm statistics synchronised over the ranks splitting a layer's samples (SyncBatchNorm, "
            "--batch-norm sync; PyTorch DDP's BatchNorm2d does not sync: --batch-norm local saves two small "
            "allreduces a layer)",
    "local": "batch-norm statistics over each rank's own samples (PyTorch DDP's BatchNorm2d, --batch-norm local; "
             "a spatial split still all-reduces them; --batch-norm sync for SyncBatchNorm)",
}


#: How the summary names the token dispatcher of a plan's experts (costmodel.choices.moe_dispatch)
MOE_DISPATCH_WORDS = {
    "alltoall": "experts' tokens dispatched by all-to-all of capacity buffers (Megatron-Core's alltoall dispatcher, "
                "--moe-dispatch alltoall; DeepEP or HybridEP: --moe-dispatch flex)",
    "flex": "experts' tokens sent once to each node and rank holding their experts (Megatron-Core's flex "
            "dispatcher with DeepEP or HybridEP, --moe-dispatch flex)",
}


def assumptions_line(f: Facts) -> str | None:
    """What the cost model assumes of the framework where a user's framework may differ."""
    parts = []
    if f.has_batchnorm:
        parts.append(BATCH_NORM_WORDS[f.batch_norm])
    parts.append(f.overlap or Overlap().label)
    if f.moe_dispatch:
        parts.append(MOE_DISPATCH_WORDS[f.moe_dispatch])
    if f.attention:
        parts.append(ATTENTION_WORDS[f.attention] if f.attention in ATTENTION_WORDS else
                     "attention by flash attention in some layers, by its unfused kernels in others (the plan "
                     "chooses per layer)")
    return "[dim]the model assumes: " + "; ".join(parts) + "[/dim]"


def gap_line(solver: dict) -> str:
    """The gap proven between the plan and the optimum, and why the search ended."""
    status, gap = solver.get("status"), solver.get("gap") or 0.0
    limit = solver.get("time_limit_s")
    if status == "interrupted":
        return (f"[yellow]interrupted[/yellow]: the best plan found so far, within {percent(gap)} of the "
                "optimum (proven)")
    if solver.get("uncovered_zero"):
        return f"{uncovered_words(gap, solver['uncovered_zero'])} ({_how(solver)})"
    if status == "optimal" or gap <= 0:
        return f"proven optimal ({_how(solver)})"
    if solver.get("gap_of") == "tolerance":  # the search ended before its limit (planner.stage_plan._unbeaten)
        return (f"within [bold]{percent(gap)}[/bold] of the optimum (proven; pipelined plans that could be faster "
                f"by less than the proof tolerance (--gap, 1% by default) are left unsearched: --gap 0 searches "
                f"them) ({_how(solver)})")
    why = f"the search stopped at its {limit:g} s time limit" if limit else "the search stopped early"
    return (f"within [bold]{percent(gap)}[/bold] of the optimum (proven; {why}: a longer --time-limit can close "
            f"the gap) ({_how(solver)})")


def uncovered_words(gap: float, stages: list[int]) -> str:
    """The gap proven over the ZeRO stages planned, and those it leaves out (planner.zero_choice):
    such an answer is never called optimal."""
    names = ", ".join(f"ZeRO-{z}" for z in stages)
    return (f"within {percent(gap)} of the optimum over the ZeRO stages planned, [yellow]not over {names}[/yellow] "
            f"(the time limit came first: a longer --time-limit plans {'it' if len(stages) == 1 else 'them'})")


def percent(share: float) -> str:
    """A gap as a percentage with two significant figures below 1% (0.043%), one decimal above."""
    return f"{share:.1%}" if share >= 0.01 else f"{share * 100:.2g}%"


def _how(solver: dict) -> str:
    parts = [str(solver.get("solver", "search"))]
    if solver.get("candidates"):
        parts.append(f"{solver['candidates']} candidates over {solver.get('layers')} layers")
    if solver.get("total_s") is not None:
        parts.append(f"{solver['total_s']:.1f} s")
    return ", ".join(parts)


def layout_line(labels: list[str]) -> str:
    """The chosen splits in one line: each strategy and how many layers take it, commonest first."""
    counts: dict[str, int] = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])
    if len(ranked) == 1:
        return f"layout: {ranked[0][0]} on every layer"
    shown = ", ".join(f"{k} x{v}" for k, v in ranked[:4])
    more = f", {len(ranked) - 4} other splits" if len(ranked) > 4 else ""
    return f"layout: {shown}{more} (layers per split)"
