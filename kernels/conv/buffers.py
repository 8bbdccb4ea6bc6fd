"""What the convolution algorithms share: their buffers counted, padding put on and cut off, the bias
added (the geometry is networks.ops.conv_geometry's).

Conventions (all algorithms): NCHW input ``x`` (N, C, H, W); weights ``w`` (F, C/groups, KH, KW);
cross-correlation as in every DNN framework; padding is asymmetric ``(top, bottom, left, right)``
because a spatially split rank pads only at the global border.

``trace``: every algorithm takes an optional list and appends the ``nbytes`` of each temporary
buffer it allocates beyond its inputs and its result, and minus the ``nbytes`` of each it lets go
before the pass ends; the pass's workspace is the largest running sum. ``conv_workspace_bytes`` is
a closed form of it (networks.ops.conv_workspace) and the tests check the two agree.
"""

from __future__ import annotations

from kernels.xp import module_of
from networks.ops.conv_geometry import ConvGeom


def note(trace, arr) -> None:
    """A buffer of the pass allocated (``trace`` gets its bytes)."""
    if trace is not None:
        trace.append(int(arr.nbytes))


def let_go(trace, arr) -> None:
    """A buffer of the pass released before the pass ends (``trace`` gets minus its bytes; the
    caller drops its last reference): the workspace is the largest running sum of ``trace``."""
    if trace is not None:
        trace.append(-int(arr.nbytes))


def pad_input(x, g: ConvGeom, trace=None):
    """Zero-pad ``x`` to (N, C, Hp, Wp); returns ``x`` itself (no copy) when there is no padding."""
    if not g.padded:
        return x
    xp = module_of(x)
    out = xp.zeros((g.n, g.c, g.hp, g.wp), dtype=x.dtype)
    out[:, :, g.pt:g.pt + g.h, g.pl:g.pl + g.w] = x
    note(trace, out)
    return out


def padded_zeros(xp, g: ConvGeom, dtype, trace=None):
    """A zero buffer of the padded input shape to accumulate into (counted only when padded)."""
    out = xp.zeros((g.n, g.c, g.hp, g.wp), dtype=dtype)
    if g.padded:
        note(trace, out)
    return out


def crop(dx_pad, g: ConvGeom):
    """Cut the padding off a padded-shape gradient (a contiguous copy only when padded)."""
    if not g.padded:
        return dx_pad
    return dx_pad[:, :, g.pt:g.pt + g.h, g.pl:g.pl + g.w].copy()


def add_bias(y, b):
    if b is not None:
        y += b.reshape(1, -1, 1, 1).astype(y.dtype, copy=False)
    return y
