"""Shared by the kernel tests (tests/unit/kernels/test_kernels_*.py) and the executor op tests: the
seeded random generator and the directional finite-difference check of a kernel's gradients."""

from __future__ import annotations

import numpy as np
import pytest


RNG = np.random.default_rng


def fd_directional(loss, args, grads, eps=1e-6, seed=0):
    """Check <grad_i, v_i> against a central difference of ``loss`` along random v_i, for each i."""
    rng = RNG(seed)
    for i, g in enumerate(grads):
        if g is None:
            continue
        v = rng.standard_normal(args[i].shape)
        plus = [a + eps * v if j == i else a for j, a in enumerate(args)]
        minus = [a - eps * v if j == i else a for j, a in enumerate(args)]
        fd = (loss(*plus) - loss(*minus)) / (2 * eps)
        assert float(np.sum(g * v)) == pytest.approx(fd, rel=1e-6, abs=1e-9), f"argument {i}"
