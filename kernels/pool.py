"""Pooling: max and average over windows (PyTorch semantics), and global average pooling.

Padding is asymmetric ``(top, bottom, left, right)``. Output size, as PyTorch
(``pooling_output_shape``): ``(H + pt + pb - dil*(k-1) - 1 [+ s-1 if ceil_mode]) // s + 1``, and with
``ceil_mode`` the last window must start inside the input or the top/left padding, else it is
dropped. Windows that run past the bottom/right padding (ceil_mode) see -inf (max) or are clipped
from the divisor (avg). Loops run over the kh*kw window offsets only.
"""

from __future__ import annotations

import numpy

from kernels.dispatch import device_kernel
from kernels.xp import module_of
from networks.ops.conv_geometry import pair, quad


def pool_output_size(size, k, s, pad_lo, pad_hi, dil=1, ceil_mode=False) -> int:
    num = size + pad_lo + pad_hi - dil * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = num // s + 1
    if ceil_mode and (out - 1) * s >= size + pad_lo:
        out -= 1
    if out < 1:
        raise ValueError(f"pooling window {k} (dilation {dil}) does not fit input {size} + padding")
    return out


def pool_geometry(x_shape, kernel, stride, padding, dilation, ceil_mode):
    n, c, h, w = x_shape
    kh, kw = pair(kernel)
    sh, sw = pair(stride if stride is not None else kernel)
    pt, pb, pl, pr = quad(padding)
    dh, dw = pair(dilation)
    ho = pool_output_size(h, kh, sh, pt, pb, dh, ceil_mode)
    wo = pool_output_size(w, kw, sw, pl, pr, dw, ceil_mode)
    hb = max(pt + h + pb, (ho - 1) * sh + dh * (kh - 1) + 1)   # buffer extent incl. ceil overhang
    wb = max(pl + w + pr, (wo - 1) * sw + dw * (kw - 1) + 1)
    return dict(n=n, c=c, h=h, w=w, kh=kh, kw=kw, sh=sh, sw=sw, pt=pt, pb=pb, pl=pl, pr=pr,
                dh=dh, dw=dw, ho=ho, wo=wo, hb=hb, wb=wb)


def _win(g, i, j):
    r0, c0 = i * g["dh"], j * g["dw"]
    return (slice(None), slice(None), slice(r0, r0 + g["sh"] * (g["ho"] - 1) + 1, g["sh"]),
            slice(c0, c0 + g["sw"] * (g["wo"] - 1) + 1, g["sw"]))


def _buffer(x, g, fill):
    xp = module_of(x)
    buf = xp.full((g["n"], g["c"], g["hb"], g["wb"]), fill, dtype=x.dtype)
    buf[:, :, g["pt"]:g["pt"] + g["h"], g["pl"]:g["pl"] + g["w"]] = x
    return buf


def _crop(buf, g):
    return buf[:, :, g["pt"]:g["pt"] + g["h"], g["pl"]:g["pl"] + g["w"]].copy()


@device_kernel("maxpool2d.fwd")
def maxpool2d_forward(x, kernel, stride=None, padding=(0, 0, 0, 0), dilation=(1, 1), ceil_mode=False):
    """Max over windows; padding acts as -inf. Returns (y, cache); ties go to the first offset."""
    xp = module_of(x)
    g = pool_geometry(x.shape, kernel, stride, padding, dilation, ceil_mode)
    buf = _buffer(x, g, -numpy.inf)
    y = buf[_win(g, 0, 0)].copy()
    arg = xp.zeros(y.shape, dtype=xp.int32)
    for i in range(g["kh"]):
        for j in range(g["kw"]):
            if i == 0 and j == 0:
                continue
            v = buf[_win(g, i, j)]
            # branch-free updates (data-dependent selects are slow on mixed data; see relu)
            better = v > y
            arg += better * (i * g["kw"] + j - arg)
            xp.maximum(y, v, out=y)
    return y, {"arg": arg, "g": g}


@device_kernel("maxpool2d.bwd")
def maxpool2d_backward(dy, cache):
    """Each output's gradient goes to the input element that won its window."""
    xp = module_of(dy)
    g, arg = cache["g"], cache["arg"]
    dbuf = xp.zeros((g["n"], g["c"], g["hb"], g["wb"]), dtype=dy.dtype)
    for i in range(g["kh"]):
        for j in range(g["kw"]):
            dbuf[_win(g, i, j)] += dy * (arg == i * g["kw"] + j)
    return _crop(dbuf, g)


def _avg_divisor(g, count_include_pad):
    """(Ho, Wo) divisor, PyTorch's rule: clip to the padded input, then (if not counting padding)
    to the input itself."""
    def counts(out, k, s, lo, hi, size):
        start = numpy.arange(out) * s - lo
        end = numpy.minimum(start + k, size + hi)
        if count_include_pad:
            return end - start
        return numpy.minimum(end, size) - numpy.maximum(start, 0)
    ch = counts(g["ho"], g["kh"], g["sh"], g["pt"], g["pb"], g["h"])
    cw = counts(g["wo"], g["kw"], g["sw"], g["pl"], g["pr"], g["w"])
    return numpy.maximum(numpy.outer(ch, cw), 1)


def avgpool2d_forward(x, kernel, stride=None, padding=(0, 0, 0, 0), ceil_mode=False,
                      count_include_pad=True):
    """Mean over windows (padding contributes zeros). Returns (y, cache)."""
    xp = module_of(x)
    g = pool_geometry(x.shape, kernel, stride, padding, (1, 1), ceil_mode)
    buf = _buffer(x, g, 0)
    y = buf[_win(g, 0, 0)].copy()
    for i in range(g["kh"]):
        for j in range(g["kw"]):
            if i or j:
                y += buf[_win(g, i, j)]
    div = xp.asarray(_avg_divisor(g, count_include_pad).astype(x.dtype))
    y /= div
    return y, {"g": g, "div": div}


def avgpool2d_backward(dy, cache):
    xp = module_of(dy)
    g = cache["g"]
    share = dy / cache["div"].astype(dy.dtype, copy=False)
    dbuf = xp.zeros((g["n"], g["c"], g["hb"], g["wb"]), dtype=dy.dtype)
    for i in range(g["kh"]):
        for j in range(g["kw"]):
            dbuf[_win(g, i, j)] += share
    return _crop(dbuf, g)


@device_kernel("global_avgpool.fwd")
def global_avgpool_forward(x, divisor=None):
    """(N, C, H, W) -> (N, C, 1, 1): sum over H, W divided by ``divisor`` (default H*W).

    A rank holding part of H/W passes the GLOBAL H*W so the partial results allreduce (sum) to the
    mean. Returns (y, cache).
    """
    div = x.shape[2] * x.shape[3] if divisor is None else divisor
    y = x.sum(axis=(2, 3), keepdims=True)
    y /= div
    return y, {"shape": tuple(x.shape), "div": div}


@device_kernel("global_avgpool.bwd")
def global_avgpool_backward(dy, cache):
    xp = module_of(dy)
    return xp.broadcast_to(dy / cache["div"], cache["shape"]).copy()
