"""Strategies and the grid mapping of degrees onto ranks (docs/costmodel.md, "Strategies and the grid").

A strategy gives each splittable dimension of a layer a degree; the degrees multiply to at most
``p`` and the leftover factor is the replication degree ``R``. ``SP`` (Megatron-LM's sequence
parallelism, Korthikanti et al. 2022, section 4.2.2) marks the variant of a tensor-parallel split
whose reductions scatter over the sequence: the partial output is reduce-scattered into sequence
shards and the input arrives in them, all-gathered (``costmodel.parallel.shard.sequence_scatter``). Degrees are laid on ranks in the
fixed order of :data:`costmodel.parallel.axes.GRID_ORDER`, N, E, H, W, C, F, R with R innermost: rank = mixed-radix number
whose most significant digit is the N coordinate. Groups that talk most often (replicas, filters,
channels) are thus neighbours in rank order and fall inside a node first. E (experts) splits a
mixture-of-experts layer's experts, and its tokens with N: as E lies right inside N, the N and E
coordinates of a rank together are its coordinate of N alone in :meth:`Strategy.tokens` (N times E
samples), so the tokens lie as a data-parallel layer of that degree holds them. Where expert
parallelism is folded over sequence-parallel tensor ranks too (Megatron-Core's "MoE Parallel
Folding", megatron/core/transformer/moe/README.md: EP spans data x tensor ranks, the expert
tensor-parallel degree 1), ``expert_seq`` (``ESEQ`` in labels and plan files) of E's factor cuts
each sequence instead, innermost, so the tokens lie as the sequence-parallel norms hold them
(N times E / expert_seq samples, each sequence in ``expert_seq`` shards).

A tensor axis may be cut by two neighbouring grid dimensions at once, a *composite* dimension
``"H*F"`` (:func:`composite`): Megatron-Core's sequence parallelism inside context parallelism
(Korthikanti et al. 2022, section 4.2.2, run on each context rank's ``S / c`` positions) splits the
sequence ``c`` ways by H and each of those ``t`` ways over the tensor group (C or F). A rank's
coordinate along it is ``h t + f``, which is its mixed-radix digit pair when nothing between the two
dimensions in :data:`GRID_ORDER` splits (:meth:`Strategy.radix_stride`): the blocks of a layer that
splits its sequence ``H = c t`` alone (a norm under CP and SP).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from costmodel.parallel.axes import N, E, H, DIM_WORDS, ESEQ, GRID_ORDER, SP, SPLIT_DIMS
from networks.errors import DnnplanError, short


@dataclass(frozen=True)
class Strategy:
    """Degrees per dimension (only those > 1 are stored, in grid order) over ``p`` ranks."""

    p: int
    degrees: tuple[tuple[str, int], ...] = ()
    #: the tensor group's reductions scatter over the sequence (the ``SP`` variant, module docstring)
    seq_scatter: bool = False
    #: of E's cut of the tokens, this innermost factor splits each sequence (H) rather than the
    #: samples: expert parallelism folded over sequence-parallel tensor ranks (module docstring)
    expert_seq: int = 1

    @staticmethod
    def of(p: int, **degrees: int) -> "Strategy":
        return make_strategy(p, degrees)

    def degree(self, dim: str) -> int:
        if dim == "R":
            return self.replication
        for d, k in self.degrees:
            if d == dim:
                return k
        return 1

    @property
    def replication(self) -> int:
        used = 1
        for _, k in self.degrees:
            used *= k
        return self.p // used

    @property
    def label(self) -> str:
        parts = [f"{d}={k}" for d, k in self.degrees]
        if self.replication > 1 and parts:
            parts.append(f"R={self.replication}")
        if self.seq_scatter:
            parts.append(SP)
        if self.expert_seq > 1:
            parts.append(f"{ESEQ}={self.expert_seq}")
        if not parts:
            return "replicated" if self.p > 1 else "serial"
        return ",".join(parts)

    @property
    def tokens(self) -> "Strategy":
        """The strategy whose N is this one's N times E, without E: how a mixture-of-experts layer's
        tokens lie (module docstring); itself when E is 1."""
        e = self.degree(E)
        if e == 1:
            return self
        if self.expert_seq > 1:  # E = (samples outside) x (sequence shards inside), as SP norms hold them
            n = self.degree(N) * e // self.expert_seq
            return make_strategy(self.p, {d: k for d, k in self.degrees if d not in "NEH"} |
                                 {N: n, H: self.degree(H) * self.expert_seq})
        degrees = tuple((N, self.degree(N) * e) if d == N else (d, k) for d, k in self.degrees if d != E)
        if self.degree(N) == 1:
            degrees = ((N, e),) + degrees
        return Strategy(self.p, degrees, self.seq_scatter)

    def as_dict(self) -> dict[str, int]:
        """The degrees, and ``SP: 1`` for the sequence-parallel variant (what plan files hold)."""
        return dict(self.degrees) | ({SP: 1} if self.seq_scatter else {}) | \
            ({ESEQ: self.expert_seq} if self.expert_seq > 1 else {})

    @property
    def plain(self) -> "Strategy":
        """The same degrees without the sequence-parallel variant."""
        return Strategy(self.p, self.degrees, expert_seq=self.expert_seq) if self.seq_scatter else self

    @cached_property
    def radix(self) -> tuple[int, ...]:
        return tuple(self.degree(d) for d in GRID_ORDER)

    @cached_property
    def strides(self) -> tuple[int, ...]:
        out, acc = [], 1
        for k in reversed(self.radix):
            out.append(acc)
            acc *= k
        return tuple(reversed(out))

    def radix_stride(self, dim: str) -> tuple[int, int]:
        """(degree, stride) of ``dim`` in the grid; of a composite ``"H*F"`` the product of the two
        degrees and the inner one's stride, when no dimension between them splits (module docstring)."""
        if "*" not in dim:
            i = GRID_ORDER.index(dim)
            return self.radix[i], self.strides[i]
        outer, inner = (GRID_ORDER.index(d) for d in composite(dim))
        if outer >= inner or any(self.radix[i] > 1 for i in range(outer + 1, inner)):
            raise ValueError(f"{dim}: not two grid dimensions with nothing split between them in {self.label}")
        return self.radix[outer] * self.radix[inner], self.strides[inner]

    def coord(self, rank: int, dim: str) -> int:
        k, s = self.radix_stride(dim)
        return (rank // s) % k

    def coords_all(self, dim: str) -> np.ndarray:
        """The coordinate along ``dim`` of every rank 0..p-1 (vectorised)."""
        k, s = self.radix_stride(dim)
        return (np.arange(self.p) // s) % k

    def group(self, rank: int, dims) -> tuple[int, ...]:
        """Ranks that share every coordinate with ``rank`` except along ``dims`` (a communicator)."""
        return tuple(int(m) for m in self.group_array(rank, dims))

    def group_array(self, rank: int, dims) -> np.ndarray:
        """:meth:`group` as a sorted numpy array (vectorised: a group can hold millions of ranks)."""
        members = np.array([rank], dtype=np.int64)
        axes = sorted((GRID_ORDER.index(d) for d in set(dims)), key=lambda i: -self.strides[i])
        for i in axes:  # largest stride first: the grid's nesting leaves the members sorted
            k, s = self.radix[i], self.strides[i]
            base = members - ((members // s) % k) * s
            members = (base[:, None] + np.arange(k, dtype=np.int64) * s).ravel()
        return members

    def group_size(self, dims) -> int:
        out = 1
        for d in set(dims):
            out *= self.degree(d)
        return out


def composite(dim: str) -> tuple[str, ...]:
    """The grid dimensions an axis split names: ``("H", "F")`` for ``"H*F"``, ``("H",)`` for ``"H"``."""
    return tuple(dim.split("*"))


def make_strategy(p: int, degrees: dict[str, int]) -> Strategy:
    """Build a strategy, checking the degrees; a user mistake raises DnnplanError."""
    if p < 1:
        raise DnnplanError(f"the device count must be positive, got {p}")
    used = 1
    items = []
    for dim in SPLIT_DIMS:
        k = int(degrees.get(dim, 1))
        if k < 1:
            raise DnnplanError(f"degree of {dim} must be positive, got {k}",
                               hint=f"{dim}=1 leaves {dim} unsplit; leave it out")
        if k > 1:
            items.append((dim, k))
            used *= k
    unknown = set(degrees) - set(SPLIT_DIMS) - {"R", SP, ESEQ}
    if unknown:
        raise DnnplanError(f"unknown dimension(s) {', '.join(sorted(unknown))}",
                           hint=f"dimensions are {DIM_WORDS}")
    if p % used:
        product = f"{'x'.join(str(k) for _, k in items)} = {used}" if len(items) > 1 else str(used)
        raise DnnplanError(f"the degrees' product {short(product)} does not divide {p} devices",
                           hint="make the degrees multiply to a divisor of the device count")
    if "R" in degrees and int(degrees["R"]) != p // used:
        raise DnnplanError(f"R={short(degrees['R'])} does not match {p} devices / {used} = {p // used}")
    scatter = degrees.get(SP, 0)
    if scatter not in (0, 1) or isinstance(scatter, bool):
        raise DnnplanError(f"SP={short(scatter)} must be 1 (the sequence-parallel variant) or 0",
                           hint="SP: 1 reduce-scatters the tensor group's partial sums over the sequence")
    eseq = int(degrees.get(ESEQ, 1))
    if eseq < 1 or (eseq > 1 and dict(items).get(E, 1) % eseq):
        raise DnnplanError(f"{ESEQ}={short(eseq)} must divide the expert degree E={dict(items).get('E', 1)}",
                           hint=f"{ESEQ} folds expert parallelism over the sequence-parallel tensor ranks")
    return Strategy(p, tuple(items), bool(scatter), eseq)


def parse_degrees(text: str, p: int) -> Strategy:
    """Parse ``"N=4,F=2"`` (``"N=4,C=2,SP"``: the sequence-parallel variant) into a strategy over ``p`` ranks."""
    degrees: dict[str, int] = {}
    parts = [s.strip() for s in text.split(",")]
    if not all(parts):
        raise DnnplanError(f"strategy '{text}' has an empty item", hint="write degrees like N=4,F=2")
    for part in parts:
        if part.upper() == SP:
            degrees[SP] = 1
            continue
        if "=" not in part:
            raise DnnplanError(f"cannot read '{part}' in strategy '{text}'", hint="write degrees like N=4,F=2")
        dim, _, val = part.partition("=")
        dim = dim.strip().upper()
        if dim in degrees:
            raise DnnplanError(f"strategy '{text}' gives {dim} twice", hint=f"give each dimension once, e.g. {dim}={val.strip()}")
        try:
            degrees[dim] = int(val)
        except ValueError:
            raise DnnplanError(f"degree '{val}' of {dim} is not an integer", hint="write degrees like N=4,F=2") from None
    return make_strategy(p, degrees)
