"""A framework as data (pure): which kernels it runs per op, what the host pays to issue them, what
overlaps at which efficiency, what memory it adds and what its precision defaults mean.

The same plan runs at different speeds under eager PyTorch, torch.compile, Megatron-LM with
Transformer Engine, DeepSpeed and dnnplan's own executor (docs/costmodel.md, "Frameworks"). A
:class:`Framework` says, for one of them:

* ``kernels``: per op kind (or op kind and kernel algorithm: ``attention.flash``), the kernels
  launched per layer pass (``fwd``, ``bwd``; 0: fused into a
  neighbour's kernel, so nothing is issued for it) and the device time relative to the fused kernels
  the cost model prices (``device``: 1.0 is the cost model's kernel; an entry without one takes the
  ``default`` entry's), and the extra passes over memory its unfused kernels make (``passes``: over
  attention's scores, or another op's output), and after which of its forward launches the host
  waits for the device (``sync_after``: a device-to-host copy the rest of the pass needs, as
  Megatron-Core's dropless token dispatch reads the tokens per expert) and the host's time per
  launch where it is not the file's (``launch_s``) and the launches a pass adds per expert the
  layer's shard holds (``per_local_expert``: ``fwd`` and ``bwd``; a mixture of experts whose
  grouped GEMM issues one GEMM an expert) and how many of a pass's launches are small
  kernels that carry none of its device time (``small``) and the fraction of the datasheet peak of
  the layer's number format (tensor cores or CUDA cores) its compute-bound kernels reach, in place
  of the machine's class efficiency (``peak_fraction``: cuDNN's convolutions reach about the same
  fraction in every format, where the machine's classes were fixed by other kernels) and the
  tensors its unfused kernels keep for backward beyond the cost model's count (``kept``: copies of
  attention's float32 scores, or of another op's output; ``kept_stored``: copies of the scores in
  the layer's own format) and the share of the cost model's
  workspace its kernels allocate (``workspace``: cuDNN's implicit-GEMM convolutions form no column
  matrix) and the copies of its input gradient its unfused backward holds at once beyond the cost
  model's one (``grad_copies``: eager PyTorch's cross-entropy); ``unaligned_gemm``: how much
  slower a GEMM runs when a matrix dimension is not a multiple of 8 (cuBLAS's ``align1`` kernels,
  which eager PyTorch runs; torch.compile pads the shape);
* ``host``: the host's time per op (the Python, the dispatcher and autograd's bookkeeping of one
  layer pass) and per kernel launch, the device's idle gap between back-to-back kernels, whether
  the host waits for the device after every layer pass (an executor that times each layer) or
  once a step, and whether CUDA graphs replay the step (then the host issues one graph launch a step);
* ``overlap``: the efficiency of each overlap the mode allows (data, tensor, experts): the share of
  the hideable time that is hidden (costmodel.comm.overlap);
* ``memory``: the CUDA context and libraries' handles and workspaces, the communicator's buffers
  (on more than one device) and the caching allocator's reserve over what tensors hold, and
  whether the weights' gradients are made by backward (``grads_in_backward``: PyTorch's
  ``zero_grad(set_to_none=True)``) rather than held in buffers over the step;
* ``precision``: what ``fp32`` means for convolutions and matmuls (PyTorch runs float32
  convolutions on TF32 tensor cores unless told otherwise: ``torch.backends.cudnn.allow_tf32``
  defaults to True);
* ``layout``: the memory format of convolutions' tensors (``convolutions``: ``nchw``, PyTorch's
  default contiguous format, or ``nhwc``, channels last). cuDNN's tensor-core kernels take NHWC,
  so an NCHW convolution on the tensor cores transposes its operands in each pass (NVIDIA Deep
  Learning Performance Documentation, "Convolutional Layers User's Guide", "Tensor Layouts In
  Memory: NCHW vs NHWC"; PyTorch, "Channels Last Memory Format in PyTorch"): ``transposes`` says
  how many read-and-write passes over the pass's input and output that makes (one: each operand
  transposed once; costmodel.frameworks.kernels prices them at the machine's memory rate);
* ``context_parallel``: how the keys and values of a sequence split over ranks are exchanged
  (``exchange``: ``ring``, Megatron-LM's ``--cp-comm-type p2p``, or ``allgather``, torchtitan's
  default; costmodel.comm.context); left out, the cheaper of the two for each layer;
* ``step``: how the step is composed: ``layers`` (each layer's passes in order, costmodel.step) or
  ``zero3`` (DeepSpeed's ZeRO-3 step, costmodel.frameworks.deepspeed).

Each number may carry its ``basis`` (measured, fitted, published, assumed) and ``source``
(:class:`Value`); a bare number is assumed. Parsing is strict: an unknown key or a bad value is one
:class:`DnnplanError` naming the key (costmodel.frameworks.loading adds the file and line).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from costmodel.calls.attention import ATTENTION_ALGORITHMS
from networks.errors import DnnplanError, short
from networks.ops.catalogue import OPS

#: how a number in a framework file was obtained
BASES = ("measured", "fitted", "published", "assumed")
#: how a framework composes the step (module docstring)
STEPS = ("layers", "zero3")
#: what fp32 may mean for a kind of kernel
FLOAT32_MODES = ("float32", "tf32")
#: the memory formats of convolutions' tensors (``layout.convolutions``)
LAYOUTS = ("nchw", "nhwc")
#: the overlaps a framework states an efficiency for (costmodel.comm.overlap's purposes)
OVERLAPS = ("data", "tensor", "experts")
#: the op kind whose entry prices every op the file does not name
DEFAULT_OP = "default"
#: the ops whose kernels a file may state per algorithm (``attention.flash``)
ALGORITHMS = {"attention": ATTENTION_ALGORITHMS}


@dataclass(frozen=True)
class Value:
    """A number of a framework file, how it was obtained and where it comes from."""

    value: float
    basis: str = "assumed"
    source: str = ""


@dataclass(frozen=True)
class OpKernels:
    """What one op kind runs per layer pass: kernel launches forward and backward (0: fused into a
    neighbour's kernel) and its device time relative to the cost model's fused kernels."""

    fwd: int = 1
    bwd: int = 2
    device: float = 1.0
    #: extra read-and-write passes over memory per pass: over attention's scores (in float32, as
    #: autocast runs the softmax), over any other op's output (costmodel.frameworks.kernels)
    passes: float = 0.0
    #: the host waits for the device after this many of the op's forward launches (a copy of
    #: device values the host needs to issue the rest: Megatron-Core's dropless token dispatch
    #: reads the tokens per expert); 0: never (costmodel.frameworks.host_calls)
    sync_after: int = 0
    #: the host's time per launch of this op's kernels (each a PyTorch op called from Python, as
    #: Megatron-Core's router and token dispatcher run them); None: the file's ``host.launch_s``
    launch_s: float | None = None
    #: how many of a pass's launches are small kernels whose device time is their launch gap alone
    #: (the router's and the token dispatcher's bookkeeping: counts, splits, copies, a permutation);
    #: the pass's device time is spread over the others (costmodel.frameworks.host_calls)
    small: int = 0
    #: the fraction of the datasheet peak of the layer's format (tensor or CUDA cores) its
    #: compute-bound kernels reach, in place of the machine's class efficiency; None: the machine's
    peak_fraction: float | None = None
    #: copies of attention's float32 scores (another op: of its output) its kernels keep for
    #: backward beyond the cost model's count (eager PyTorch's softmax output and dropout's mask and
    #: output, each a tensor of its own; costmodel.frameworks.kernels)
    kept: float = 0.0
    #: copies of attention's scores in the layer's own number format (another op: of its output, as
    #: ``kept``) its kernels keep for backward beyond the cost model's count (Inductor's fused
    #: attention keeps the raw scores, from which its backward recomputes the softmax)
    kept_stored: float = 0.0
    #: the share of the cost model's workspace (dnnplan's algorithm's temporaries: im2col's column
    #: matrix) the framework's kernels allocate while the layer's passes run (cuDNN's implicit-GEMM
    #: engines form no column matrix; costmodel.frameworks.kernels)
    workspace: float = 1.0
    #: copies of the op's input gradient its unfused backward holds at once beyond the one the cost
    #: model counts (eager PyTorch's cross-entropy: nll_loss's gradient of the log-probabilities and
    #: log_softmax's of the logits, each a tensor of its own; costmodel.frameworks.kernels)
    grad_copies: float = 0.0
    #: launches each pass adds per expert of the layer's shard (forward, backward): Transformer
    #: Engine's GroupedLinear issues each local expert's GEMMs one by one (costmodel.frameworks.host_calls)
    per_local_expert: tuple[int, int] = (0, 0)

    def launches(self, pass_: str, local_experts: int = 0) -> int:
        """The pass's launches (``fwd``, else backward) on a shard holding ``local_experts`` experts."""
        fixed, each = (self.fwd, self.per_local_expert[0]) if pass_ == "fwd" else (self.bwd, self.per_local_expert[1])
        return fixed + each * local_experts


@dataclass(frozen=True)
class HostCosts:
    """What the host pays to issue the step's calls (seconds), and whether a CUDA graph replays it."""

    op_s: Value = Value(0.0)
    launch_s: Value = Value(0.0)
    launch_gap_s: Value = Value(0.0)  # the device's idle between back-to-back kernels
    cuda_graphs: bool = False
    graph_launch_s: Value = Value(0.0)  # one graph launch, when CUDA graphs replay the step
    update_launches: int = 1  # the optimiser's kernel launches a step (fused or foreach kernels)
    sync_each_pass: bool = False  # the host waits for the device after every layer pass (else once a step)

    @property
    def zero(self) -> bool:
        """Whether the host never holds the device back (every cost 0)."""
        return not (self.op_s.value or self.launch_s.value or self.launch_gap_s.value or self.graph_launch_s.value)


@dataclass(frozen=True)
class FrameworkMemory:
    """What a framework holds on a device beyond its tensors (bytes), and its allocator's reserve."""

    context_bytes: Value = Value(0.0)
    communicator_bytes: Value = Value(0.0)  # on more than one device only
    allocator: Value = Value(1.0)  # reserved / allocated
    #: the weights' gradients are made by backward (``zero_grad(set_to_none=True)``, PyTorch's
    #: default: each ``.grad`` is allocated when autograd first accumulates into it), not held in
    #: buffers over the whole step (Megatron-LM's contiguous gradient buffer); one micro-batch a step
    #: only (accumulation holds them from the first micro-batch's backward on; costmodel.frameworks.as_run)
    grads_in_backward: bool = False

    def added_bytes(self, tensors_bytes: int, devices: int) -> int:
        """Bytes the framework adds to a peak of ``tensors_bytes`` on ``devices`` devices: its
        reserved peak (:meth:`reserved_bytes`) less the tensors' (allocated) peak."""
        return self.reserved_bytes(tensors_bytes, devices) - int(tensors_bytes)

    def reserved_bytes(self, allocated_bytes: int, devices: int) -> int:
        """What a device holds at a peak of ``allocated_bytes`` of tensors on ``devices`` devices:
        the caching allocator's reserve (``allocator`` times the tensors: cached and fragmented
        blocks), the CUDA context and libraries' handles and workspaces, and the communicator's
        buffers on more than one device. What runs out of memory is this figure."""
        comm = self.communicator_bytes.value if devices > 1 else 0.0
        return int(self.context_bytes.value + comm + self.allocator.value * allocated_bytes)

    def tensors_limit(self, reserved_limit: float, devices: int) -> float:
        """The most the tensors may hold at their peak on ``devices`` devices for the reserved
        peak to stay within ``reserved_limit`` bytes (the inverse of :meth:`reserved_bytes`; 0
        when the framework alone exceeds it)."""
        comm = self.communicator_bytes.value if devices > 1 else 0.0
        return max(0.0, (reserved_limit - self.context_bytes.value - comm) / self.allocator.value)


@dataclass(frozen=True)
class Framework:
    """One framework (module docstring). ``source``: the file it was read from."""

    name: str
    about: str
    source: str = ""
    step: str = "layers"
    kernels: tuple[tuple[str, OpKernels], ...] = ()
    unaligned_gemm: Value = Value(1.0)
    host: HostCosts = HostCosts()
    overlap: tuple[tuple[str, Value], ...] = ()
    memory: FrameworkMemory = FrameworkMemory()
    float32_convolutions: str = "float32"
    float32_matmuls: str = "float32"
    #: the memory format of convolutions' tensors (:data:`LAYOUTS`; nhwc: no transposes)
    convolution_layout: str = "nhwc"
    #: read-and-write passes over an NCHW tensor-core convolution pass's input and output
    convolution_transposes: Value = Value(1.0)
    #: how a split sequence's keys and values are exchanged (costmodel.comm.context.EXCHANGES; None:
    #: the cheaper for each layer)
    context_exchange: str | None = None

    def op(self, kind: str, algorithm: str = "") -> OpKernels:
        """The kernels of op kind ``kind`` under its kernel ``algorithm`` (``attention.flash``
        before ``attention``; the file's ``default`` entry where it names neither)."""
        table = dict(self.kernels)
        return (table.get(f"{kind}.{algorithm}") or table.get(kind) or table.get(DEFAULT_OP) or OpKernels())

    def overlap_efficiency(self, which: str) -> float:
        return dict(self.overlap).get(which, Value(1.0)).value

    @property
    def prices_device(self) -> bool:
        """Whether the framework's kernels differ from the cost model's (some op's device factor,
        what its kernels keep for backward or allocate, unaligned GEMMs, a precision default, the
        exchange of a split sequence's keys and values)."""
        return (any(k.device != 1.0 or k.passes or k.kept or k.peak_fraction is not None or k.workspace != 1.0
                    or k.kept_stored or k.grad_copies for _, k in self.kernels)
                or self.unaligned_gemm.value != 1.0 or self.convolution_layout != "nhwc"
                or self.float32_convolutions != "float32" or self.float32_matmuls != "float32"
                or self.context_exchange is not None)

    @property
    def as_today(self) -> bool:
        """Whether the framework prices a step exactly as the cost model's kernels and an idle host do."""
        return (not self.prices_device and self.host.zero and self.memory.added_bytes(0, 2) == 0
                and not self.memory.grads_in_backward
                and all(v.value == 1.0 for _, v in self.overlap) and self.memory.allocator.value == 1.0)


# --- parsing (pure: a mapping in, a Framework out) ---------------------------------------------

_TOP = ("name", "about", "step", "kernels", "unaligned_gemm", "host", "overlap", "memory", "precision", "layout",
        "context_parallel")
_HOST = ("op_s", "launch_s", "launch_gap_s", "cuda_graphs", "graph_launch_s", "update_launches", "sync_each_pass")
_MEMORY = ("context_bytes", "communicator_bytes", "allocator", "grads_in_backward")
_PRECISION = ("float32_convolutions", "float32_matmuls")
_OP = ("fwd", "bwd", "device", "passes", "sync_after", "launch_s", "small", "peak_fraction", "kept", "kept_stored",
       "workspace", "grad_copies", "per_local_expert")
_LAYOUT = ("convolutions", "transposes")
_CONTEXT = ("exchange", "source")
#: the exchanges ``context_parallel.exchange`` names (costmodel.comm.context.EXCHANGES)
CONTEXT_EXCHANGES = ("ring", "allgather")
_VALUE = ("value", "basis", "source")


def _fail(message: str, key: str, hint: str | None = None) -> DnnplanError:
    return DnnplanError(message, field=key, hint=hint)


def _mapping(data: Any, key: str, allowed: tuple[str, ...] | None) -> Mapping[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise _fail("expected a mapping", key)
    for k in data:
        if allowed is not None and k not in allowed:
            raise _fail(f"unknown key {short(str(k))}", f"{key}.{k}" if key else str(k),
                        hint=f"use {', '.join(allowed)}")
    return data


def _value(data: Any, key: str, low: float = 0.0, high: float = math.inf) -> Value:
    """A number, or a mapping of its ``value``, ``basis`` and ``source``, within [low, high]."""
    basis, source = "assumed", ""
    if isinstance(data, Mapping):
        _mapping(data, key, _VALUE)
        if "value" not in data:
            raise _fail("a number's mapping needs 'value'", key)
        basis, source = data.get("basis", "assumed"), data.get("source", "")
        if basis not in BASES:
            raise _fail(f"unknown basis {short(str(basis))}", f"{key}.basis", hint=f"use {', '.join(BASES)}")
        if not isinstance(source, str):
            raise _fail("expected text", f"{key}.source")
        data = data["value"]
    if isinstance(data, str):  # YAML 1.1 reads 5.4e8 (no sign in the exponent) as text
        try:
            data = float(data)
        except ValueError:
            pass
    if isinstance(data, bool) or not isinstance(data, (int, float)) or not low <= float(data) <= high:
        bound = f"from {low:g}" + ("" if high == math.inf else f" to {high:g}")
        raise _fail(f"bad value {short(str(data))}: expected a number {bound}", key)
    return Value(float(data), basis, source)


#: the most kernel launches a count of a framework file may give (an op's in a pass, an expert's, the
#: update's): the shipped files' largest is 42; each launch is a call on the host's timeline, so a count
#: of billions would hold the machine's memory before any answer
MAX_LAUNCHES = 10_000


def _count(data: Any, key: str) -> int:
    if isinstance(data, bool) or not isinstance(data, int) or not 0 <= data <= MAX_LAUNCHES:
        raise _fail(f"bad value {short(str(data))}: expected a whole number from 0 to {MAX_LAUNCHES:,}", key)
    return data


def _per_expert(data: Any, key: str) -> tuple[int, int]:
    """A ``per_local_expert`` mapping's forward and backward launches (``basis`` and ``source`` as a number's)."""
    entry = _mapping(data, key, ("fwd", "bwd", "basis", "source"))
    if entry and not {"fwd", "bwd"} <= set(entry):
        raise _fail("a per_local_expert mapping needs 'fwd' and 'bwd'", key)
    if entry.get("basis", "assumed") not in BASES:
        raise _fail(f"unknown basis {short(str(entry['basis']))}", f"{key}.basis", hint=f"use {', '.join(BASES)}")
    return _count(entry.get("fwd", 0), f"{key}.fwd"), _count(entry.get("bwd", 0), f"{key}.bwd")


def _flag(data: Any, key: str) -> bool:
    if not isinstance(data, bool):
        raise _fail(f"bad value {short(str(data))}: expected true or false", key)
    return data


def _choice(data: Any, key: str, allowed: tuple[str, ...]) -> str:
    if data not in allowed:
        raise _fail(f"bad value {short(str(data))}", key, hint=f"use {', '.join(allowed)}")
    return data


def _text(data: Any, key: str) -> str:
    if not isinstance(data, str) or not data.strip():
        raise _fail("expected text", key)
    return data.strip()


def framework_from_dict(data: Any, source: str = "") -> Framework:
    """A :class:`Framework` from a framework file's mapping (module docstring); one DnnplanError
    naming the key for anything else."""
    top = _mapping(data, "", _TOP)
    for key in ("name", "about"):
        if key not in top:
            raise _fail(f"missing '{key}'", key)
    num = _value

    kernels = []
    default_device = _mapping(_mapping(top.get("kernels"), "kernels", None).get(DEFAULT_OP), "kernels.default",
                              _OP).get("device", 1.0)
    for kind, raw in _mapping(top.get("kernels"), "kernels", None).items():
        op, _, algorithm = str(kind).partition(".")
        if kind != DEFAULT_OP and (op not in OPS or (algorithm and algorithm not in ALGORITHMS.get(op, ()))):
            raise _fail(f"unknown op kind {short(str(kind))}", f"kernels.{kind}",
                        hint=f"use {DEFAULT_OP}, one op's algorithm: "
                             f"{', '.join(f'{o}.{a}' for o, algos in ALGORITHMS.items() for a in algos)}; or an op "
                             f"of the catalogue: {', '.join(sorted(OPS))}")
        entry = _mapping(raw, f"kernels.{kind}", _OP)
        kernels.append((str(kind), OpKernels(_count(entry.get("fwd", 1), f"kernels.{kind}.fwd"),
                                             _count(entry.get("bwd", 2), f"kernels.{kind}.bwd"),
                                             num(entry.get("device", default_device), f"kernels.{kind}.device", 0.01,
                                                 100).value,
                                             num(entry.get("passes", 0.0), f"kernels.{kind}.passes", 0.0, 1000).value,
                                             _count(entry.get("sync_after", 0), f"kernels.{kind}.sync_after"),
                                             None if "launch_s" not in entry else
                                             num(entry["launch_s"], f"kernels.{kind}.launch_s", 0.0, 1.0).value,
                                             _count(entry.get("small", 0), f"kernels.{kind}.small"),
                                             None if "peak_fraction" not in entry else
                                             num(entry["peak_fraction"], f"kernels.{kind}.peak_fraction", 0.01,
                                                 1.0).value,
                                             num(entry.get("kept", 0.0), f"kernels.{kind}.kept", 0.0, 100).value,
                                             num(entry.get("kept_stored", 0.0), f"kernels.{kind}.kept_stored", 0.0,
                                                 100).value,
                                             num(entry.get("workspace", 1.0), f"kernels.{kind}.workspace", 0.0,
                                                 100).value,
                                             num(entry.get("grad_copies", 0.0), f"kernels.{kind}.grad_copies", 0.0,
                                                 100).value,
                                             _per_expert(entry.get("per_local_expert"),
                                                         f"kernels.{kind}.per_local_expert"))))
    host = _mapping(top.get("host"), "host", _HOST)
    graphs, each_pass = (_flag(host.get(k, False), f"host.{k}") for k in ("cuda_graphs", "sync_each_pass"))
    costs = HostCosts(*(num(host.get(k, 0.0), f"host.{k}", 0.0, 1.0) for k in ("op_s", "launch_s", "launch_gap_s")),
                      graphs, num(host.get("graph_launch_s", 0.0), "host.graph_launch_s", 0.0, 1.0),
                      _count(host.get("update_launches", 1), "host.update_launches"), each_pass)
    overlap = tuple((k, num(v, f"overlap.{k}", 0.0, 1.0))
                    for k, v in _mapping(top.get("overlap"), "overlap", OVERLAPS).items())
    mem = _mapping(top.get("memory"), "memory", _MEMORY)
    memory = FrameworkMemory(num(mem.get("context_bytes", 0.0), "memory.context_bytes", 0.0, 1e12),
                             num(mem.get("communicator_bytes", 0.0), "memory.communicator_bytes", 0.0, 1e12),
                             num(mem.get("allocator", 1.0), "memory.allocator", 1.0, 4.0),
                             _flag(mem.get("grads_in_backward", False), "memory.grads_in_backward"))
    prec = _mapping(top.get("precision"), "precision", _PRECISION)
    layout = _mapping(top.get("layout"), "layout", _LAYOUT)
    context = _mapping(top.get("context_parallel"), "context_parallel", _CONTEXT)
    if "source" in context:
        _text(context["source"], "context_parallel.source")
    return Framework(
        name=_text(top["name"], "name"), about=_text(top["about"], "about"), source=source,
        step=_choice(top.get("step", "layers"), "step", STEPS), kernels=tuple(kernels),
        unaligned_gemm=num(top.get("unaligned_gemm", 1.0), "unaligned_gemm", 1.0, 100.0), host=costs,
        overlap=overlap, memory=memory,
        float32_convolutions=_choice(prec.get("float32_convolutions", "float32"), "precision.float32_convolutions",
                                     FLOAT32_MODES),
        float32_matmuls=_choice(prec.get("float32_matmuls", "float32"), "precision.float32_matmuls", FLOAT32_MODES),
        convolution_layout=_choice(layout.get("convolutions", "nhwc"), "layout.convolutions", LAYOUTS),
        convolution_transposes=num(layout.get("transposes", 1.0), "layout.transposes", 0.0, 10.0),
        context_exchange=_choice(context["exchange"], "context_parallel.exchange", CONTEXT_EXCHANGES)
        if "exchange" in context else None)
