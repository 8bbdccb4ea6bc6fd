"""The timing harness: synthetic operands for a :class:`~costmodel.calls.kernel_call.KernelCall`, the
kernel from :data:`kernels.KERNELS`, warm-up, and repetitions until the median is stable.

Stopping rule: after at least ``min_reps`` samples, stop when the 95% confidence interval of the
median (the box-plot notch, ``1.57 * IQR / sqrt(n)``) is within ``rel_ci`` of the median, or when
``max_reps`` samples or ``time_cap_s`` seconds are reached. Kernels faster than ``min_sample_s``
are looped inside one sample so the clock's resolution and call overhead do not dominate. On a GPU
each sample is bracketed by CUDA events and the stream is synchronised.
"""

from __future__ import annotations

import glob
import math
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

import numpy

from costmodel.calls.kernel_call import KernelCall, shape_fields
from costmodel.compute.profile_table import Entry
from kernels import KERNELS
from kernels.allocator import keep_freed_memory
from kernels.cuda.launch import from_float32
from profiler.timing.transformer_operands import attention_builder, moe_experts_builder, moe_route_builder
from kernels.xp import storage_dtype, synchronize


@dataclass(frozen=True)
class TimingPolicy:
    """How a kernel is timed. ``cold`` (CPU): every sample is ONE call preceded by a pass over a
    buffer larger than the L2 cache, as in a training step, where each kernel runs once between
    other layers' work; a hot loop over the same operands times small kernels with warm caches and
    predictors, so faster than a step runs them (docs/profiler.md, "What is timed")."""

    cold: bool = True
    warmup: int = 1
    min_reps: int = 3
    max_reps: int = 50
    rel_ci: float = 0.03
    time_cap_s: float = 1.0
    min_sample_s: float = 2e-4


QUICK = TimingPolicy(warmup=1, min_reps=3, max_reps=7, rel_ci=0.05, time_cap_s=0.2)
DISTURB_ELEMS = 1 << 20  # 4 MiB of float32, larger than a core's L2 cache


def _rand(xp: ModuleType, shape, dtype, rng_seed: int = 0):
    """Standard normal operands in ``dtype`` (a 16-bit format rounded from float32: on a GPU by the
    fused cast, kernels.cuda.launch, so no library needs to know the format)."""
    rng = xp.random.default_rng(rng_seed)
    x32 = rng.standard_normal(shape, dtype=numpy.float32)
    if xp is numpy:
        return x32.astype(storage_dtype(dtype))
    return from_float32(x32, storage_dtype(dtype))


def build(call: KernelCall, xp: ModuleType, shared: dict | None = None) -> Callable[[], object]:
    """A no-argument closure that runs the call's kernel once on random operands of its shape.

    ``shared``: a backward kernel's incoming gradient (``dy``), and a forward kernel's input
    (``x``), is taken from it when there, else made and left in it, so two
    builds of one call can share that operand and keep their others (the forward pass's saved
    tensors, the weights) apart (profiler.in_step.kernels)."""
    k = call.kernel
    f = dict(zip(shape_fields(k, call.shape), call.shape))
    fn = KERNELS[k]
    builder = _BUILDERS.get(k.split(".")[0])
    if builder is None:
        raise ValueError(f"no synthetic operands for kernel {k!r}")
    return builder(call, f, fn, _Operands(xp, call.dtype, shared))


@dataclass
class _Operands:
    """Random operands in the call's dtype on ``xp``; the incoming gradient shared as :func:`build` says."""

    xp: ModuleType
    dtype: str
    shared: dict | None

    def rand(self, *shape):
        return _rand(self.xp, shape, self.dtype)

    def grad(self, *shape):
        return self._shared("dy", shape)

    def input(self, *shape):
        """A forward kernel's input, shared as the incoming gradient is (:func:`build`)."""
        return self._shared("x", shape)

    def _shared(self, name: str, shape):
        if self.shared is None:
            return self.rand(*shape)
        if name not in self.shared:
            self.shared[name] = self.rand(*shape)
        return self.shared[name]


Builder = Callable[[KernelCall, dict, Callable, _Operands], Callable[[], object]]


