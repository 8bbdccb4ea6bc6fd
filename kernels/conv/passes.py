"""2-D convolution: the dispatcher over the four algorithms, and their workspace sizes.

``conv2d_forward``, ``conv2d_backward_data`` and ``conv2d_backward_weights`` take the algorithm by
name and run exactly that algorithm's implementation (:mod:`kernels.conv.direct`, ``.im2col``, ``.fft``,
``.winograd``). Padding is asymmetric ``(top, bottom, left, right)``; weights are
``(F, C/groups, KH, KW)``; the computation is a cross-correlation (as cuDNN and PyTorch).

Applicability (``conv_applicable``):
  direct, im2col  any kernel, stride, dilation, groups
  fft             stride 1 (any kernel, dilation, groups)
  winograd        3x3, stride 1, dilation 1 (any groups); F(2x2, 3x3)

Every algorithm implements all three passes itself, so ``PASS_FALLBACK`` is empty; the cost model
should still look a pass up through ``kernel_run`` in case a fallback is ever added.
"""

from __future__ import annotations

from kernels.conv import direct, fft, im2col, winograd
from kernels.conv.buffers import add_bias
from kernels.dispatch import device_kernel
from kernels.xp import module_of
from networks.ops.conv_geometry import conv_output_hw, make_geom, pair
from networks.ops.conv_workspace import workspace_bytes

CONV_ALGORITHMS = ("direct", "im2col", "fft", "winograd")
CONV_PASSES = ("fwd", "bwd_data", "bwd_weights")

# (algorithm, pass) -> algorithm whose kernel actually runs for that pass. Empty: none falls back.
PASS_FALLBACK: dict[tuple[str, str], str] = {}

_IMPL = {"direct": direct, "im2col": im2col, "fft": fft, "winograd": winograd}

__all__ = ["CONV_ALGORITHMS", "CONV_PASSES", "PASS_FALLBACK", "conv_applicable", "conv_output_hw",
           "conv2d_forward", "conv2d_backward_data", "conv2d_backward_weights",
           "conv_workspace_bytes", "kernel_run"]


def kernel_run(algo: str, pass_name: str) -> str:
    """The algorithm whose kernel runs for ``pass_name`` when ``algo`` is chosen."""
    return PASS_FALLBACK.get((algo, pass_name), algo)


def conv_applicable(algo, kh, kw, stride, dilation, groups) -> bool:
    """Whether ``algo`` can compute a convolution with this kernel size, stride, dilation, groups."""
    sh, sw = pair(stride)
    dh, dw = pair(dilation)
    if algo in ("direct", "im2col"):
        return True
    if algo == "fft":
        return (sh, sw) == (1, 1)
    if algo == "winograd":
        return (kh, kw) == (3, 3) and (sh, sw) == (1, 1) and (dh, dw) == (1, 1)
    return False


def _check(algo, g):
    if algo not in _IMPL:
        raise ValueError(f"unknown convolution algorithm '{algo}'; choose one of {CONV_ALGORITHMS}")
    if not conv_applicable(algo, g.kh, g.kw, (g.sh, g.sw), (g.dh, g.dw), g.groups):
        raise ValueError(f"convolution algorithm '{algo}' does not apply to kernel {g.kh}x{g.kw}, "
                         f"stride ({g.sh},{g.sw}), dilation ({g.dh},{g.dw})")


@device_kernel("conv2d.fwd")
def conv2d_forward(x, w, b=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1,
                   algo="im2col", *, trace=None, site=None):
    """y = conv(x, w) + b; x (N, C, H, W), w (F, C/groups, KH, KW), b (F,) or None -> (N, F, Ho, Wo).
    ``site``: a dict the caller keeps per call site, in which a device's kernel keeps what it
    resolved on the first call (kernels.cuda.conv's prepared path); nothing to keep here."""
    g = make_geom(x.shape, w.shape, stride, padding, dilation, groups)
    _check(algo, g)
    w = w.astype(x.dtype, copy=False)
    y = _IMPL[algo].forward(x, w, g, trace)
    return add_bias(y, b)


@device_kernel("conv2d.bwd_data")
def conv2d_backward_data(dy, w, x_shape, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                         groups=1, algo="im2col", *, trace=None, site=None):
    """dx (shape ``x_shape``, C-contiguous) from dy (N, F, Ho, Wo). Input rows/cols no window
    touches get zero.

    The algorithms compute dx into a padded buffer and crop it; the crop is copied here, inside the
    timed kernel, because every consumer (a reshard, an allreduce, the next layer's backward) needs
    a contiguous array: copied later, outside the kernel, the copy would go unpriced."""
    g = make_geom(x_shape, w.shape, stride, padding, dilation, groups)
    _check(algo, g)
    if tuple(dy.shape) != (g.n, g.f, g.ho, g.wo):
        raise ValueError(f"conv2d_backward_data: dy {tuple(dy.shape)} != {(g.n, g.f, g.ho, g.wo)}")
    dx = _IMPL[algo].backward_data(dy, w.astype(dy.dtype, copy=False), g, trace)
    return module_of(dx).ascontiguousarray(dx)


@device_kernel("conv2d.bwd_weights")
def conv2d_backward_weights(dy, x, w_shape, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                            groups=1, algo="im2col", with_bias=False, *, trace=None, site=None):
    """(dw (shape ``w_shape``), db (F,) or None) from dy (N, F, Ho, Wo) and the forward input x."""
    g = make_geom(x.shape, w_shape, stride, padding, dilation, groups)
    _check(algo, g)
    if tuple(dy.shape) != (g.n, g.f, g.ho, g.wo):
        raise ValueError(f"conv2d_backward_weights: dy {tuple(dy.shape)} != {(g.n, g.f, g.ho, g.wo)}")
    dw = _IMPL[algo].backward_weights(dy, x.astype(dy.dtype, copy=False), g, trace)
    db = dy.sum(axis=(0, 2, 3)) if with_bias else None
    return dw, db


def conv_workspace_bytes(algo, x_shape, w_shape, stride=(1, 1), padding=(0, 0, 0, 0),
                         dilation=(1, 1), groups=1, itemsize=4, pass_name="fwd") -> int:
    """Bytes of temporary buffers ``algo`` allocates for ``pass_name`` beyond its inputs and result.

    It is the sum of the large temporaries each implementation allocates (listed in each
    algorithm's module docstring; an upper bound on the peak), not counting O(F*C) per-offset
    scratch or library internals (BLAS, FFT plans). The tests check it equals the sum of the
    ``nbytes`` the implementation reports through ``trace``.
    """
    if pass_name not in CONV_PASSES:
        raise ValueError(f"unknown pass '{pass_name}'; choose one of {CONV_PASSES}")
    g = make_geom(x_shape, w_shape, stride, padding, dilation, groups)
    _check(algo, g)
    run = kernel_run(algo, pass_name)
    return workspace_bytes(run, g, pass_name, itemsize,
                           im2col.per_sample_weight_grads(g) if run == "im2col" else None)
