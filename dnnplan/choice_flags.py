"""The training choices' flags (costmodel.choices.training.TrainingChoices) as a command takes them:
:func:`takes_choices` puts the flags a command names in place of its ``choices`` parameter and
hands it one :class:`TrainingChoices`, the flags the user gave recorded as ``given``. Each flag is
defined once in :mod:`dnnplan.options`."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

from typer._click.globals import get_current_context  # typer >= 0.29 (pyproject) carries its own click
from typer._click.core import ParameterSource

from costmodel.choices.training import TrainingChoices
from dnnplan.options import (AttentionOpt, BatchNormOpt, BucketOpt, Fp8ParamsOpt, FrameworkOpt, GradFp32Opt,
                             MoeDispatchOpt, OptimizerOpt, OverlapOpt, PrecisionOpt, SeqOpt, ZeroOpt)

#: The flag of each training choice (costmodel.choices.training.TrainingChoices), with its default
#: on the command line (None: the choice's own default, said in the flag's help). A command takes
#: the ones it names with :func:`takes_choices`; a new choice is a field there and a line here.
CHOICE_FLAGS: dict[str, tuple[Any, Any]] = {
    "precision": (PrecisionOpt, "fp32"),
    "optimizer": (OptimizerOpt, "momentum"),
    "zero": (ZeroOpt, 0),
    "overlap": (OverlapOpt, ""),
    "bucket_mb": (BucketOpt, None),
    "batch_norm": (BatchNormOpt, None),
    "moe_dispatch": (MoeDispatchOpt, None),
    "attention": (AttentionOpt, ""),
    "seq": (SeqOpt, None),
    "framework": (FrameworkOpt, "ideal"),
    "fp8_params": (Fp8ParamsOpt, None),
    "grad_fp32": (GradFp32Opt, None),
}


def takes_choices(*names: str) -> Callable[[Callable], Callable]:
    """A command taking the flags of the training choices ``names`` (:data:`CHOICE_FLAGS`) in place
    of its parameter ``choices``, which it receives as one :class:`TrainingChoices` built from them,
    the ones the user gave recorded as ``given``."""
    def decorate(command: Callable) -> Callable:
        signature = inspect.signature(command, eval_str=True)
        params = list(signature.parameters.values())
        at = [p.name for p in params].index("choices")
        flags = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=CHOICE_FLAGS[name][0],
                                   default=CHOICE_FLAGS[name][1]) for name in names]
        params[at:at + 1] = flags

        @functools.wraps(command)
        def run(*args, **kwargs):
            named = {name for name in names if name in kwargs}  # called from Python: what the call names
            values = {name: kwargs.pop(name, CHOICE_FLAGS[name][1]) for name in names}
            click = get_current_context(silent=True)
            given = frozenset(name for name in names if name in named and (
                click is None or click.get_parameter_source(name) not in (ParameterSource.DEFAULT, None)))
            kwargs["choices"] = TrainingChoices(**{k: v for k, v in values.items() if v is not None}, given=given)
            return command(*args, **kwargs)

        run.__signature__ = signature.replace(parameters=params)
        run.__annotations__ = {p.name: p.annotation for p in params} | {"return": signature.return_annotation}
        return run
    return decorate
