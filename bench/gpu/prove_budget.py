"""What the GPU proof runs in one call: its stages in priority order, each with the most seconds it
may take, kept while their sum fits the budget; the others are skipped before anything runs, each
with why (bench/gpu/prove.py writes them to details.json and prove.log). And what each stage needs
installed, checked up front (:func:`missing_packages`).

Pure: no process, no clock (tests/gpu/test_gpu_prove.py checks the sums).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Callable, Sequence

#: Seconds of the call kept for what runs outside the stages (the packages, the log, the JSON)
RESERVE_S = 15.0


@dataclass(frozen=True)
class Stage:
    """One stage: ``limit_s`` bounds it (its commands share it); ``needs``: import names it cannot
    run without."""

    name: str
    limit_s: float
    needs: tuple[str, ...] = ()


#: Every dnnplan command (profile, plan, execute, validate) imports these (pyproject's dependencies,
#: the GPU extras)
DNNPLAN = ("numpy", "yaml", "mpi4py", "pulp", "highspy", "typer", "rich", "pydantic", "threadpoolctl", "cupy",
           "cudnn")
#: PyTorch eager's steps (bench/gpu/torch_steps.py)
TORCH = ("torch", "torchvision")
#: The GPU tests (``pytest -m gpu``); pytest-timeout (``pytest_timeout``) is used when present
TESTS = ("pytest",) + DNNPLAN


def missing_packages(stages: Sequence[Stage], have: Callable[[str], bool] | None = None) -> dict[str, list[str]]:
    """Stage name -> the import names it needs that cannot be imported here (none: left out)."""
    have = have or (lambda name: importlib.util.find_spec(name) is not None)
    found: dict[str, bool] = {}
    out = {}
    for stage in stages:
        for name in stage.needs:
            if name not in found:
                found[name] = have(name)
        lack = [n for n in stage.needs if not found[n]]
        if lack:
            out[stage.name] = lack
    return out


def allot(stages: Sequence[Stage], budget_s: float, missing: dict[str, list[str]] | None = None,
          reserve_s: float = RESERVE_S) -> tuple[list[Stage], list[tuple[str, str]]]:
    """(the stages that run, in order; (stage, why) for each skipped): a stage runs when what it
    needs is installed and its limit fits what the stages before it left of ``budget_s - reserve_s``;
    so the limits of the stages that run never sum past the budget."""
    left = budget_s - reserve_s
    run, skipped = [], []
    for stage in stages:
        lack = (missing or {}).get(stage.name)
        if lack:
            skipped.append((stage.name, f"not installed: {', '.join(lack)} (neither on the machine nor in .whl/)"))
        elif stage.limit_s > left:
            skipped.append((stage.name, f"its {stage.limit_s:.0f} s do not fit the {max(left, 0):.0f} s the budget "
                                        f"has left; run it in another call (--skip, --rows)"))
        else:
            run.append(stage)
            left -= stage.limit_s
    return run, skipped
