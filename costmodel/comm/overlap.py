"""Which collectives overlap compute, as the frameworks schedule them (pure).

Every collective a layer runs (``costmodel.layer.comms.Comm``) has its link time, what its messages take, and
its exposed time, what the step waits for; the step adds the exposed times
(docs/costmodel.md, "Overlap"). One rule per purpose, under a mode a user picks (``--overlap``):

* ``none``: everything in the critical path: the weights' gradients reduced layer by layer after
  the backward pass, ZeRO's gathers before the pass that needs them (what the dnnplan executor
  runs, and so the default on its CPU machine).
* ``data`` (the default on GPU machines, as PyTorch DDP and FSDP run by default): the weights'
  gradient reduction in buckets (DDP's ``bucket_cap_mb`` 25 MB, in reverse order of the
  parameters, each bucket's reduction started as soon as its gradients are made; Megatron-Core's
  ``--overlap-grad-reduce``) hides under the backward pass; ZeRO-3's parameter gathers under the
  forward and backward passes (FSDP's forward and backward prefetch), ZeRO-1/2's gather of the
  updated shards under the next forward (Megatron-Core's ``--overlap-param-gather``). The bucket
  made last, the gradients of the layers at the network's front (``front_layers``), has no
  backward left to hide under: its reduction is exposed; so are those layers' forward gathers,
  which nothing runs before. Under gradient accumulation only the last micro-batch's backward
  overlaps the reduction (the others run under ``no_sync``): the window is one micro-batch's.
* ``all``: ``data`` and tensor-parallel communication overlapped with the GEMMs that produce or
  consume it (Megatron-Core's ``--tp-comm-overlap``, Transformer Engine's userbuffers: the
  all-gather and reduce-scatter (or all-reduce) of a linear or attention layer pipelined with
  chunks of its GEMM).
* ``+experts`` after a mode (``data+experts``, ``all+experts``): the expert-parallel all-to-alls
  of one micro-batch hidden under another's opposite pass, Megatron-Core's combined 1F1B schedule
  (``--overlap-moe-expert-parallel-comm``, megatron/core/pipeline_parallel/combined_1f1b.py: each
  layer's forward of one micro-batch co-scheduled with its backward of another, "EP A2A in forward
  step is hidden by the attention/mlp computation in the backward step, and vice versa"): a
  forward dispatch or combine shares the MoE layer's backward compute as its window, a backward
  one its forward compute (the layer's own, as every window here: the attention beside it is not
  counted, so this errs exposed). The schedule pairs passes of different micro-batches, so the
  passes it runs alone hide nothing: without a pipeline the first micro-batch's forward and the last
  one's backward ("executed alone, no a2a overlapping": combined_1f1b_schedule_for_no_pipelining,
  NVIDIA/Megatron-LM megatron/core/pipeline_parallel/combined_1f1b.py at 00caa53), in a pipeline its
  warm-up forwards and cool-down backwards (:func:`unpaired_passes`); what those passes' all-to-alls
  would have hidden (:func:`hidden_expert_s`) is exposed once a step (``StepPrediction.step_s``,
  ``costmodel.step.pipeline.StagePrediction.once_s``).

Per layer, the collectives that overlap a pass share that pass's compute as their window (the
next layer's in the schedule, taken equal to the layer's own: a stack of equal blocks): together
they are exposed by ``max(0, link - window)``, shared in proportion to their link times. So a
layer never takes less than its compute or than its communication alone, nor does the step; the
model assumes the two do not slow each other (no contention for memory bandwidth or SMs) unless a
framework states an efficiency ``e`` for the overlap (``Overlap.efficiency``, from a framework
file: the share of the hideable time its implementation hides): then each collective is exposed by
``link_c (1 - e_c min(link, window) / link)``, never less than with ``e = 1``. The solver's
objective stays the predicted step: the overlap is in each layer's own cost.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from networks.errors import DnnplanError, short
from networks.ir import DTYPE_BYTES, Network
from networks.ops.base import prod

MODES = ("none", "data", "all")
#: the suffix of a mode that also overlaps the expert all-to-alls (module docstring)
EXPERTS = "+experts"
#: PyTorch DDP's ``bucket_cap_mb`` default (torch.nn.parallel.DistributedDataParallel), in bytes
DEFAULT_BUCKET_BYTES = 25 * 2 ** 20
#: what separates a mode from its bucket in MiB in :attr:`Overlap.spec`
BUCKET_MARK = "@"
#: the collectives tensor parallelism adds (costmodel.comm.tensor) and the ops whose GEMMs hide them
TENSOR_PURPOSES = frozenset({"partial_sum", "input_grad", "output_grad", "input_gather"})
GEMM_OPS = frozenset({"linear", "attention"})
#: the expert split's all-to-alls (costmodel.comm.expert)
EXPERT_PURPOSES = frozenset({"dispatch", "combine", "combine_grad", "dispatch_grad"})


@dataclass(frozen=True)
class Overlap:
    mode: str = "none"
    bucket_bytes: int = DEFAULT_BUCKET_BYTES
    experts: bool = False  # the expert all-to-alls under another micro-batch's opposite pass
    #: per overlap (``data``, ``tensor``, ``experts``), the share of the hideable time hidden (a
    #: framework's; 1 where it names none)
    efficiency: tuple[tuple[str, float], ...] = ()

    def efficiency_of(self, purpose: str) -> float:
        """The efficiency of the overlap a collective of ``purpose`` hides under."""
        which = ("tensor" if purpose in TENSOR_PURPOSES else "experts" if purpose in EXPERT_PURPOSES else "data")
        return dict(self.efficiency).get(which, 1.0)

    @property
    def spec(self) -> str:
        """The mode as ``--overlap`` writes it (``all+experts``), and a bucket other than the
        default after an ``@`` in MiB (``data@76``: ``--bucket-mb 76``), as a plan file records it
        (``none`` reduces no bucket: none is written)."""
        bucket = ("" if self.bucket_bytes == DEFAULT_BUCKET_BYTES or not self.data
                  else f"{BUCKET_MARK}{self.bucket_bytes / 2 ** 20:g}")
        return self.mode + (EXPERTS if self.experts else "") + bucket

    @property
    def data(self) -> bool:
        return self.mode in ("data", "all")

    @property
    def tensor(self) -> bool:
        return self.mode == "all"

    @property
    def label(self) -> str:
        """What the mode overlaps, in the words of the output's assumptions line."""
        if not self.data:
            return ("weight gradients all-reduced layer by layer after the backward pass, from ZeRO-2 on "
                    "reduce-scattered in it (no bucketing, no overlap with compute)")
        out = (f"weight gradients reduced in {self.bucket_bytes / 2 ** 20:g} MiB buckets overlapped with the "
               "backward pass (the last bucket exposed; under accumulation the last micro-batch's backward only, "
               "from ZeRO-2 on every micro-batch's); ZeRO parameter gathers overlapped with forward and backward")
        out += ("; tensor-parallel collectives overlapped with their GEMMs" if self.tensor
                else "; tensor-parallel collectives not overlapped")
        return out + ("; expert all-to-alls overlapped with another micro-batch's opposite pass" if self.experts
                      else "")


