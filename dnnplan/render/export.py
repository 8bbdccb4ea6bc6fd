"""A plan exported for a framework, as the shell command that launches it (`dnnplan export`)."""

from __future__ import annotations

import shlex

from dnnplan.render.console import Console
from planner.plan.plan import Plan

console = Console(highlight=False, soft_wrap=True)

#: the launcher line: torchrun on every node, its nodes and devices a node the user's to set
LAUNCHER = 'torchrun --nnodes "$NNODES" --nproc-per-node "$GPUS_PER_NODE"'


def launch_script(plan: Plan, plan_path: str, script: str, args: list[str], source: str) -> str:
    """The plan's prediction as a comment (when it carries one), what is left to set, and the launcher
    with ``script`` and one flag (and its values, shell-quoted) a line, each line but the last
    continued by a backslash."""
    lines = []
    if plan.step_s > 0:
        lines.append(f"# dnnplan: predicted step {plan.step_s:.4g} s on {plan.devices} devices of {plan.machine}")
    lines.append(f"# from {plan_path} ({plan.network_name}); option names as in {source}")
    lines.append(f"# set NNODES x GPUS_PER_NODE = {plan.devices}, and add the data, tokenizer and checkpoint arguments")
    flags: list[list[str]] = []
    for arg in args:
        if arg.startswith("--") or not flags:
            flags.append([arg])
        else:
            flags[-1].append(shlex.quote(arg))
    command = [f"{LAUNCHER} {script}"] + ["    " + " ".join(flag) for flag in flags]
    return "\n".join(lines + [" \\\n".join(command)]) + "\n"


def show(text: str) -> None:
    console.print(text, markup=False, emoji=False, end="")


def wrote_line(out: str, framework: str, count: int) -> None:
    console.print(f"wrote {out} ({framework}: {count} arguments)", markup=False, emoji=False)
