"""The kernels PyTorch FSDP runs on a unit's parameters and gradients around its collectives (pure;
docs/costmodel.md, "FSDP's gradient kernels").

PyTorch's ``FullyShardedDataParallel`` keeps each unit's parameters as one flat parameter, sharded
over the data-parallel ranks; the original parameters are views of it. Besides the all-gathers and
the reduce-scatter (costmodel.comm.weight_sync), each micro-batch's passes run these kernels on the GPU
(torch/distributed/fsdp/_runtime_utils.py ``_unshard``, ``_post_backward_hook`` and ``_reduce_grad``,
torch 2.1; flat_param.py ``_get_unflat_views``), in its streams but on its SMs and memory, so they
are priced in the passes, not hidden:

* **before each all-gather** (forward, and again before backward under full sharding), under
  parameter mixed precision (``MixedPrecision(param_dtype=bf16)``): the float32 local shard cast to
  the 16-bit compute copy (``pre_unshard``: read 4, write 2 bytes a shard element);
* **the unsharded gradient** (backward): the original parameters are ``split`` views of the flat
  parameter, so autograd makes the flat gradient by concatenating the views' gradients
  (``split_with_sizes`` backward: ``cat``, read and write 2 bytes an element of the unit);
* **cast to the reduce dtype** where it differs from the gradient's (``flat_param.grad.to(
  reduce_dtype)``; Composer's ``mixed_precision: DEFAULT``: bf16 to float32, read 2, write 4);
* **predivide** the unsharded gradient in place before the reduce-scatter by
  :func:`predivide_factor` (``_div_if_needed``; read and write 4 bytes in float32);
* after the reduce-scatter, **postdivide** the shard by ``world / predivide`` (when above 1), and
  from the second micro-batch on **accumulate** it into the saved shard (``_saved_grad_shard +=``:
  read two, write one).

Only where the gradients are reduce-scattered in every micro-batch (FSDP without ``no_sync``, as
Composer runs it: ``Optimizer.reduce_each_micro``); under ``no_sync`` the gradient path runs once a
step and autograd accumulates the unsharded gradients: not priced here.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.calls.kernel_call import KernelCall
from costmodel.choices.optimizer import Optimizer
from costmodel.compute.model import ComputeModel
from networks.ir import DTYPE_BYTES
from networks.ops.base import prod

#: bytes of the float32 sharded parameter and of a float32 gradient element
FLOAT32 = 4


def predivide_factor(world: int) -> int:
    """FSDP's gradient predivide factor for ``world`` ranks (``_get_gradient_predivide_factor``):
    doubled from 1 while it divides ``world`` and stays below ``world / factor``."""
    factor = 1
    while world % factor == 0 and world / factor > factor:
        factor *= 2
    return factor


def postdivide_factor(world: int) -> float:
    """What the reduced shard is divided by afterwards: ``world / predivide``."""
    return world / predivide_factor(world)


@dataclass(frozen=True)
class FsdpKernels:
    """A unit's FSDP kernels in one micro-batch: ``fwd`` before its forward, ``bwd`` in its backward."""

    fwd: tuple[KernelCall, ...]
    bwd: tuple[KernelCall, ...]


def cast_call(elems: int, dtype: str, src_bytes: int, dst_bytes: int) -> KernelCall:
    """A dtype cast of ``elems`` elements (``grad.cast``; ``dtype`` the source's)."""
    return KernelCall("grad.cast", (int(elems),), dtype, "", 0, int(elems) * (src_bytes + dst_bytes))


def scale_call(elems: int, dtype: str, item: int) -> KernelCall:
    """An in-place division of ``elems`` elements (``grad.scale``: one FLOP, read and write each)."""
    return KernelCall("grad.scale", (int(elems),), dtype, "", int(elems), 2 * int(elems) * item)


def fsdp_kernels(sizes: tuple[int, ...], shard_elems: int, world: int, dtype: str, item: int, reduce_bytes: int,
                 micro_batches: int) -> FsdpKernels:
    """The kernels of one FSDP unit per micro-batch (module docstring): ``sizes``, its weights'
    element counts (whole, unsharded); ``shard_elems``, a rank's share of them; ``item``, the
    16-bit compute copy's bytes (4: no parameter mixed precision, no casts); ``reduce_bytes``, a
    gradient element's bytes on the wire (0: the gradient's own); the saved shard's accumulation
    counted in ``(micro_batches - 1) / micro_batches`` of the micro-batches (none in the first)."""
    elems = sum(sizes)
    if world <= 1 or elems == 0:
        return FsdpKernels((), ())
    wire = reduce_bytes or item
    precast = (cast_call(shard_elems, "float32", FLOAT32, item),) if item < FLOAT32 else ()
    bwd = [*precast, KernelCall("concat.fwd", (1, 1, *sizes), dtype, "", 0, 2 * elems * item)]
    if wire != item:
        bwd.append(cast_call(elems, dtype, item, wire))
    wire_dtype = "float32" if wire == FLOAT32 else dtype
    if predivide_factor(world) > 1:
        bwd.append(scale_call(elems, wire_dtype, wire))
    if postdivide_factor(world) > 1:
        bwd.append(scale_call(shard_elems, wire_dtype, wire))
    later = shard_elems * (micro_batches - 1) // micro_batches
    if later:
        bwd.append(KernelCall("add.fwd", (later,), wire_dtype, "", later, 3 * later * wire))
    return FsdpKernels(precast, tuple(bwd))


def fsdp_prep_s(compute: ComputeModel, wshapes: dict, replicas: dict[str, int], dtype: str, opt: Optimizer,
                micro_batches: int) -> tuple[float, float]:
    """(forward, backward) seconds of PyTorch FSDP's own kernels on a layer's weights in one
    micro-batch (costmodel.layer.fsdp) where the optimiser runs as it (``Optimizer.fsdp_kernels``:
    full sharding, the gradients reduce-scattered in every micro-batch); else none."""
    if not (opt.fsdp_kernels and wshapes):
        return 0.0, 0.0
    world = max(replicas.values())
    sizes = tuple(prod(s) for s in wshapes.values())
    shard = sum(-(-prod(s) // replicas[n]) for n, s in wshapes.items())
    got = fsdp_kernels(sizes, shard, world, dtype, DTYPE_BYTES.get(dtype, 4), opt.reduce_bytes, micro_batches)
    return sum(compute.call_s(c) for c in got.fwd), sum(compute.call_s(c) for c in got.bwd)


def fsdp_grad_copy(wshapes: dict, itemsize: int, opt: Optimizer) -> int:
    """Under :func:`fsdp_prep_s`'s FSDP, the whole gradient's copy in the reduce dtype, while the
    layer's backward reduces it (costmodel.layer.fsdp: ``grad.to(reduce_dtype)``); else 0."""
    wire = opt.reduce_bytes or itemsize
    if not opt.fsdp_kernels or wire == itemsize:
        return 0
    return sum(prod(s) for s in wshapes.values()) * wire