def default_overlap(machine) -> Overlap:
    """``data`` on GPU machines (what PyTorch DDP and FSDP do by default), ``none`` on the CPU,
    whose executor (dnnplan's) overlaps nothing."""
    return Overlap("none" if machine.device.kind == "cpu" else "data")


def resolve_overlap(overlap, machine) -> Overlap:
    """``overlap`` as an :class:`Overlap`: None (or "") is the machine's default, a string a mode
    (``--overlap``; one clear line for an unknown one)."""
    if not overlap:
        return default_overlap(machine)
    if isinstance(overlap, Overlap):
        return overlap
    text, mark, mib = overlap.partition(BUCKET_MARK)
    mode, experts = (text[:-len(EXPERTS)], True) if text.endswith(EXPERTS) else (text, False)
    if mode not in MODES:
        raise DnnplanError(f"unknown --overlap {short(str(overlap))}",
                           hint=f"use one of {', '.join(MODES)}, optionally with {EXPERTS} (all{EXPERTS})")
    return Overlap(mode, _bucket_bytes(mib, overlap) if mark else DEFAULT_BUCKET_BYTES, experts)


def overlap_with_bucket(overlap: str | None, machine, bucket_mb: float | None) -> Overlap:
    """``--overlap`` and ``--bucket-mb`` together: the mode (None: the machine's default) with the
    bucket given in MiB, else the mode's own (its ``@MiB``, or DDP's default)."""
    got = resolve_overlap(overlap, machine)
    return got if bucket_mb is None else dataclasses.replace(got, bucket_bytes=max(1, int(bucket_mb * 2 ** 20)))


