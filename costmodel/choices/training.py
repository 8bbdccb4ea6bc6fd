"""How the user trains, as one frozen object (pure): :class:`TrainingChoices`.

Every choice of how to train that is not a split of the layers lives here, built once from the
command line's flags (dnnplan.options) or from a plan file (planner.plan.plan_file), and carried
from there by the command's context, the planner's settings and the plan: the precision, the
optimiser and its ZeRO stage, recomputation, overlap and its bucket, batch normalisation's
statistics, the MoE token dispatcher, the attention algorithm, the pipeline schedule, the tokens
per sequence and the framework whose step is priced (Megatron-Core's ``TransformerConfig`` carries
a model's choices to every module likewise).

A new choice is a field here, with its default and its check (``metadata``: the function that
refuses a bad value in one line; ``file``: whether a plan file records it, always or when it is not
the default), a flag in dnnplan.options, and the cost-model code that prices it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Mapping

from costmodel.choices.batch_norm import DEFAULT_BATCH_NORM, check_batch_norm, with_batch_norm
from costmodel.choices.moe_dispatch import DEFAULT_MOE_DISPATCH, check_moe_dispatch, with_moe_dispatch
from costmodel.choices.optimizer import Optimizer
from costmodel.choices.precision import DEFAULT_PRECISION, get_precision, is_fp8, mixed_precision, with_precision
from networks.errors import DnnplanError, short
from networks.ir import DTYPE_BYTES, Network

#: recomputation: ``auto`` the planner weighs it per layer; ``none`` no layer recomputes;
#: ``selective`` attention's core (Korthikanti et al. 2022); ``full`` every layer of a block
RECOMPUTE_CHOICES = ("auto", "none", "selective", "full")
#: the optimiser a network with attention trains with when none is named (:meth:`TrainingChoices.for_network`)
TRANSFORMER_OPTIMIZER = "adam"
#: the framework priced when none is named (a file of costmodel/frameworks: the cost model's fused
#: kernels issued by a host that never holds the device back)
DEFAULT_FRAMEWORK = "ideal"
#: how a plan file records a choice: always, when it is not the default, beside what it qualifies (its
#: own code writes it), or not at all (the plan's layers or pipeline say it)
ALWAYS, NOT_DEFAULT, BESIDE, NEVER = "always", "not default", "beside", "never"


def _precision(name: str) -> str:
    return get_precision(name).name


def _optimizer(name: str) -> str:
    return Optimizer(name).name


def _zero(stage: int) -> int:
    return Optimizer(zero=stage).zero


def _recompute(mode: str) -> str:
    if mode not in RECOMPUTE_CHOICES:
        raise DnnplanError(f"unknown recomputation {short(mode)}", hint="use none, selective, full")
    return mode


def _framework(name: str) -> str:
    """A framework's name or file (costmodel.frameworks.loading reads it and refuses a bad one)."""
    if not isinstance(name, str) or not name.strip():
        raise DnnplanError(f"bad --framework {short(str(name))}", hint="name a shipped framework or a framework YAML")
    return name.strip()


def _any(value: Any) -> Any:
    return value


def _switch(name: str) -> Callable[[Any], bool]:
    """The check of a choice that is on or off (a plan file's ``name: true``)."""
    def check(value: Any) -> bool:
        if not isinstance(value, bool):
            raise DnnplanError(f"{name} takes true or false, got {short(str(value))}", hint="write true or false")
        return value
    return check


def _wide_weights(precision: str) -> bool:
    """Whether the precision keeps the weights in 4 bytes (their gradients then are float32 anyway)."""
    return DTYPE_BYTES.get(get_precision(precision).storage, 4) >= 4


def choice(default: Any, check: Callable[[Any], Any] = _any, file: str = NEVER) -> Any:
    """A field of :class:`TrainingChoices`: its default, the check that refuses a bad value (and
    returns the value as recorded), and whether a plan file records it (``file``)."""
    return field(default=default, metadata={"check": check, "file": file})


