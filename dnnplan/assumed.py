"""What a command assumed because a flag was not given, in the words its summary says them
(``assumed, the flag not given: ...``) and its JSON lists (``assumed``): `plan` and `predict`."""

from __future__ import annotations

from typing import Callable

from costmodel.choices.precision import DEFAULT_PRECISION
from costmodel.choices.training import TRANSFORMER_OPTIMIZER
from profiler.context import Context

#: the line before the flags assumed
ASSUMED = "assumed, the flag not given: "


def assumed_flags(given: Callable[[str], bool], ctx: Context, *others: Context) -> tuple[str, ...]:
    """The machine, precision, optimiser and batch ``ctx`` took where ``given(name)`` says the flag
    was not given, each with why where the network's kind or a profile table chose it; ``others``:
    the other machines' contexts of a comparison, whose precision may differ (a V100's fp16)."""
    out = []
    for name, flag, value in (("machine", "--machine", ctx.machine.name), ("precision", "--precision",
                              ctx.choices.precision), ("optimizer", "--optimizer", ctx.choices.optimizer),
                              ("batch", "--batch", ctx.batch_rule)):
        if given(name):
            continue
        out.append(f"{flag} {value}" if name != "batch" else f"--batch {ctx.batch} ({value})")
        if name == "optimizer" and value == TRANSFORMER_OPTIMIZER:
            out[-1] += " (a network with attention)"
        if name == "precision" and given("profile"):
            out[-1] += " (the profile table's)"
        elif name == "precision" and value != DEFAULT_PRECISION:
            out[-1] += " (a network with attention on a GPU" + "".join(
                f"; {o.choices.precision} on {o.machine.name}" for o in others
                if o.choices.precision != value) + ")"
    return tuple(out)
