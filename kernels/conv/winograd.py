"""Winograd minimal-filtering convolution F(m x m, 3 x 3), m = 2 (default) or 4.

Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks" (CVPR 2016), as Section 5.2
and Algorithm 6 (Appendix B.4) of Ben-Nun and Hoefler, "Demystifying Parallel and Distributed Deep
Learning" (ACM Computing Surveys, 2019) state it (docs/kernels.md): per output tile  y = A^T [ sum_c (G w G^T) o (B^T d B) ] A  with input tiles d of size
alpha = m + 2 overlapping by 2. Implementation, all as large GEMMs:
  1. filter transform   U = (G (x) G) vec(w)            (alpha^2, F * C/g)
  2. input transform    V = (B^T (x) B^T) vec(d)        (alpha^2, C * N * P), P = tiles per image
  3. per-point GEMM     M[k] = U[k] @ V[k]              alpha^2 batched (F/g x C/g) @ (C/g x N P)
  4. output transform   Y = (A^T (x) A^T) vec(M)        (m^2, F * N * P), then scattered to NCHW
where (x) is the Kronecker product (the two-sided transform M -> T M T^T of a tile is one matrix
product with T (x) T on its row-major vectorisation).

Backward data is the same forward algorithm on dy padded by 2 with the 180-degree rotated,
channel-transposed filter (a full convolution). Backward weights uses the transposed algorithm
F(3 x 3, m x m): by the bilinearity of y = A^T[(G w) o (B^T d)], the weight gradient of one tile is
  dW = G^T [ (A dY A^T) o (B^T d B) ] G,
summed over tiles, samples and (per point k) done as one GEMM over N*P. No pass falls back.

Applicable only to 3x3, stride 1, dilation 1 (any groups). Accuracy is lower than direct/im2col
(Ben-Nun and Hoefler note the growth of the transform entries); F(4x4) is less accurate than F(2x2).

Buffers (the workspace), t = alpha^2, P = ceil(Ho/m) * ceil(Wo/m), E = N*C*(m*th+2)*(m*tw+2):
  fwd          E (unless the unpadded input already has that size) + tiles t*C*N*P + V t*C*N*P
               + U t*F*Cg + M t*F*N*P + Y m^2*F*N*P + y before cropping N*F*m^2*P (if cropped)
  bwd_data     fwd workspace of (dy padded by 2, rotated filter) + padded dx (if padded)
  bwd_weights  E' + tiles + V (as fwd) + dy tiles m^2*F*N*P + DY t*F*N*P + Z t*F*Cg
"""

from __future__ import annotations

import functools

import numpy

from kernels.conv.buffers import crop, note
from kernels.xp import module_of
from networks.ops.conv_geometry import ConvGeom
from networks.ops.conv_workspace import DEFAULT_TILE, rotated_geom, winograd_tiles

