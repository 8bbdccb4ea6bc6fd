"""Dropout in a captured step (kernels.cuda.elementwise), against the recording CuPy double: the
forward pass reads its seed's step from a counter in device memory, 0 in eager steps, and the
capture launches the counter's advance inside the step, so each replay draws new masks."""

from __future__ import annotations

import numpy as np

from kernels.cuda import elementwise
from tests.support.doubles.fake_cupy import FakeCupy


def test_the_mask_reads_the_device_counter_which_only_an_advance_moves(monkeypatch):
    seen = []
    models = {"dropout_fwd": lambda grid, block, args, dtype: seen.append(args),
              "step_advance": lambda grid, block, args, dtype: args[0].__iadd__(1)}
    cp = FakeCupy(models).install(monkeypatch)
    cp.uint64 = np.uint64
    monkeypatch.setattr(elementwise, "_STEP", {})
    x = cp.ascontiguousarray(np.ones(64, np.float32))
    elementwise.dropout_forward(x, 0.5, 1234, fallback=None)
    elementwise.dropout_forward(x, 0.5, 1234, fallback=None)
    assert [int(args[4][0]) for args in seen] == [0, 0]  # eager steps: the host's seed alone
    elementwise.advance_dropout_step()
    elementwise.dropout_forward(x, 0.5, 1234, fallback=None)
    assert int(seen[-1][4][0]) == 1 and int(seen[-1][5]) == 1234  # same host seed, the next step's mask
    assert cp.kernels().count("step_advance") == 1
