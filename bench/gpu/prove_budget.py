"""What the GPU proof runs in one call: its stages in priority order, each with the most seconds it
may take; a stage starts only when its limit fits what the stages before it left of the budget
(:func:`admit`), else it is skipped with why (bench/gpu/prove.py writes them to details.json and
prove.log). And what each stage needs installed, checked before anything runs
(:func:`missing_packages`, :func:`allot`).

Pure: no process, no clock (tests/bench/test_bench_gpu_prove.py checks the admission).
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


def allot(stages: Sequence[Stage], missing: dict[str, list[str]] | None = None
          ) -> tuple[list[Stage], list[tuple[str, str]]]:
    """(the stages whose packages are installed, in order; (stage, why) for each of the others),
    before anything runs."""
    run, skipped = [], []
    for stage in stages:
        lack = (missing or {}).get(stage.name)
        if lack:
            skipped.append((stage.name, f"not installed: {', '.join(lack)} (neither on the machine nor in .whl/)"))
        else:
            run.append(stage)
    return run, skipped


def admit(stage: Stage, left_s: float, reserve_s: float = RESERVE_S) -> str | None:
    """Why ``stage`` cannot start with ``left_s`` seconds of the budget left (None: it starts): it
    starts only when its whole limit fits what is left less the reserve, so no stage is cut short
    by the budget and the call ends within it."""
    room = left_s - reserve_s
    if stage.limit_s > room:
        return (f"its {stage.limit_s:.0f} s did not fit the {max(room, 0):.0f} s the budget had left when it came; "
                "run it in another call (--skip, --rows)")
    return None


def grown(stage: Stage, left_s: float, later: Sequence[Stage], reserve_s: float = RESERVE_S) -> Stage:
    """``stage`` given what is left less the reserve and the later stages' limits, when that is more
    than its own limit (the 1-8 device tables take what the others leave)."""
    spare = left_s - reserve_s - sum(st.limit_s for st in later)
    return Stage(stage.name, max(stage.limit_s, spare), stage.needs) if spare > stage.limit_s else stage
