"""What the op catalogue says about every op: parameters, shape rule, weights, costs, splits.

Each op is described once (one file per op family) as an :class:`OpDef`. The planner, the cost
model and the executor read everything they know about an op from here.

Dimension letters (canonical, shared by every op so strategies compose along the graph):
``N`` sample, ``H`` and ``W`` spatial (``H`` is also the sequence axis of token tensors),
``C`` input channels / contraction (the channel axis of ops without weights), ``F`` filters /
output features (attention heads for ``attention``), ``E`` experts (``moe``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from networks.errors import DnnplanError, short
from networks.ir import Shape

#: The dimensions a layer can split, by letter: samples N, a mixture's experts E, an image's rows or a
#: sequence's positions H, an image's columns W, the contraction C (input channels or features) and
#: the filters F (output channels or features, attention's heads). costmodel.parallel.axes lays them
#: on the rank grid and names them as users do (data, expert, context, spatial, tensor).
N, E, H, W, C, F = "N", "E", "H", "W", "C", "F"
DIMS = (N, E, H, W, C, F)
REQUIRED = object()
#: The largest integer a spec may give (a size, a count, a stride): 2^31, beyond any real layer.
MAX_INT = 2**31
#: The most elements one tensor may hold per sample (2^48: 1 PiB of float32 for one sample).
MAX_ELEMENTS = 2**48


def clog2(x: int) -> int:
    """ceil(log2(x)) for x >= 1, the depth of a balanced reduction tree over x values."""
    return max(0, math.ceil(math.log2(max(1, x))))


def prod(xs) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


@dataclass(frozen=True)
class Param:
    """One op parameter: its name, kind, default and a line of documentation."""

    name: str
    kind: str  # "int", "pos", "nonneg", "pair", "pad", "bool", "rate", "float", "str"
    default: Any = REQUIRED
    doc: str = ""


@dataclass(frozen=True)
class Window:
    """The halo rule along one spatial axis: output interval -> the input interval it reads.

    Output rows ``[a, b)`` read input rows ``[a*stride - pad_lo, (b-1)*stride - pad_lo +
    dilation*(kernel-1) + 1)``, clipped to ``[0, in_size)``; the part outside is padding.
    """

    kernel: int
    stride: int
    pad_lo: int
    dilation: int
    in_size: int

    def needed(self, a: int, b: int) -> tuple[int, int]:
        if b <= a:
            return (0, 0)
        lo = a * self.stride - self.pad_lo
        hi = (b - 1) * self.stride - self.pad_lo + self.dilation * (self.kernel - 1) + 1
        return (max(0, lo), min(self.in_size, hi))


@dataclass(frozen=True)
class ExtraComm:
    """A collective an op needs under a split besides reshards and weight-gradient sync.

    ``elems`` counts elements per rank of the local block: ``"channels"`` means ``factor`` times
    the local channel count (batch-norm statistics), ``"output"`` means ``factor`` times the local
    output block (attention keys and values gathered over a split sequence), ``"rows"`` means
    ``factor`` times the local rows of the first input, all axes but the last (the per-token
    numbers of a vocabulary-parallel loss).
    """

    phase: str  # "fwd" or "bwd"
    collective: str  # "allreduce", "allgather", "reduce_scatter"
    per: str  # "channels", "output" or "rows"
    factor: float


@dataclass(frozen=True)
class DimSplit:
    """How splitting one dimension of a layer maps onto its tensors.

    ``in_axes[k]`` is the batched axis of input ``k`` the split cuts (None: that input is needed
    whole, i.e. replicated over the group). ``out_axis`` likewise for the output. ``window`` gives
    the halo rule for a spatial split. ``partial_out``: the forward result is a partial sum over
    the group (split contraction) and is all-reduced. ``partial_in_grad``: the input gradients are
    partial sums over the group (split filters) and are all-reduced in backward.
    ``partial_weight_grad``: weights whose gradients sum over the group (the weight-gradient
    allreduce); weights the split cuts are listed in ``weight_axes``.
    """

    dim: str
    size: int
    in_axes: tuple[int | None, ...]
    out_axis: int | None
    weight_axes: tuple[tuple[str, int], ...] = ()
    window: Window | None = None
    partial_out: bool = False
    partial_in_grad: bool = False
    partial_weight_grad: tuple[str, ...] = ()
    extra: tuple[ExtraComm, ...] = ()
    min_block: int = 1
    divides: bool = False  # the degree must divide ``size`` (blocks must stay contiguous elsewhere)
    #: ``(weight, units)``: the split cuts that weight's axis (``weight_axes``) in ``units`` whole
    #: groups (grouped-query attention's key/value heads). A degree must divide ``units`` (whole
    #: groups per rank) or be a multiple of it: then each group is held by ``degree / units``
    #: neighbouring ranks (replicated), whose gradients of it are summed over them.
    weight_units: tuple[tuple[str, int], ...] = ()


def units_fit(split: "DimSplit", degree: int) -> str | None:
    """Why ``degree`` cannot cut the grouped weights of ``split`` (``DimSplit.weight_units``), or None."""
    for name, units in split.weight_units:
        if units % degree and degree % units:
            return f"{split.dim}={degree} must divide the {units} groups of {name} or be a multiple of them"
    return None


def units_share(split: "DimSplit", name: str, degree: int) -> int:
    """How many neighbouring ranks of a ``degree``-way split hold each group of weight ``name``
    (1 unless the degree exceeds its ``weight_units``)."""
    for wname, units in split.weight_units:
        if wname == name and degree > units:
            return degree // units
    return 1


@dataclass(frozen=True)
class LayerCost:
    """Counts for one layer at a given batch. Passes are (forward, backward-data, backward-weights).

    ``work``/``depth`` follow the work-depth model of Ben-Nun & Hoefler, "Demystifying Parallel and
    Distributed Deep Learning" (ACM Computing Surveys 2019), Tables 4 and 6: work counts
    multiply-accumulates for contractions and elementwise operations otherwise; depth is the
    longest dependency chain. ``flops`` counts floating-point operations (a MAC is two).
    """

    flops: tuple[int, int, int]
    work: tuple[int, int, int]
    depth: tuple[int, int, int]
    bytes_read: tuple[int, int, int]
    bytes_written: tuple[int, int, int]
    activation_bytes: int  # kept for backward beyond the tensors ``OpDef.saves`` names (masks, indices, stats)
    macs: int

    @property
    def flops_fwd(self) -> int:
        return self.flops[0]

    @property
    def flops_bwd(self) -> int:
        return self.flops[1] + self.flops[2]

    @property
    def step_work(self) -> int:
        return sum(self.work)

    @property
    def step_depth(self) -> int:
        """Forward, then the two backward passes side by side (they are independent)."""
        return self.depth[0] + max(self.depth[1], self.depth[2])


InferFn = Callable[[dict, tuple[Shape, ...], tuple[str, ...]], tuple[Shape, str]]
WeightsFn = Callable[[dict, tuple[Shape, ...]], dict[str, Shape]]
CostFn = Callable[[dict, tuple[Shape, ...], Shape, int, int], LayerCost]
SplitFn = Callable[[dict, tuple[Shape, ...], Shape], tuple[DimSplit, ...]]


@dataclass(frozen=True)
class OpDef:
    """One op of the catalogue."""

    name: str
    doc: str
    params: tuple[Param, ...]
    arity: tuple[int, int | None]  # (min inputs, max inputs or None)
    infer: InferFn
    weights: WeightsFn
    costs: CostFn
    splits: SplitFn
    stats_axis: int | None = field(default=None)
    #: What backward needs of the op's own tensors, as frameworks keep them: ``"inputs"`` (conv,
    #: linear, norms, gelu, pooling, attention), ``"output"`` (relu, whose gradient needs only its
    #: result, so it runs in place) or ``"none"``; anything else it keeps is ``LayerCost.activation_bytes``.
    saves: str = "inputs"

    def param(self, name: str) -> Param | None:
        for p in self.params:
            if p.name == name:
                return p
        return None


class ShapeError(DnnplanError):
    """Raised inside shape rules; the loader adds the file, layer and line."""

    def __init__(self, message: str, field_name: str | None = None, hint: str | None = None):
        super().__init__(message, field=field_name, hint=hint)


def no_weights(params, in_shapes) -> dict[str, Shape]:
    return {}


def elementwise_cost(n_elems: int, itemsize: int, fwd_ops: int, bwd_ops: int, kept: int,
                     depth_fwd: int = 1, depth_bwd: int = 1, n_inputs: int = 1) -> LayerCost:
    """Costs of an op that touches each element a fixed number of times (counts are conventions)."""
    nbytes = n_elems * itemsize
    return LayerCost(
        flops=(fwd_ops * n_elems, bwd_ops * n_elems, 0),
        work=(n_elems, n_elems, 0),
        depth=(depth_fwd, depth_bwd, 0),
        bytes_read=(n_inputs * nbytes, 2 * nbytes, 0),
        bytes_written=(nbytes, n_inputs * nbytes, 0),
        activation_bytes=kept,
        macs=0,
    )


def axes_of(shape: Shape) -> dict[str, int]:
    """Batched axis of each dimension letter for an activation of this per-sample shape.

    ``(C, H, W)`` -> N0 C1 H2 W3; ``(S, D)`` -> N0 H1 C2 (sequence as H, features as C);
    ``(D,)`` -> N0 C1; ``()`` -> N0.
    """
    if len(shape) == 3:
        return {N: 0, C: 1, H: 2, W: 3}
    if len(shape) == 2:
        return {N: 0, H: 1, C: 2}
    if len(shape) == 1:
        return {N: 0, C: 1}
    return {N: 0}


def dim_size(shape: Shape, dim: str, batch_axis_size: int = 0) -> int:
    ax = axes_of(shape)[dim]
    return shape[ax - 1] if ax > 0 else batch_axis_size


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def coerce(param: Param, value: Any) -> Any:
    """Check and normalise one parameter value; raise ShapeError naming the field on misuse."""
    k = param.kind
    name = param.name
    if k in ("int", "pos", "nonneg"):
        if not _is_int(value):
            raise ShapeError(f"must be an integer, got {short(value)}", name)
        if abs(value) > MAX_INT:
            raise ShapeError(f"must be at most 2^31 = {MAX_INT} in size, got {short(value)}", name)
        if k == "pos" and value <= 0:
            raise ShapeError(f"must be positive, got {value}", name)
        if k == "nonneg" and value < 0:
            raise ShapeError(f"must be zero or positive, got {value}", name)
        return value
    if k in ("pair", "pad"):
        items = [value, value] if _is_int(value) else value
        if not isinstance(items, (list, tuple)) or len(items) != 2 or not all(_is_int(v) for v in items):
            raise ShapeError(f"must be an integer or a list of two integers, got {short(value)}", name)
        lo = 0 if k == "pad" else 1
        if any(v < lo or v > MAX_INT for v in items):
            raise ShapeError(f"must be {'>= 0' if lo == 0 else 'positive'} and at most 2^31, got {short(value)}",
                             name)
        return (int(items[0]), int(items[1]))
    if k == "bool":
        if not isinstance(value, bool):
            raise ShapeError(f"must be true or false, got {short(value)}", name)
        return value
    if k == "rate":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise ShapeError(f"must be a number in [0, 1), got {short(value)}", name)
        return float(value)
    if k == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise ShapeError(f"must be a positive number, got {short(value)}", name)
        return float(value)
    if k == "str":
        if not isinstance(value, str) or not value:
            raise ShapeError(f"must be a non-empty string, got {short(value)}", name)
        return value
    raise AssertionError(f"unknown parameter kind {k}")  # a catalogue bug, not a user mistake


def need_rank(shape: Shape, ranks: tuple[int, ...], what: str, op: str) -> None:
    if len(shape) not in ranks:
        want = " or ".join({3: "(C, H, W)", 2: "(S, D)", 1: "(D,)", 0: "()"}[r] for r in ranks)
        raise ShapeError(f"{op} needs a per-sample input shaped {want}, but {what} is {tuple(shape)}",
                         "inputs", hint="add a flatten layer or check the input" if 1 in ranks else None)


def need_float(dtype: str, op: str) -> None:
    if not dtype.startswith(("float", "bfloat")):
        raise ShapeError(f"{op} needs a floating-point input, got {dtype}", "inputs",
                         hint="token ids go through an embedding layer first")
