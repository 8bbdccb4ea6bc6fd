"""The optimiser a step runs and how its state is sharded (pure).

``name``: ``sgd`` (no state), ``momentum`` (one float32 value per parameter, the default and what
the executor runs) or ``adam`` (two). ``zero``: the ZeRO stage (Rajbhandari et al., "ZeRO: Memory
Optimizations Toward Training Trillion Parameter Models", SC20, sections 5 and 7), sharding over
the ranks that hold replicas of the same weight shard (the data-parallel group of that weight):

=====  ======================================================  ===========================================
stage  sharded over the replicas                               collectives per weight (n its bytes)
=====  ======================================================  ===========================================
0      nothing                                                 allreduce(n) after backward
1      optimiser state and float32 master weights              reduce-scatter(n), update, allgather(n)
2      and the gradients                                       the same
3      and the weights themselves                              allgather(n) before forward and before
                                                               backward, reduce-scatter(n) after backward
=====  ======================================================  ===========================================

Stages 1 and 2 move what an allreduce moves (the paper's 2 Psi); stage 3 moves 1.5 times that
(3 Psi, section 7.2.2). The optimiser updates only the local shard of each weight from stage 1 on.
Stage 3 gathers a layer's whole weights while its passes run (a transient), stage 2 its whole
gradient while its backward runs.

How the framework reduces the gradients, where it differs from the weights' own precision and
from once a step: ``reduce_bytes``, the bytes an element of the gradient has on the wire (4 where
the reduction runs in float32 under 16-bit weights: PyTorch FSDP's ``MixedPrecision(reduce_dtype=
torch.float32)``, Composer's ``mixed_precision: DEFAULT``; 0: the weights' own); ``grad_bytes``, the
bytes an element of the gradient is accumulated and held in (4 where the framework keeps a float32
gradient buffer under 16-bit weights: Megatron-Core's ``main_grad``, which Megatron-LM keeps under
``--bf16`` unless told ``--grad-reduce-in-bf16``, megatron/training/arguments.py at d98e8a64; the
update then reads it; 0: the weights' own); ``reduce_each_micro``,
the reduction (reduce-scatter or allreduce) run in every micro-batch's backward rather than once a
step after the last (FSDP without ``no_sync``, as Composer's trainer runs it: its ``no_sync`` context
is DDP's only); None, the default, is the stage's own (:attr:`Optimizer.reduces_each_micro`): from
stage 2 on every micro-batch, as the gradients are held sharded (DeepSpeed's ZeRO-2 and -3 reduce
in every micro-batch's backward, PyTorch FSDP unless told ``no_sync``: torchtitan's trainer
accumulates without it, torchtitan/trainer.py at b5bcd76); stages 0 and 1 once a step, the whole
gradient accumulated in place (DDP's ``no_sync``, Megatron-Core's distributed optimiser). ``update_bytes``: what the update moves per weight element where the framework's
optimiser is not one fused pass (:func:`unfused_adamw_bytes`); 0: the fused step's
(``costmodel.compute.model.update_bytes``). ``torch_fsdp``: the sharding is PyTorch FSDP's flat
parameters (ZeRO-3, the gradients reduced in every micro-batch): its own kernels on each unit's
parameters and gradients (the 16-bit copy cast from the float32 shard, the gradient concatenated,
cast to the reduce dtype and divided) run in the passes (costmodel.layer.fsdp).
"""

from __future__ import annotations

from dataclasses import dataclass

from networks.errors import DnnplanError, short

#: float32 values the optimiser keeps per parameter
STATE_SLOTS = {"sgd": 0, "momentum": 1, "adam": 2}
ZERO_STAGES = (0, 1, 2, 3)