# Lavin and Gray's (CVPR 2016) matrices, stored as (B^T, G, A^T).
_MATRICES = {
    2: (
        [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]],
    ),
    4: (
        [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
         [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
        [[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
         [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]],
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
    ),
}
TILE_SIZES = tuple(_MATRICES)


@functools.lru_cache(maxsize=None)
def _kron_host(m: int, dtype: str) -> tuple[numpy.ndarray, ...]:
    """(B^T (x) B^T, G (x) G, A^T (x) A^T, A (x) A, G^T (x) G^T, G (x) G with its columns reversed)
    in ``dtype``, built once per tile size and dtype rather than on every call (three per layer
    and step, each paying the Kronecker products again). The last transforms a 180-degree rotated
    filter: rotating a 3 x 3 filter reverses its row-major vectorisation."""
    bt, g, at = (numpy.array(a, dtype=numpy.float64) for a in _MATRICES[m])
    gg = numpy.kron(g, g)
    mats = (numpy.kron(bt, bt), gg, numpy.kron(at, at), numpy.kron(at.T, at.T), numpy.kron(g.T, g.T),
            numpy.ascontiguousarray(gg[:, ::-1]))
    out = tuple(k.astype(dtype) for k in mats)
    for k in out:
        k.flags.writeable = False
    return out


def _kron(xp, dtype, m):
    """Two-sided transforms as Kronecker products, in the compute dtype on the right device."""
    return _kron_on(xp, m, numpy.dtype(dtype).str)


@functools.lru_cache(maxsize=None)
def _kron_on(xp, m: int, dtype: str) -> tuple:
    """:func:`_kron_host`'s matrices copied to ``xp``'s device once, not on every call."""
    mats = _kron_host(m, dtype)
    return mats if xp is numpy else tuple(xp.asarray(k) for k in mats)




def _input_tiles(x, g: ConvGeom, m: int, trace=None):
    """Overlapping alpha x alpha input tiles, (alpha, alpha, C, N, th, tw), zero beyond the data."""
    xp = module_of(x)
    th, tw = winograd_tiles(g, m)
    a = m + 2
    eh, ew = m * th + 2, m * tw + 2
    if not g.padded and (eh, ew) == (g.h, g.w):
        ext = x
    else:
        ext = xp.zeros((g.n, g.c, eh, ew), dtype=x.dtype)
        ext[:, :, g.pt:g.pt + g.h, g.pl:g.pl + g.w] = x
        note(trace, ext)
    d = xp.empty((a, a, g.c, g.n, th, tw), dtype=x.dtype)
    note(trace, d)
    sn, sc, sh, sw = ext.strides  # d[u, v, c, n, i, j] = ext[n, c, u + m i, v + m j]: one strided copy
    d[...] = xp.lib.stride_tricks.as_strided(ext, shape=d.shape, strides=(sh, sw, sc, sn, m * sh, m * sw))
    return d


def _input_transform(x, g, m, kb, trace=None):
    d = _input_tiles(x, g, m, trace)
    v = module_of(x).matmul(kb, d.reshape(kb.shape[1], -1))    # (alpha^2, C*N*P)
    note(trace, v)
    return v


def forward(x, w, g: ConvGeom, trace=None, m: int = DEFAULT_TILE):
    xp = module_of(x)
    kg = _kron(xp, x.dtype, m)[1]
    u = xp.matmul(kg, w.reshape(g.f * g.cg, 9).T)              # (alpha^2, F*Cg)
    note(trace, u)
    return _forward_transformed(x, u.reshape(-1, g.groups, g.fg, g.cg), g, trace, m)


def _forward_transformed(x, u, g: ConvGeom, trace, m: int):
    """The forward algorithm from the transformed filter ``u`` (alpha^2, G, Fg, Cg), which may be
    a strided view (matmul reads a transposed operand in place)."""
    xp = module_of(x)
    kb, _, ka = _kron(xp, x.dtype, m)[:3]
    th, tw = winograd_tiles(g, m)
    t, p = (m + 2) ** 2, g.n * th * tw
    v = _input_transform(x, g, m, kb, trace).reshape(t, g.groups, g.cg, p)
    mm = xp.matmul(u, v)                                        # (alpha^2, G, Fg, N*P)
    note(trace, mm)
    yt = xp.matmul(ka, mm.reshape(t, -1))                       # (m^2, F*N*P)
    note(trace, yt)
    y_full = xp.empty((g.n, g.f, th, m, tw, m), dtype=x.dtype)
    y_full[...] = yt.reshape(m, m, g.f, g.n, th, tw).transpose(3, 2, 4, 0, 5, 1)
    y_full = y_full.reshape(g.n, g.f, m * th, m * tw)
    if (m * th, m * tw) == (g.ho, g.wo):
        return y_full
    note(trace, y_full)
    return y_full[:, :, :g.ho, :g.wo].copy()




def backward_data(dy, w, g: ConvGeom, trace=None, m: int = DEFAULT_TILE):
    """The forward algorithm on dy padded by 2 with the rotated, channel-transposed filter, whose
    transform is the original filter's with reversed columns of G (x) G, read transposed: the
    rotated filter itself is never built."""
    xp = module_of(dy)
    kg_rot = _kron(xp, dy.dtype, m)[5]
    u = xp.matmul(kg_rot, w.reshape(g.f * g.cg, 9).T)          # (alpha^2, F*Cg) = (t, G, Fg, Cg)
    note(trace, u)
    u_rot = u.reshape(-1, g.groups, g.fg, g.cg).transpose(0, 1, 3, 2)   # (t, G, Cg, Fg), a view
    dx_pad = _forward_transformed(dy, u_rot, rotated_geom(g), trace, m)   # (N, C, Hp, Wp)
    if g.padded:
        note(trace, dx_pad)
    return crop(dx_pad, g)


def backward_weights(dy, x, g: ConvGeom, trace=None, m: int = DEFAULT_TILE):
    xp = module_of(dy)
    kb, _, _, ka_t, kg_t = _kron(xp, dy.dtype, m)[:5]
    th, tw = winograd_tiles(g, m)
    t, p = (m + 2) ** 2, g.n * th * tw
    v = _input_transform(x, g, m, kb, trace).reshape(t, g.groups, g.cg, p)
    e = xp.zeros((m, m, g.f, g.n, th, tw), dtype=dy.dtype)      # non-overlapping m x m dy tiles
    note(trace, e)
    for a in range(m):
        for b in range(m):
            src = dy[:, :, a::m, b::m].transpose(1, 0, 2, 3)
            e[a, b, :, :, :src.shape[2], :src.shape[3]] = src
    dyt = xp.matmul(ka_t, e.reshape(m * m, -1))                 # (alpha^2, F*N*P)
    note(trace, dyt)
    z = xp.matmul(dyt.reshape(t, g.groups, g.fg, p), v.transpose(0, 1, 3, 2))  # (t, G, Fg, Cg)
    note(trace, z)
    # dW^T = Z^T (G^T (x) G^T)^T: the result comes out (F*Cg, 9), already in the filter's layout
    return xp.matmul(z.reshape(t, -1).T, kg_t.T).reshape(g.f, g.cg, 3, 3)