@dataclass(frozen=True)
class TrainingChoices:
    """How to train (module docstring). ``given``: the choices the user named (the rest are
    defaults, which a summary says it assumed)."""

    precision: str = choice(DEFAULT_PRECISION, _precision, ALWAYS)
    optimizer: str = choice("momentum", _optimizer, ALWAYS)
    zero: int = choice(0, _zero, ALWAYS)
    #: the per-layer algorithms record what recomputes (``+recompute``), so a plan file holds no mode
    recompute: str = choice("auto", _recompute)
    #: costmodel.comm.overlap's mode, ``""`` for the machine's; once priced on a machine, the mode with
    #: its bucket (``data@25``), as a plan records it beside the step's communication
    overlap: str = choice("", file=BESIDE)
    #: the gradient buckets' size in MiB for the overlap (None: the framework's default); a plan
    #: records it in its overlap's mode
    bucket_mb: float | None = choice(None)
    batch_norm: str = choice(DEFAULT_BATCH_NORM, check_batch_norm, ALWAYS)
    moe_dispatch: str = choice(DEFAULT_MOE_DISPATCH, check_moe_dispatch, NOT_DEFAULT)
    #: attention's kernels, ``""`` for the machine's default (a plan's layers record theirs)
    attention: str = choice("")
    #: the pipeline schedule (a pipelined plan records it with its stages)
    schedule: str = choice("1f1b")
    #: the network's tokens per sequence when given, None for its own (a plan file records it
    #: beside the network it qualifies)
    seq: int | None = choice(None, file=BESIDE)
    #: the framework whose step is priced: a shipped framework's name or a framework file
    #: (costmodel.frameworks); a plan file records one other than the default
    framework: str = choice(DEFAULT_FRAMEWORK, _framework, NOT_DEFAULT)
    #: under fp8, the transformer blocks' GEMM weights kept only in FP8 and gathered in FP8
    #: (Megatron-Core's --fp8-param-gather: no 16-bit copy; costmodel.choices.precision); a plan file
    #: records it where set
    fp8_params: bool = choice(False, _switch("fp8_params"), NOT_DEFAULT)
    #: under 16-bit weights, the gradients accumulated in a float32 buffer and reduced in float32
    #: (Megatron-LM's default under --bf16, accumulate_allreduce_grads_in_fp32: Megatron-Core's
    #: main_grad); off, in the weights' own precision (--grad-reduce-in-bf16, as Megatron-Bridge's
    #: performance recipes run); a plan file records it where set
    grad_fp32: bool = choice(False, _switch("grad_fp32"), NOT_DEFAULT)
    given: frozenset[str] = field(default=frozenset(), compare=False)

    def __post_init__(self):
        for f in fields(self):
            if "check" in f.metadata and getattr(self, f.name) is not None:
                object.__setattr__(self, f.name, f.metadata["check"](getattr(self, f.name)))

    @classmethod
    def from_flags(cls, **values: Any) -> "TrainingChoices":
        """The choices the flags name; a flag left out (None) keeps the default, and ``given``
        records the others."""
        named = {k: v for k, v in values.items() if v is not None}
        return cls(**named, given=frozenset(named))

    def but(self, **values: Any) -> "TrainingChoices":
        """These choices with some replaced (checked as at construction)."""
        return replace(self, **values)

    @property
    def sharded_optimizer(self) -> Optimizer:
        """The optimiser and its ZeRO stage, as the cost model takes them: with ``grad_fp32`` under
        16-bit weights, its gradients held and reduced in float32 (4 bytes an element)."""
        wide = 4 if self.grad_fp32 and not _wide_weights(self.precision) else 0
        return Optimizer(self.optimizer, self.zero, reduce_bytes=wide, grad_bytes=wide)

    @property
    def may_recompute(self) -> bool:
        """Whether a layer may recompute its internals in backward (the planner's candidates)."""
        return self.recompute != "none"

    def for_network(self, net: Network, peaks: Mapping[str, float] | None = None) -> "TrainingChoices":
        """These choices with the defaults a network's kind changes. A network with attention trains
        with Adam unless the optimiser was named (nobody trains a transformer with SGD and momentum,
        and Adam's two moments change which layouts fit), and, on a GPU priced from its datasheet
        (``peaks``, its ``peak_tflops``; None on a CPU or with a profile table, whose precision is its
        own), in the 16-bit mixed precision its tensor cores run (:func:`mixed_precision`: bf16, on a
        V100 fp16) unless the precision was named, as Megatron-LM, torchtitan and DeepSpeed train
        transformers. Other networks keep momentum and float32."""
        if not any(layer.op == "attention" for layer in net.layers):
            return self
        out = self if "optimizer" in self.given else self.but(optimizer=TRANSFORMER_OPTIMIZER)
        half = None if "precision" in self.given or peaks is None else mixed_precision(peaks)
        return out if half is None else out.but(precision=half)

    def marked(self, net: Network) -> Network:
        """``net`` as these choices train it: stored in the precision's format, its batch-norm and
        mixture-of-experts layers marked with their choices (the network a plan's hash is of)."""
        return with_moe_dispatch(with_batch_norm(with_precision(net, self.precision, self.fp8_params),
                                                 self.batch_norm), self.moe_dispatch)

    def as_planned(self, **recorded: Any) -> "TrainingChoices":
        """What a plan holds of these choices: those a plan file records (with ``recorded`` values,
        e.g. the overlap's mode as priced), the others at their defaults (the plan's layers and
        pipeline say them)."""
        kept = {f.name: getattr(self, f.name) for f in fields(self)
                if f.metadata.get("file", NEVER) != NEVER and f.name != "given"}
        return TrainingChoices(**(kept | recorded))

    def idle(self, net: Network) -> list[str]:
        """The choices the user named that change nothing for ``net`` (as these choices mark it:
        :meth:`marked`), each in one line naming its flag and why (a flag left in by mistake is then
        seen, not silently ignored)."""
        ops = {layer.op for layer in net.layers}
        idle = {"precision": (self.precision == "fp8" and not any(is_fp8(layer) for layer in net.layers),
                              f"{net.name} has no transformer block whose GEMMs Transformer Engine runs in FP8: it "
                              "trains as in bf16"),
                "fp8_params": (self.fp8_params and not any(is_fp8(layer) for layer in net.layers),
                               "no layer trains in FP8 (--precision fp8 runs the transformer blocks' GEMMs in it)"),
                "grad_fp32": (self.grad_fp32 and _wide_weights(self.precision),
                              f"under --precision {self.precision} the weights and their gradients are float32 "
                              "already"),
                "moe_dispatch": ("moe" not in ops, f"{net.name} has no mixture-of-experts layer"),
                "batch_norm": ("batchnorm2d" not in ops, f"{net.name} has no batch normalisation"),
                "attention": ("attention" not in ops, f"{net.name} has no attention layer"),
                "bucket_mb": (self.overlap.split("@")[0] == "none", "--overlap none overlaps no gradient bucket"),
                "overlap": ("+experts" in self.overlap and "moe" not in ops,
                            f"{net.name} has no mixture-of-experts layer whose all-to-alls it would hide")}
        return [f"--overlap {self.overlap}: its +experts changes nothing: {why}" if name == "overlap" else
                f"--{name.replace('_', '-')} changes nothing: {why}" if isinstance(getattr(self, name), bool) else
                f"--{name.replace('_', '-')} {getattr(self, name):g} changes nothing: {why}"
                if isinstance(getattr(self, name), float) else
                f"--{name.replace('_', '-')} {getattr(self, name)} changes nothing: {why}"
                for name, (unused, why) in idle.items() if name in self.given and unused]

    def file_entries(self) -> dict[str, Any]:
        """What a plan file records of these choices, in field order (``file`` metadata)."""
        out = {}
        for f in fields(self):
            how = f.metadata.get("file", NEVER)
            value = getattr(self, f.name)
            if how == ALWAYS or (how == NOT_DEFAULT and value != f.default):
                out[f.name] = value
        return out

    @classmethod
    def recorded(cls) -> tuple[str, ...]:
        """The plan-file keys of the choices a plan file may record."""
        return tuple(f.name for f in fields(cls) if f.metadata.get("file", NEVER) != NEVER)
