"""Convolution workspace accounting: the formula equals the buffers each algorithm and pass
allocates (traced), and orders the algorithms sensibly."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from kernels.conv import (CONV_ALGORITHMS, conv2d_backward_data, conv2d_backward_weights, conv2d_forward,
                          conv_output_hw, conv_workspace_bytes)
from networks.ops.conv_geometry import make_geom
from networks.ops.conv_workspace import fft_events, peak

from tests.support.conv_cases import CASES, PAIRS, _data


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
        assert peak(trace) == expect, (pass_name, trace)
        if algo == "fft":  # every buffer, allocated and let go in the order the formula says
            assert trace == [b for b in fft_events(make_geom(xs, ws, s, p, d, gr), pass_name, isz) if b], pass_name


@pytest.mark.parametrize("algo", ["direct", "im2col", "fft"])
def test_the_formula_is_what_numpy_holds_at_the_peak(algo):
    """tracemalloc's peak of each pass against the formula: no hidden copies
    (NumPy's unscaled single-precision FFT held about four more copies of its result; the kernels
    scale it instead) and nothing counted that is let go before the peak."""
    rng = np.random.default_rng(0)
    x = rng.random((16, 6, 14, 14), dtype=np.float32)
    w = rng.random((16, 6, 5, 5), dtype=np.float32)
    dy = rng.random((16, 16, 14, 14), dtype=np.float32)
    args = ((1, 1), (2, 2, 2, 2), (1, 1), 1)
    for pass_name, run in (("fwd", lambda: conv2d_forward(x, w, None, *args, algo)),
                           ("bwd_data", lambda: conv2d_backward_data(dy, w, x.shape, *args, algo)),
                           ("bwd_weights", lambda: conv2d_backward_weights(dy, x, w.shape, *args, algo))):
        run()  # once untraced: NumPy's FFT plans are cached on first use
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            out = run()
            _, top = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        result = (out[0] if isinstance(out, tuple) else out).nbytes
        expect = conv_workspace_bytes(algo, x.shape, w.shape, *args, 4, pass_name=pass_name)
        # the workspace's peak is reached, and at most the result is held beside it
        assert 0.97 * expect <= top - before <= 1.03 * (expect + result) + 4096, (pass_name, top - before, expect)


def test_workspace_orders_algorithms_sensibly():
    args = ((32, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, 4)
    ws = {a: conv_workspace_bytes(a, *args) for a in CONV_ALGORITHMS}
    assert ws["direct"] < ws["im2col"]            # one shifted slice vs all nine
    assert ws["im2col"] > 9 * 32 * 64 * 56 * 56 * 4 - 1
    with pytest.raises(ValueError):
        conv_workspace_bytes("winograd", (1, 1, 8, 8), (1, 1, 5, 5))
    with pytest.raises(ValueError):
        conv_workspace_bytes("im2col", (1, 1, 8, 8), (1, 1, 3, 3), pass_name="backward")
