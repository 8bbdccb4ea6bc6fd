"""The geometry of one 2-D convolution (pure): shapes, stride, padding, dilation and groups, the
output size, and the padded and dilated extents every algorithm works from.

Padding is asymmetric ``(top, bottom, left, right)`` because a spatially split rank pads only at
the global border. The kernels (kernels/conv/) run on it; the workspace each algorithm
allocates (networks.ops.conv_workspace) is a function of it, shared by the kernels and the cost model.
"""

from __future__ import annotations

from dataclasses import dataclass


def pair(v) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    a, b = v
    return (int(a), int(b))


def quad(v) -> tuple[int, int, int, int]:
    """Padding as (top, bottom, left, right); an int or a symmetric (ph, pw) pair are accepted."""
    if isinstance(v, int):
        return (v, v, v, v)
    v = tuple(int(e) for e in v)
    if len(v) == 2:
        return (v[0], v[0], v[1], v[1])
    if len(v) == 4:
        return v
    raise ValueError(f"padding must be an int, (ph, pw) or (top, bottom, left, right), got {v}")


def conv_output_hw(h, w, kh, kw, stride, padding, dilation) -> tuple[int, int]:
    """Output height and width of a convolution (floor division, as cuDNN and PyTorch)."""
    sh, sw = pair(stride)
    pt, pb, pl, pr = quad(padding)
    dh, dw = pair(dilation)
    ho = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    wo = (w + pl + pr - dw * (kw - 1) - 1) // sw + 1
    return ho, wo


@dataclass(frozen=True)
class ConvGeom:
    n: int
    c: int
    h: int
    w: int
    f: int
    kh: int
    kw: int
    sh: int
    sw: int
    pt: int
    pb: int
    pl: int
    pr: int
    dh: int
    dw: int
    groups: int
    ho: int
    wo: int

    @property
    def cg(self) -> int:
        return self.c // self.groups

    @property
    def fg(self) -> int:
        return self.f // self.groups

    @property
    def hp(self) -> int:
        return self.h + self.pt + self.pb

    @property
    def wp(self) -> int:
        return self.w + self.pl + self.pr

    @property
    def padded(self) -> bool:
        return (self.pt, self.pb, self.pl, self.pr) != (0, 0, 0, 0)

    @property
    def khe(self) -> int:
        """Effective (dilated) kernel height."""
        return self.dh * (self.kh - 1) + 1

    @property
    def kwe(self) -> int:
        return self.dw * (self.kw - 1) + 1

    def rows(self, i: int) -> slice:
        """Rows of the padded input that kernel row ``i`` touches, one per output row."""
        start = i * self.dh
        return slice(start, start + self.sh * (self.ho - 1) + 1, self.sh)

    def cols(self, j: int) -> slice:
        start = j * self.dw
        return slice(start, start + self.sw * (self.wo - 1) + 1, self.sw)


def make_geom(x_shape, w_shape, stride, padding, dilation, groups) -> ConvGeom:
    n, c, h, w = (int(e) for e in x_shape)
    f, cg, kh, kw = (int(e) for e in w_shape)
    groups = int(groups)
    if groups < 1 or c % groups or f % groups or cg != c // groups:
        raise ValueError(f"conv2d: x channels {c}, weight {tuple(w_shape)} and groups={groups} disagree")
    sh, sw = pair(stride)
    pt, pb, pl, pr = quad(padding)
    dh, dw = pair(dilation)
    if min(sh, sw, dh, dw) < 1 or min(pt, pb, pl, pr) < 0:
        raise ValueError("conv2d: stride and dilation must be >= 1 and padding >= 0")
    ho, wo = conv_output_hw(h, w, kh, kw, (sh, sw), (pt, pb, pl, pr), (dh, dw))
    if ho < 1 or wo < 1:
        raise ValueError(f"conv2d: kernel {kh}x{kw} (dilation {dh},{dw}) does not fit in the padded "
                         f"input {h + pt + pb}x{w + pl + pr}")
    return ConvGeom(n, c, h, w, f, kh, kw, sh, sw, pt, pb, pl, pr, dh, dw, groups, ho, wo)
