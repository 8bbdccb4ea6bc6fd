"""Direct convolution: the seven-loop sum of Algorithm 3 (Appendix B.1) of Ben-Nun and Hoefler,
"Demystifying Parallel and Distributed Deep Learning" (ACM Computing Surveys, 2019), with the two
kernel-offset loops outermost and the (N, C, F, Ho, Wo) loops done as one small GEMM per offset
over the channel dimension (a "shifted GEMM"). No column matrix is built: the extra memory is one
shifted input slice and one partial product, reused across offsets (docs/kernels.md).

Buffers (the workspace, see ``conv_workspace_bytes``):
  fwd         padded input (if padded) + slice N*C*Ho*Wo + partial product N*F*Ho*Wo
  bwd_data    partial product N*C*Ho*Wo + padded gradient (if padded)
  bwd_weights padded input (if padded) + slice N*C*Ho*Wo + per-sample product N*F*(C/g)
"""

from __future__ import annotations

from kernels.conv.buffers import crop, note, pad_input, padded_zeros
from kernels.xp import module_of
from networks.ops.conv_geometry import ConvGeom


def _w_offset(w, g: ConvGeom, i: int, j: int):
    """(groups, F/g, C/g) weight matrix of kernel offset (i, j)."""
    return w[:, :, i, j].reshape(g.groups, g.fg, g.cg)


def forward(x, w, g: ConvGeom, trace=None):
    xp = module_of(x)
    x_pad = pad_input(x, g, trace)
    y = xp.zeros((g.n, g.groups, g.fg, g.ho * g.wo), dtype=x.dtype)
    xs = xp.empty((g.n, g.c, g.ho, g.wo), dtype=x.dtype)
    part = xp.empty_like(y)
    note(trace, xs)
    note(trace, part)
    xsg = xs.reshape(g.n, g.groups, g.cg, g.ho * g.wo)
    for i in range(g.kh):
        for j in range(g.kw):
            xs[...] = x_pad[:, :, g.rows(i), g.cols(j)]
            xp.matmul(_w_offset(w, g, i, j), xsg, out=part)
            y += part
    return y.reshape(g.n, g.f, g.ho, g.wo)


def backward_data(dy, w, g: ConvGeom, trace=None):
    xp = module_of(dy)
    dyg = dy.reshape(g.n, g.groups, g.fg, g.ho * g.wo)
    part = xp.empty((g.n, g.groups, g.cg, g.ho * g.wo), dtype=dy.dtype)
    note(trace, part)
    part4 = part.reshape(g.n, g.c, g.ho, g.wo)
    dx_pad = padded_zeros(xp, g, dy.dtype, trace)
    for i in range(g.kh):
        for j in range(g.kw):
            xp.matmul(_w_offset(w, g, i, j).transpose(0, 2, 1), dyg, out=part)
            dx_pad[:, :, g.rows(i), g.cols(j)] += part4
    return crop(dx_pad, g)


def backward_weights(dy, x, g: ConvGeom, trace=None):
    xp = module_of(dy)
    x_pad = pad_input(x, g, trace)
    dyg = dy.reshape(g.n, g.groups, g.fg, g.ho * g.wo)
    dw = xp.empty((g.f, g.cg, g.kh, g.kw), dtype=dy.dtype)
    xs = xp.empty((g.n, g.c, g.ho, g.wo), dtype=dy.dtype)
    part = xp.empty((g.n, g.groups, g.fg, g.cg), dtype=dy.dtype)
    note(trace, xs)
    note(trace, part)
    xsg_t = xs.reshape(g.n, g.groups, g.cg, g.ho * g.wo).transpose(0, 1, 3, 2)
    for i in range(g.kh):
        for j in range(g.kw):
            xs[...] = x_pad[:, :, g.rows(i), g.cols(j)]
            xp.matmul(dyg, xsg_t, out=part)
            dw[:, :, i, j] = part.sum(axis=0).reshape(g.f, g.cg)
    return dw
