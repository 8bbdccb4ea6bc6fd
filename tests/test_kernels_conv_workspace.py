"""Convolution workspace accounting: the formula equals the buffers each algorithm and pass
allocates (traced), and orders the algorithms sensibly."""

from __future__ import annotations

import numpy as np
import pytest

from conv_cases import CASES, PAIRS, _data
from kernels.conv import (CONV_ALGORITHMS, conv2d_backward_data, conv2d_backward_weights, conv2d_forward,
                          conv_output_hw, conv_workspace_bytes)


# ---------------------------------------------------------------------------------------------
# workspace accounting


def test_im2col_workspace_is_the_column_buffer():
    x, w = np.zeros((3, 5, 9, 8), np.float32), np.zeros((7, 5, 3, 2), np.float32)
    ho, wo = conv_output_hw(9, 8, 3, 2, (2, 1), (0, 0, 0, 0), (1, 1))
    trace: list[int] = []
    conv2d_forward(x, w, None, (2, 1), (0, 0, 0, 0), (1, 1), 1, "im2col", trace=trace)
    cols = 5 * 3 * 2 * 3 * ho * wo * 4
    assert trace == [cols]
    assert conv_workspace_bytes("im2col", x.shape, w.shape, (2, 1), (0, 0, 0, 0), (1, 1), 1, 4) == cols
    # padding adds the padded copy of the input
    padded = 3 * 5 * (9 + 3) * (8 + 1) * 4
    ho, wo = conv_output_hw(9, 8, 3, 2, (2, 1), (1, 2, 0, 1), (1, 1))
    assert conv_workspace_bytes("im2col", x.shape, w.shape, (2, 1), (1, 2, 0, 1), (1, 1), 1, 4) == \
        padded + 5 * 3 * 2 * 3 * ho * wo * 4


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("algo,case", PAIRS)
def test_workspace_formula_equals_traced_buffers(algo, case, dtype):
    xs, ws, s, p, d, gr = CASES[case]
    x, w, _, dy = _data(CASES[case], dtype=dtype)
    isz = np.dtype(dtype).itemsize
    for pass_name, run in (
        ("fwd", lambda t: conv2d_forward(x, w, None, s, p, d, gr, algo, trace=t)),
        ("bwd_data", lambda t: conv2d_backward_data(dy, w, xs, s, p, d, gr, algo, trace=t)),
        ("bwd_weights", lambda t: conv2d_backward_weights(dy, x, ws, s, p, d, gr, algo, trace=t)),
    ):
        trace: list[int] = []
        run(trace)
        expect = conv_workspace_bytes(algo, xs, ws, s, p, d, gr, isz, pass_name=pass_name)
        assert sum(trace) == expect, (pass_name, trace)


def test_workspace_orders_algorithms_sensibly():
    args = ((32, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, 4)
    ws = {a: conv_workspace_bytes(a, *args) for a in CONV_ALGORITHMS}
    assert ws["direct"] < ws["im2col"]            # one shifted slice vs all nine
    assert ws["im2col"] > 9 * 32 * 64 * 56 * 56 * 4 - 1
    with pytest.raises(ValueError):
        conv_workspace_bytes("winograd", (1, 1, 8, 8), (1, 1, 5, 5))
    with pytest.raises(ValueError):
        conv_workspace_bytes("im2col", (1, 1, 8, 8), (1, 1, 3, 3), pass_name="backward")