def _bucket_bytes(mib: str, overlap: str) -> int:
    """The bucket of a spec's ``@MiB`` in bytes (one clear line for anything but a positive size)."""
    try:
        size = float(mib)
    except ValueError:
        size = 0.0
    if not 0 < size < 1e9:
        raise DnnplanError(f"bad gradient bucket in overlap {short(overlap)}: expected MiB after '{BUCKET_MARK}'",
                           hint=f"write e.g. data{BUCKET_MARK}25, or pass --bucket-mb")
    return max(1, int(size * 2 ** 20))


def front_layers(net: Network, bucket_bytes: int) -> frozenset[str]:
    """The layers whose gradients fill the bucket the backward pass makes last: those with weights
    from the network's first, in order, until their (whole, unsharded) weights reach
    ``bucket_bytes``, the layer that crosses it included (a parameter larger than a bucket is a
    bucket of its own, as in DDP)."""
    out, total = [], 0
    for layer in net.layers:
        if not layer.weights:
            continue
        out.append(layer.name)
        total += sum(prod(shape) for _, shape in layer.weights) * DTYPE_BYTES.get(layer.dtype, 4)
        if total >= bucket_bytes:
            break
    return frozenset(out)


def window_of(comm, overlap: Overlap, front: bool, gemm: bool) -> str | None:
    """The pass whose compute ``comm`` hides under (``"fwd"``, ``"bwd"``), or None: exposed (module
    docstring). A context-parallel ring's keys and values hide by their own algorithm (costmodel.comm.context)."""
    if comm.purpose == "grad_sync":
        return "bwd" if overlap.data and not front else None
    if comm.purpose == "param_gather" and overlap.data:
        if comm.phase == "bwd":
            return "bwd"
        return None if front else "fwd"  # ZeRO-3 before forward, ZeRO-1/2 the updated shards under the next forward
    if comm.purpose in TENSOR_PURPOSES and overlap.tensor and gemm:
        return comm.phase if comm.phase in ("fwd", "bwd") else None
    if comm.purpose in EXPERT_PURPOSES and overlap.experts:
        return {"fwd": "bwd", "bwd": "fwd"}.get(comm.phase)
    return None


def overlapped(comms, layer, windows: dict[str, float], overlap: Overlap, front: bool) -> tuple:
    """``comms`` with each one's exposed time under ``overlap`` (module docstring): those that hide
    under a pass share its compute ``windows[pass]`` in proportion to their link times; the others
    are exposed whole. Their link times are kept (``Comm.link_s``), so it can be applied again with
    other windows (another algorithm's passes)."""
    gemm = layer.op in GEMM_OPS
    where = [window_of(c, overlap, front, gemm) for c in comms]
    link = {w: sum([c.link_time for c, x in zip(comms, where) if x == w]) for w in ("fwd", "bwd") if w in where}
    out = []
    for c, w in zip(comms, where):
        if c.purpose == "kv" or (w is None and c.link_s is None):  # exposed whole: as it is
            out.append(c)
        elif w is None:
            out.append(c.timed(c.link_s, None))
        else:
            share = max(0.0, link[w] - windows[w]) / link[w] if link[w] > 0 else 0.0
            eff = overlap.efficiency_of(c.purpose) if overlap.efficiency else 1.0
            if eff < 1.0 and link[w] > 0:  # a framework's overlap hides only a share of what it could
                share = 1.0 - eff * min(link[w], windows[w]) / link[w]
            out.append(c.timed(c.link_time * share, c.link_time))
    return tuple(out)


def hidden_expert_s(layers, phase: str) -> float:
    """The expert all-to-alls of one micro-batch's ``phase`` pass (``"fwd"``, ``"bwd"``) hidden under
    another micro-batch's opposite pass (``+experts``): their link time less their exposed time,
    over ``layers`` (LayerPrediction-like: ``.layer.comms``)."""
    return sum(c.link_time - c.seconds for x in layers for c in x.layer.comms
               if c.purpose in EXPERT_PURPOSES and c.phase == phase)


def unpaired_passes(stages: int, s: int, micro_batches: int, chunks: int, warm_up: int) -> int:
    """Passes of each kind (forwards; as many backwards) device ``s`` runs alone under Megatron-Core's
    combined 1F1B schedule (module docstring): its ``warm_up`` forwards (the schedule's, 0 without a
    pipeline) and one more, whose backward partner does not exist yet (the interleaved schedule
    adds that one to its warm-up when ``overlap_moe_expert_parallel_comm`` is set,
    megatron/core/pipeline_parallel/schedules.py), at most every pass of the step; the cool-down
    runs as many backwards alone."""
    return min(warm_up + 1, micro_batches * chunks)

