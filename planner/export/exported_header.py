"""The line `dnnplan export` writes at the top of a launch file, and reads back (pure): the plan's
predicted step, the framework it was priced under (where not the default), its devices and its
machine.

A Megatron-LM launch script states no world size of its own (torchrun's ``--nnodes`` is the
user's), and no launch file names the machine or the framework dnnplan priced; the exported file's
first line does, so `dnnplan predict --from` a file dnnplan wrote predicts it on the devices and
machine it was planned for without ``--devices`` or ``--machine`` (which, given, still decide; the
file's own settings, where it states a world size, come first), under the framework it was planned
under, and says so where its step is not the one the line states (a plan priced from a profile not
given again). The line after it names the plan the file was exported from and its network: where
that plan is found (from the file's folder or the working folder), a file that names no network and
trains none of the zoo's, as a network spec or Hugging Face config imported and planned does, is
predicted on the plan's network.
"""

from __future__ import annotations

import re
from typing import NamedTuple

#: the line, as the exporter writes it (``# dnnplan: ...``: a comment in a script and in TOML)
LINE = "# dnnplan: predicted step {step_s:.4g} s{under} on {devices} devices of {machine}"
#: where :func:`written_for`'s devices and machine were read, in words
WHERE = "the file's dnnplan line"
#: the machine to the line's end: a machine YAML's path may hold spaces
_PATTERN = re.compile(r"#\s*dnnplan: predicted step (\S+) s(?: under (\S+))? on (\d+) devices of (\S.*?)\s*$")
#: the lines at the top of a file where the line is looked for
_TOP = 5


#: the line after it: the plan the file was exported from (its path from the file's folder, where the
#: file is written; else as the export command was given it), and the plan's network
FROM_LINE = "# from {plan} ({network}); {names} as in {source}"
#: "PLAN (NETWORK" of the line: up to its last "); " (the names and source after it hold none)
_FROM = re.compile(r"#\s*from (.+)\); ")


class Written(NamedTuple):
    """What a file's dnnplan line states: the devices and machine it was planned for, its step as
    written (four significant digits) and the framework it was priced under (None: the default);
    and the next line's plan it was exported from and that plan's network's name, as ``PLAN (NETWORK``
    (None: no such line; :meth:`origins` splits it)."""

    devices: int
    machine: str
    step_s: float | None = None
    framework: str | None = None
    origin: str | None = None

    def origins(self) -> list[tuple[str, str]]:
        """The (plan, network name) pairs the next line may state, the plan's path shortest first:
        either may hold " (" (a folder "runs (v2)", a network imported from "Llama (copy)"), so each
        split is a candidate, for the caller to keep the one whose plan is there and names that network."""
        text = self.origin or ""
        return [(text[:i], text[i + 2:]) for i in range(len(text)) if text.startswith(" (", i) and i and text[i + 2:]]


def header_line(step_s: float, devices: int, machine: str, framework: str | None = None) -> str:
    """The line the exporter writes for a plan of ``devices`` devices of ``machine``, priced under
    ``framework`` (None: the default, not written; nor a framework file, whose path need not hold
    where the launch file is read: reading it back then says its step differs)."""
    under = f" under {framework}" if framework and re.fullmatch(r"[\w.-]+", framework) \
        and not framework.endswith((".yaml", ".yml")) else ""
    return LINE.format(step_s=step_s, under=under, devices=devices, machine=machine)


def from_line(plan: str, network: str, names: str, source: str) -> str:
    """The line naming the plan the file is exported from (``plan``, its path as given), its network's
    name, and where the file's ``names`` (options, keys) are read (``source``)."""
    return FROM_LINE.format(plan=plan, network=network, names=names, source=source)


def written_for(text: str) -> Written | None:
    """What the file's dnnplan line (and the line after it) states, or None (no such line at its top)."""
    lines = text.splitlines()[:_TOP]
    for i, line in enumerate(lines):
        found = _PATTERN.match(line.strip())
        if found:
            try:
                step_s = float(found.group(1))
            except ValueError:
                step_s = None
            origin = _FROM.match(lines[i + 1].strip()) if i + 1 < len(lines) else None
            return Written(int(found.group(3)), found.group(4), step_s, found.group(2),
                           origin.group(1) if origin else None)
    return None


def same_step(step_s: float, written_s: float) -> bool:
    """Whether ``step_s`` is the step the line wrote as ``written_s`` (its four significant digits)."""
    return f"{step_s:.4g}" == f"{written_s:.4g}"
