"""im2col convolution: unroll input patches into a column matrix, then one (batched) GEMM.

Follows Algorithm 4 (Appendix B.2) of Ben-Nun and Hoefler, "Demystifying Parallel and Distributed
Deep Learning" (ACM Computing Surveys, 2019): the column matrix is ``(C/groups * KH * KW) x
(Ho * Wo)`` per sample and group, the kernel matrix ``F/groups x (C/groups * KH * KW)``. Samples
and groups are batch dimensions of a single ``matmul`` call (docs/kernels.md).

Buffers (the workspace, see ``conv_workspace_bytes``):
  fwd         padded input (if padded; let go once the columns are built) + columns N*C*KH*KW*Ho*Wo
  bwd_data    columns (w^T @ dy) + padded gradient (if padded)
  bwd_weights padded input (if padded; let go once the columns are built), columns, then per-sample
              products N*F*(C/g)*KH*KW or,
              when those would be large, columns ordered by channel and a copy of dy ordered
              (group, filter, sample, position), N*F*Ho*Wo, for one GEMM over the whole batch
"""

from __future__ import annotations

from kernels.conv.buffers import crop, let_go, note, pad_input, padded_zeros
from kernels.xp import module_of
from networks.ops.conv_geometry import ConvGeom
from networks.ops.conv_workspace import PER_SAMPLE_MAX_ELEMS, per_sample_products


def _columns(x_pad, g: ConvGeom, trace=None):
    """(N, groups, C/g*KH*KW, Ho*Wo) patch matrix, filled with one strided copy per kernel offset."""
    xp = module_of(x_pad)
    cols = xp.empty((g.n, g.c, g.kh, g.kw, g.ho, g.wo), dtype=x_pad.dtype)
    for i in range(g.kh):
        for j in range(g.kw):
            cols[:, :, i, j] = x_pad[:, :, g.rows(i), g.cols(j)]
    note(trace, cols)
    return cols.reshape(g.n, g.groups, g.cg * g.kh * g.kw, g.ho * g.wo)


def _w_matrix(w, g: ConvGeom):
    return w.reshape(g.groups, g.fg, g.cg * g.kh * g.kw)


def _patches(x, g: ConvGeom, trace, columns):
    """``columns`` of the padded input, the padded copy let go once they are built."""
    x_pad = pad_input(x, g, trace)
    cols = columns(x_pad, g, trace)
    if x_pad is not x:
        let_go(trace, x_pad)
    return cols


def forward(x, w, g: ConvGeom, trace=None):
    cols = _patches(x, g, trace, _columns)
    y = module_of(x).matmul(_w_matrix(w, g), cols)             # (N, G, Fg, Ho*Wo)
    return y.reshape(g.n, g.f, g.ho, g.wo)


def backward_data(dy, w, g: ConvGeom, trace=None):
    xp = module_of(dy)
    dyg = dy.reshape(g.n, g.groups, g.fg, g.ho * g.wo)
    dcols = xp.matmul(_w_matrix(w, g).transpose(0, 2, 1), dyg)  # (N, G, Cg*KH*KW, Ho*Wo)
    note(trace, dcols)
    dcols = dcols.reshape(g.n, g.c, g.kh, g.kw, g.ho, g.wo)
    dx_pad = padded_zeros(xp, g, dy.dtype, trace)
    for i in range(g.kh):                                        # col2im
        for j in range(g.kw):
            dx_pad[:, :, g.rows(i), g.cols(j)] += dcols[:, :, i, j]
    return crop(dx_pad, g)


def per_sample_weight_grads(g: ConvGeom) -> bool:
    """Whether ``backward_weights`` sums per-sample GEMMs (small buffers) or folds the batch
    (below ``PER_SAMPLE_MAX_ELEMS`` elements of per-sample products; networks.ops.conv_workspace)."""
    return per_sample_products(g, PER_SAMPLE_MAX_ELEMS)


def _columns_by_channel(x_pad, g: ConvGeom, trace=None):
    """(groups, C/g*KH*KW, N*Ho*Wo) patch matrix: the batch joins the columns, so one GEMM
    reduces over samples and positions at once."""
    xp = module_of(x_pad)
    cols = xp.empty((g.c, g.kh, g.kw, g.n, g.ho, g.wo), dtype=x_pad.dtype)
    by_channel = x_pad.transpose(1, 0, 2, 3)
    for i in range(g.kh):
        for j in range(g.kw):
            cols[:, i, j] = by_channel[:, :, g.rows(i), g.cols(j)]
    note(trace, cols)
    return cols.reshape(g.groups, g.cg * g.kh * g.kw, g.n * g.ho * g.wo)


def backward_weights(dy, x, g: ConvGeom, trace=None):
    xp = module_of(dy)
    positions = g.ho * g.wo
    if per_sample_weight_grads(g):
        cols = _patches(x, g, trace, _columns)
        dyg = dy.reshape(g.n, g.groups, g.fg, positions)
        per_sample = xp.matmul(dyg, cols.transpose(0, 1, 3, 2))     # (N, G, Fg, Cg*KH*KW)
        note(trace, per_sample)
        return per_sample.sum(axis=0).reshape(g.f, g.cg, g.kh, g.kw)
    cols = _patches(x, g, trace, _columns_by_channel)                # (G, Cg*KH*KW, N*Ho*Wo)
    dyg = xp.ascontiguousarray(dy.reshape(g.n, g.groups, g.fg, positions).transpose(1, 2, 0, 3))
    note(trace, dyg)
    dyg = dyg.reshape(g.groups, g.fg, g.n * positions)
    return xp.matmul(dyg, cols.transpose(0, 2, 1)).reshape(g.f, g.cg, g.kh, g.kw)
