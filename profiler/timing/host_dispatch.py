"""A framework's per-op dispatch cost on this computer: tight loops of tiny ops, timed on the host
clock (`dnnplan profile --host`).

An op on a tiny operand (one element, a 1 x 1 matrix, a 3 x 3 convolution of one pixel) does
almost no arithmetic: a loop of them measures what the framework pays to issue one op, the host's
time per op of a framework file (``host.op_s``, costmodel.frameworks.framework). Each op runs
``calls`` times in a loop, ``repeats`` loops; an op's cost is the mean of the loops' time per call
and its spread their standard deviation. Under torch on a GPU the operands live there and the loop
ends with a synchronisation, so the time per call is the host's issue (dispatcher, autograd's
bookkeeping where the operand requires a gradient, the launch), the device's tiny kernels running
behind it. Under cupy (what dnnplan's own executor issues its GPU work through, the ``dnnplan``
framework file) the operands live on the GPU likewise. numpy is always installed; torch and cupy
are timed where they import (cupy only with a GPU).
"""

from __future__ import annotations

import importlib
import math
import time
from dataclasses import dataclass
from typing import Callable

from networks.errors import DnnplanError

#: the frameworks `profile --host` can time
HOST_FRAMEWORKS = ("numpy", "torch", "cupy")


@dataclass(frozen=True)
class OpDispatch:
    """One tiny op's host cost: the mean over the loops of their time per call, its standard
    deviation over the loops (``spread_s``), and the loops timed."""

    name: str
    mean_s: float
    spread_s: float
    repeats: int


@dataclass(frozen=True)
class HostDispatch:
    """What was timed: the framework, its version, where its operands lived, the calls a loop."""

    framework: str
    version: str
    device: str
    calls: int
    ops: tuple[OpDispatch, ...]

    @property
    def op_s(self) -> float:
        """The mean over the ops of their cost: a framework file's ``host.op_s``."""
        return sum(o.mean_s for o in self.ops) / len(self.ops)


def per_call_stats(loop_s: list[float] | tuple[float, ...], calls: int) -> tuple[float, float]:
    """(mean, standard deviation) over loops of ``calls`` calls each taking ``loop_s`` seconds, per call."""
    per = [t / calls for t in loop_s]
    mean = sum(per) / len(per)
    var = sum((x - mean) ** 2 for x in per) / (len(per) - 1) if len(per) > 1 else 0.0
    return mean, math.sqrt(var)


def numpy_ops(np) -> dict[str, Callable[[], object]]:
    """numpy's tiny ops: elementwise add, multiply and maximum (ReLU), a 1 x 1 matmul, a sum."""
    a, m = np.ones(1, dtype=np.float32), np.ones((1, 1), dtype=np.float32)
    return {"add": lambda: np.add(a, a), "mul": lambda: np.multiply(a, a), "relu": lambda: np.maximum(a, 0.0),
            "matmul 1x1": lambda: np.matmul(m, m), "sum": lambda: np.sum(a)}


def torch_ops(torch, device: str) -> dict[str, Callable[[], object]]:
    """torch's tiny ops on ``device``: add, multiply, ReLU, a 1 x 1 matmul, a 3 x 3 convolution of
    one pixel, and an add whose operand requires a gradient (autograd's bookkeeping)."""
    a = torch.ones(1, device=device)
    m = torch.ones(1, 1, device=device)
    x, w = torch.ones(1, 1, 3, 3, device=device), torch.ones(1, 1, 3, 3, device=device)
    g = torch.ones(1, device=device, requires_grad=True)
    conv = torch.nn.functional.conv2d
    return {"add": lambda: torch.add(a, a), "mul": lambda: torch.mul(a, a), "relu": lambda: torch.relu(a),
            "matmul 1x1": lambda: torch.matmul(m, m), "conv2d 3x3": lambda: conv(x, w),
            "add (autograd)": lambda: torch.add(g, g)}


def cupy_ops(cp) -> dict[str, Callable[[], object]]:
    """cupy's tiny ops on the GPU: add, multiply, maximum (ReLU), a 1 x 1 matmul (cuBLAS), a sum."""
    a, m = cp.ones(1, dtype=cp.float32), cp.ones((1, 1), dtype=cp.float32)
    return {"add": lambda: cp.add(a, a), "mul": lambda: cp.multiply(a, a), "relu": lambda: cp.maximum(a, 0.0),
            "matmul 1x1": lambda: cp.matmul(m, m), "sum": lambda: cp.sum(a)}


def time_loop(fn: Callable[[], object], calls: int, sync: Callable[[], None] = lambda: None,
              clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds ``calls`` calls of ``fn`` take, the device synchronised after them (``sync``)."""
    start = clock()
    for _ in range(calls):
        fn()
    sync()
    return clock() - start


def measure_host(framework: str, calls: int = 2000, repeats: int = 7,
                 importer: Callable[[str], object] = importlib.import_module) -> HostDispatch:
    """Time ``framework``'s tiny ops (module docstring): ``repeats`` loops of ``calls`` calls each,
    after one loop of warm-up. One line when the framework is unknown or not installed here."""
    if framework not in HOST_FRAMEWORKS:
        raise DnnplanError(f"unknown --framework {framework} for --host", hint=f"use {' or '.join(HOST_FRAMEWORKS)}")
    try:
        module = importer(framework)
    except ImportError:
        raise DnnplanError(f"{framework} is not installed here, so its dispatch cannot be timed",
                           hint=f"pip install {framework}, or time numpy (--framework numpy)") from None
    if framework == "numpy":
        ops, device, sync = numpy_ops(module), "cpu", (lambda: None)
    elif framework == "cupy":
        try:
            module.cuda.runtime.getDeviceCount()
        except Exception:  # noqa: BLE001 - no driver, no device
            raise DnnplanError("cupy finds no usable CUDA device, so its dispatch cannot be timed here",
                               hint="run it on a machine with an NVIDIA GPU, or time numpy (--framework numpy)") from None
        ops, device, sync = cupy_ops(module), "cuda", module.cuda.Device().synchronize
    else:
        gpu = module.cuda.is_available()
        device = "cuda" if gpu else "cpu"
        ops, sync = torch_ops(module, device), (module.cuda.synchronize if gpu else (lambda: None))
    out = []
    for name, fn in ops.items():
        time_loop(fn, calls, sync)  # warm-up: caches, the allocator, lazy initialisation
        mean, spread = per_call_stats([time_loop(fn, calls, sync) for _ in range(repeats)], calls)
        out.append(OpDispatch(name, mean, spread, repeats))
    return HostDispatch(framework, str(getattr(module, "__version__", "?")), device, calls, tuple(out))
