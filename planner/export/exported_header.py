"""The line `dnnplan export` writes at the top of a launch file, and reads back (pure): the plan's
predicted step, its devices and its machine.

A Megatron-LM launch script states no world size of its own (torchrun's ``--nnodes`` is the
user's), and no launch file names the machine; the exported file's first line does, so `dnnplan
predict --from` a file dnnplan wrote predicts it on the devices and machine it was planned for
without ``--devices`` or ``--machine`` (which, given, still decide; the file's own settings, where it
states a world size, come first).
"""

from __future__ import annotations

import re

#: the line, as the exporter writes it (``# dnnplan: ...``: a comment in a script and in TOML)
LINE = "# dnnplan: predicted step {step_s:.4g} s on {devices} devices of {machine}"
#: where :func:`written_for`'s devices and machine were read, in words
WHERE = "the file's dnnplan line"
#: the machine to the line's end: a machine YAML's path may hold spaces
_PATTERN = re.compile(r"#\s*dnnplan: predicted step \S+ s on (\d+) devices of (\S.*?)\s*$")
#: the lines at the top of a file where the line is looked for
_TOP = 5


def header_line(step_s: float, devices: int, machine: str) -> str:
    """The line the exporter writes for a plan of ``devices`` devices of ``machine``."""
    return LINE.format(step_s=step_s, devices=devices, machine=machine)


def written_for(text: str) -> tuple[int, str] | None:
    """The devices and machine the file's dnnplan line names, or None (no such line at its top)."""
    for line in text.splitlines()[:_TOP]:
        found = _PATTERN.match(line.strip())
        if found:
            return int(found.group(1)), found.group(2)
    return None