@dataclass(frozen=True)
class Optimizer:
    name: str = "momentum"
    zero: int = 0
    reduce_bytes: int = 0  # a gradient element's bytes on the wire; 0: the weights' own (module docstring)
    reduce_each_micro: bool | None = None  # the reduction in every micro-batch's backward, not once a step; None: the stage's
    update_bytes: int = 0  # bytes a weight element's update moves; 0: the fused step's (costmodel.compute.model.update_bytes)
    grad_bytes: int = 0  # bytes a gradient element is accumulated and held in; 0: the weights' own (module docstring)
    torch_fsdp: bool = False  # PyTorch FSDP's own kernels priced (module docstring; costmodel.layer.fsdp)

    def __post_init__(self):
        if self.name not in STATE_SLOTS:
            raise DnnplanError(f"unknown --optimizer {short(self.name)}", hint=f"use one of {', '.join(STATE_SLOTS)}")
        if self.zero not in ZERO_STAGES:
            raise DnnplanError(f"--zero {short(self.zero)} is not a ZeRO stage", hint="use 0, 1, 2 or 3")
        if self.reduce_bytes not in (0, 2, 4):
            raise DnnplanError(f"gradient reduction of {short(self.reduce_bytes)} bytes an element",
                               hint="use 2 (16-bit), 4 (float32) or 0 (the weights' own)")
        if self.grad_bytes not in (0, 2, 4):
            raise DnnplanError(f"gradients held in {short(self.grad_bytes)} bytes an element",
                               hint="use 2 (16-bit), 4 (float32) or 0 (the weights' own)")

    @property
    def reduces_each_micro(self) -> bool:
        """Whether the gradients are reduced in every micro-batch's backward (module docstring):
        ``reduce_each_micro`` where given, else from stage 2 on, where the gradients are sharded."""
        return self.zero >= 2 if self.reduce_each_micro is None else self.reduce_each_micro

    @property
    def fsdp_kernels(self) -> bool:
        """PyTorch FSDP's own kernels run in every micro-batch's passes (module docstring): its
        flat parameters fully sharded, the gradients reduce-scattered in every micro-batch."""
        return self.torch_fsdp and self.zero == 3 and self.reduces_each_micro

    @property
    def slots(self) -> int:
        return STATE_SLOTS[self.name]

    @property
    def label(self) -> str:
        return self.name + (f", ZeRO-{self.zero}" if self.zero else "") + (
            ", float32 gradients" if self.grad_bytes == 4 and self.reduce_bytes == 4 else "")


def unfused_adamw_bytes(weight_bytes: int = 4, grad_bytes: int = 4, clip: bool = True) -> int:
    """Bytes per weight element of AdamW run as one elementwise kernel per tensor operation, as
    Composer's ``DecoupledAdamW`` (composer/optim/decoupled_weight_decay.py ``adamw``, a loop over
    parameters with in-place torch ops) does, on float32 state: each op reads its operands and
    writes its result once: ``param.mul_`` (decay: 2 w), ``exp_avg.mul_`` (8), ``.add_(grad)``
    (8 + g), ``exp_avg_sq.mul_`` (8), ``.addcmul_(grad, grad)`` (8 + g), ``exp_avg_sq.sqrt()``
    (8), ``/ sqrt(bias_correction2)`` (8), ``.add_(eps)`` (8), ``param.addcdiv_(exp_avg, denom)``
    (2 w + 8). With ``clip``, gradient clipping by norm first (``clip_grad_norm_``: the norm reads
    the gradient, the scaling reads and writes it: 3 g). Float32 weights and gradients (FSDP's
    sharded float32 parameters, gradients reduced in float32): 100 bytes, where the fused
    mixed-precision step moves 28."""
    w, g = weight_bytes, grad_bytes
    return 2 * w + 8 + (8 + g) + 8 + (8 + g) + 8 + 8 + 8 + (2 * w + 8) + (3 * g if clip else 0)


def as_optimizer(value: "Optimizer | str") -> Optimizer:
    """An :class:`Optimizer` from itself or an optimiser name (ZeRO stage 0)."""
    return value if isinstance(value, Optimizer) else Optimizer(value)
