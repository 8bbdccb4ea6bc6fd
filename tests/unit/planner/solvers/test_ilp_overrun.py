"""A HiGHS solve that runs on past its time limit without calling back is left to itself and
counts as stopped (planner/solvers/ilp.py, ``_ThreadedHiGHS.callSolver``)."""

from __future__ import annotations

import threading
import time

import pytest

from planner.solvers import ilp


class _Model:
    """Stands for highspy's model: ignores its time limit and runs until released."""

    def __init__(self):
        self.release = threading.Event()
        self.options = {}

    def setOptionValue(self, key, value):
        self.options[key] = value

    def run(self):
        self.release.wait(30)


class _Lp:
    def __init__(self):
        self.solverModel = _Model()


def test_a_solve_past_twice_its_limit_is_stopped(monkeypatch):
    monkeypatch.setattr(ilp, "OVERRUN_S", 0.2)
    lp = _Lp()
    solver = ilp._ThreadedHiGHS(None, msg=False, timeLimit=0.1)
    start = time.perf_counter()
    with pytest.raises(ilp.Stopped, match="past its"):
        solver.callSolver(lp)
    took = time.perf_counter() - start
    lp.solverModel.release.set()
    assert 0.4 <= took < 3.0  # twice 0.1 s and 0.2 s more, then at most a poll or two