def _conv(call: KernelCall, f: dict, fn: Callable, ops: _Operands) -> Callable[[], object]:
    k, r = call.kernel, ops.rand
    n, c, h, w, fo, kh, kw = (f[x] for x in ("n", "c", "h", "w", "f", "kh", "kw"))
    geo = dict(stride=(f["sh"], f["sw"]), padding=(f["pt"], f["pb"], f["pl"], f["pr"]),
               dilation=(f["dh"], f["dw"]), groups=f["groups"], algo=call.algo)
    x = ops.input(n, c, h, w) if k == "conv2d.fwd" else r(n, c, h, w)
    wt = r(fo, c // f["groups"], kh, kw)
    b = r(fo) if f["bias"] else None
    y = KERNELS["conv2d.fwd"](x, wt, b, **geo)
    dy = ops.grad(*y.shape)
    if k == "conv2d.fwd":
        return lambda: fn(x, wt, b, **geo)
    if k == "conv2d.bwd_data":
        return lambda: fn(dy, wt, x.shape, **geo)
    return lambda: fn(dy, x, wt.shape, with_bias=bool(f["bias"]), **geo)


def _linear(call: KernelCall, f: dict, fn: Callable, ops: _Operands) -> Callable[[], object]:
    k, r = call.kernel, ops.rand
    x = ops.input(f["rows"], f["c"]) if k == "linear.fwd" else r(f["rows"], f["c"])
    wt = r(f["f"], f["c"])
    b = r(f["f"]) if f["bias"] else None
    dy = ops.grad(f["rows"], f["f"])
    if k == "linear.fwd":
        return lambda: fn(x, wt, b)
    if k == "linear.bwd_data":
        return lambda: fn(dy, wt)
    if k == "linear.bwd_weights":
        return lambda: fn(dy, x, with_bias=bool(f["bias"]))
    return lambda: fn(dy, x, wt, with_bias=bool(f["bias"]))


def _gemm(call: KernelCall, f: dict, fn: Callable, ops: _Operands) -> Callable[[], object]:
    r = ops.rand
    a = r(f["k"], f["m"]) if f["trans_a"] else r(f["m"], f["k"])
    bm = r(f["n"], f["k"]) if f["trans_b"] else r(f["k"], f["n"])
    return lambda: fn(a, bm, bool(f["trans_a"]), bool(f["trans_b"]))


def _pool(call: KernelCall, f: dict, fn: Callable, ops: _Operands) -> Callable[[], object]:
    k = call.kernel
    x = ops.input(f["n"], f["c"], f["h"], f["w"]) if k.endswith(".fwd") else ops.rand(f["n"], f["c"], f["h"], f["w"])
    geo = dict(kernel=(f["kh"], f["kw"]), stride=(f["sh"], f["sw"]),
               padding=(f["pt"], f["pb"], f["pl"], f["pr"]), ceil_mode=bool(f["ceil_mode"]))
    if k.startswith("maxpool2d."):
        geo["dilation"] = (f["dh"], f["dw"])
        fwd = KERNELS["maxpool2d.fwd"]
    else:
        geo["count_include_pad"] = bool(f["count_include_pad"])
        fwd = KERNELS["avgpool2d.fwd"]
    if k.endswith(".fwd"):
        return lambda: fwd(x, **geo)
    y, cache = fwd(x, **geo)
    dy = ops.grad(*y.shape)
    return lambda: fn(dy, cache)


def _global_pool(call: KernelCall, f: dict, fn: Callable, ops: _Operands) -> Callable[[], object]:
    fwd = call.kernel.endswith(".fwd")
    x = ops.input(f["n"], f["c"], f["h"], f["w"]) if fwd else ops.rand(f["n"], f["c"], f["h"], f["w"])
    if fwd:
        return lambda: fn(x)
    y, cache = KERNELS["global_avgpool.fwd"](x)
    dy = ops.grad(*y.shape)
    return lambda: fn(dy, cache)


def _batchnorm(call: KernelCall, f: dict, fn: Callable, ops: _Operands) -> Callable[[], object]:
    k, r = call.kernel, ops.rand
    x = ops.input(f["n"], f["c"], f["h"], f["w"]) if k == "batchnorm.local_sums" else r(f["n"], f["c"], f["h"], f["w"])
    gamma, beta = r(f["c"]), r(f["c"])
    stats = KERNELS["batchnorm.local_sums"](x)
    if k == "batchnorm.local_sums":
        return lambda: fn(x)
    if k == "batchnorm.fwd_apply":
        return lambda: fn(x, stats, gamma, beta)
    _, cache = KERNELS["batchnorm.fwd_apply"](x, stats, gamma, beta)
    dy = ops.grad(*x.shape)
    if k == "batchnorm.bwd_local_sums":
        return lambda: fn(dy, cache)
    sums, _, _ = KERNELS["batchnorm.bwd_local_sums"](dy, cache)
    return lambda: fn(dy, cache, sums)


def _layernorm(call: KernelCall, f: dict, fn: Callable, ops: _Operands) -> Callable[[], object]:
    r = ops.rand
    x, gamma, beta = r(f["rows"], f["d"]), r(f["d"]), r(f["d"])
    if call.kernel.endswith(".fwd"):
        return lambda: fn(x, gamma, beta)
    _, cache = KERNELS["layernorm.fwd"](x, gamma, beta)
    dy = ops.grad(*x.shape)
    return lambda: fn(dy, cache)


def _sgd(call: KernelCall, f: dict, fn: Callable, ops: _Operands) -> Callable[[], object]:
    """The update as the executor makes it: in a 16-bit format with float32 momentum and master
    weights (mixed precision), else all in the weights' format."""
    r = ops.rand
    w, g = r(f["elems"]), r(f["elems"])
    if storage_dtype(call.dtype).itemsize != 2:
        v = r(f["elems"])
        return lambda: fn(w, v, g, 1e-6, 0.9)
    v, master = _rand(ops.xp, (f["elems"],), "float32"), _rand(ops.xp, (f["elems"],), "float32")
    return lambda: fn(w, v, g, 1e-6, 0.9, master=master)


def _grad(call: KernelCall, f: dict, fn: Callable, ops: _Operands) -> Callable[[], object]:
    """FSDP's gradient kernels: a cast to float32, or an in-place division (kernels.optimizer)."""
    g = ops.rand(f["elems"])
    return (lambda: fn(g)) if call.kernel == "grad.cast" else (lambda: fn(g, 2.0))


def _elementwise(call: KernelCall, f: dict, fn: Callable, ops: _Operands) -> Callable[[], object]:
    k, r = call.kernel, ops.rand
    op = k.split(".")[0]
    x = ops.input(f["elems"]) if k.endswith(".fwd") else r(f["elems"])
    fwd = KERNELS[f"{op}.fwd"]
    args = {"dropout": (x, 0.1, 0), "add": (x, r(f["elems"]))}.get(op, (x,))
    if k.endswith(".fwd"):
        return lambda: fwd(*args)
    _, cache = fwd(*args)
    dy = ops.grad(f["elems"])
    return lambda: fn(dy, cache)


def _concat(call: KernelCall, f: dict, fn: Callable, ops: _Operands) -> Callable[[], object]:
    sizes = call.shape[2:]
    xs = [ops.rand(f["outer"], s, f["inner"]) for s in sizes]
    if call.kernel.endswith(".fwd"):
        return lambda: fn(xs, 1)
    y, cache = KERNELS["concat.fwd"](xs, 1)
    dy = y if ops.shared is None else ops.shared.setdefault("dy", y)  # the output's gradient, its shape
    return lambda: fn(dy, cache)


def _reshard(call: KernelCall, f: dict, fn: Callable, ops: _Operands) -> Callable[[], object]:
    # a piece written into a block whose rows are twice as long (one side strided, as a halo
    # or a channel slice is in the executor's blocks), read from a contiguous one
    r = ops.rand
    src, dst = r(f["outer"], f["inner"]), r(f["outer"], 2 * f["inner"])[:, :f["inner"]]
    return lambda: fn(dst, src)


def _softmax_xent(call: KernelCall, f: dict, fn: Callable, ops: _Operands) -> Callable[[], object]:
    logits = ops.rand(f["rows"], f["k"])
    labels = ops.xp.random.default_rng(1).integers(0, f["k"], f["rows"])
    if call.kernel.endswith(".fwd"):
        return lambda: fn(logits, labels, f["rows"])
    _, cache = KERNELS["softmax_xent.fwd"](logits, labels, f["rows"])
    return lambda: fn(cache)


#: The operand builder of each kernel family (the registry name's part before the dot).
_BUILDERS: dict[str, Builder] = {
    "conv2d": _conv, "linear": _linear, "gemm": _gemm, "maxpool2d": _pool, "avgpool2d": _pool,
    "global_avgpool": _global_pool, "batchnorm": _batchnorm, "layernorm": _layernorm, "sgd": _sgd, "grad": _grad,
    "relu": _elementwise, "gelu": _elementwise, "dropout": _elementwise, "add": _elementwise,
    "concat": _concat, "reshard": _reshard, "softmax_xent": _softmax_xent, "attention": attention_builder,
    "moe_dispatch": moe_route_builder, "moe_combine": moe_route_builder, "moe_experts": moe_experts_builder,
}


class _Clock:
    """Seconds of one sample of ``inner`` runs: perf_counter on the CPU, CUDA events on a GPU."""

    def __init__(self, xp: ModuleType):
        self.xp = xp
        self.gpu = xp is not numpy

    def __call__(self, run: Callable[[], object], inner: int) -> float:
        if self.gpu:
            start, end = self.xp.cuda.Event(), self.xp.cuda.Event()
            start.record()
            for _ in range(inner):
                run()
            end.record()
            end.synchronize()
            return self.xp.cuda.get_elapsed_time(start, end) / 1e3 / inner
        t0 = time.perf_counter()
        for _ in range(inner):
            run()
        return (time.perf_counter() - t0) / inner


def summarize(samples: list[float], flops: int, nbytes: int) -> Entry:
    s = sorted(samples)
    n = len(s)
    med = s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
    q1, q3 = s[int(0.25 * (n - 1))], s[int(math.ceil(0.75 * (n - 1)))]
    return Entry(min_s=s[0], median_s=med, spread=(q3 - q1) / med if med > 0 else 0.0, count=n,
                 flops=int(flops), bytes=int(nbytes))


def last_level_cache_bytes() -> int:
    """The CPU's last-level cache (Linux sysfs, e.g. "32768K"; 32 MiB when unknown)."""
    units = {"K": 1 << 10, "M": 1 << 20}
    sizes = []
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read().strip().upper()
            sizes.append(int(text[:-1]) * units[text[-1]] if text[-1:] in units else int(text))
        except (OSError, ValueError):
            continue
    return max(sizes, default=32 << 20)


def one_call(run: Callable[[], object]) -> Callable[[], float]:
    """A closure that times ONE ``run()`` (CPU)."""
    def sample() -> float:
        t0 = time.perf_counter()
        run()
        return time.perf_counter() - t0

    return sample


def cold_sampler(run: Callable[[], object], buf: numpy.ndarray | None = None) -> Callable[[], float]:
    """A closure that passes over a float32 buffer (``buf``; by default one of 4 MiB, larger than
    the L2 cache), then times ONE ``run()`` (CPU)."""
    if buf is None:
        buf = numpy.ones(DISTURB_ELEMS, dtype=numpy.float32)
    timed = one_call(run)

    def sample() -> float:
        numpy.maximum(buf, 0.5, out=buf)
        return timed()

    return sample


def _time_cold(run: Callable[[], float], call: KernelCall, policy: TimingPolicy) -> Entry:
    """Samples of single calls after a cache-disturbing pass (only the call is timed)."""
    t_start = time.perf_counter()
    for _ in range(max(1, policy.warmup)):
        run()
    samples: list[float] = []
    while True:
        samples.append(run())
        if enough(samples, call, policy, t_start):
            break
    return summarize(samples, call.flops, call.bytes)


def enough(samples: list[float], call: KernelCall, policy: TimingPolicy, t_start: float) -> bool:
    """Whether ``samples`` of ``call`` are enough under ``policy``: at least ``min_reps``, and then
    the median's 95% interval within ``rel_ci`` of it, or ``max_reps`` taken, or ``time_cap_s`` spent
    since ``t_start``."""
    n = len(samples)
    if n < policy.min_reps:
        return False
    e = summarize(samples, call.flops, call.bytes)
    return (1.57 * e.spread / math.sqrt(n) <= policy.rel_ci or n >= policy.max_reps
            or time.perf_counter() - t_start > policy.time_cap_s)


def time_call(call: KernelCall, xp: ModuleType = numpy, policy: TimingPolicy = TimingPolicy()) -> Entry:
    """Measure one kernel call: warm-up, then samples until the median is stable or the cap hits."""
    keep_freed_memory()  # as every executor rank does (kernels.allocator)
    run = build(call, xp)
    clock = _Clock(xp)
    if policy.cold and xp is numpy:
        return _time_cold(cold_sampler(run), call, policy)
    t_start = time.perf_counter()
    first = 0.0
    for _ in range(max(1, policy.warmup)):
        first = clock(run, 1)
    synchronize(xp)
    inner = 1 if first >= policy.min_sample_s else min(1000, max(1, math.ceil(policy.min_sample_s / max(first, 1e-7))))
    samples: list[float] = []
    while True:
        samples.append(clock(run, inner))
        n = len(samples)
        if n >= policy.min_reps:
            e = summarize(samples, call.flops, call.bytes)
            half_ci = 1.57 * e.spread / math.sqrt(n)
            if half_ci <= policy.rel_ci or n >= policy.max_reps:
                break
            if time.perf_counter() - t_start > policy.time_cap_s:
                break
    return summarize(samples, call.flops, call.bytes)
