"""Running dnnplan and mpiexec as processes of their own, as the tests of stops, faults and ranks do."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT


def dnnplan_env(folder: Path) -> dict:
    """The environment of a ``python -m dnnplan`` child: a profile cache of its own under ``folder``
    and this checkout on its path."""
    return {**os.environ, "DNNPLAN_CACHE": str(folder / "cache"), "PYTHONPATH": str(ROOT)}


def mpiexec_or_skip() -> str:
    """The mpiexec beside this Python (the mpich wheel's), else the one on PATH; the test is skipped
    without one."""
    here = Path(sys.executable).parent / "mpiexec"
    exe = str(here) if here.exists() else shutil.which("mpiexec")
    if exe is None:
        pytest.skip("mpiexec not found")
    return exe
