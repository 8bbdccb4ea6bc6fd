"""cuDNN's convolution engines as dnnplan's convolution algorithms: which engines form each family,
chosen by the engines' numerical notes (pure: no cuDNN here; :mod:`kernels.cuda.conv` applies it).

cuDNN lists, for one convolution, a few dozen execution plans ("engine configs", named
``eng<id>[_k<knob>=<value>...]``; the H100 probe of 2026-11-27 saw 35-44 per shape). Each engine
carries **numerical notes** (cuDNN's ``cudnnBackendNumericalNote_t``): ``TENSOR_CORE`` (runs on the
tensor cores), ``DOWN_CONVERT_INPUTS`` (float32 inputs rounded to TF32 or a 16-bit format),
``REDUCED_PRECISION_REDUCTION`` (accumulates below float32), ``FFT``, ``WINOGRAD`` and
``WINOGRAD_TILE_{4x4,6x6,13x13}``, ``NONDETERMINISTIC``, ``STRICT_NAN_PROP``. The notes say which
algorithm an engine computes, so they group the engines into the four algorithm names the planner
already weighs (costmodel.calls.algorithms.CONV_ALGORITHMS):

============  ==============================================================================
family        engines
============  ==============================================================================
``im2col``    neither FFT nor Winograd: implicit GEMM, precomputed-index implicit GEMM and
              explicit GEMM engines, on CUDA or tensor cores (the GEMM over unrolled patches
              of [BH19] App. B.2, the column matrix formed in tiles or in the workspace)
``direct``    the same GEMM engines restricted to no workspace: the convolution computed from
              the input itself, no unrolled buffer (cuDNN's IMPLICIT_GEMM without workspace)
``fft``       engines with the ``FFT`` note (whole-image and tiled FFT)
``winograd``  engines with the ``WINOGRAD`` note (fused and non-fused, any tile)
============  ==============================================================================

and the precision decides which notes are allowed at all (:func:`precision_filter`): strict
``fp32`` refuses ``TENSOR_CORE`` and ``DOWN_CONVERT_INPUTS`` (the probe's float32 runs kept 10 of 41
plans that way); ``tf32`` allows both (cuDNN's TF32 engines are the float32 tensor-core ones); the
16-bit precisions refuse ``REDUCED_PRECISION_REDUCTION``, so every engine accumulates in float32 as
frameworks' mixed precision does.

The Python frontend (nvidia-cudnn-frontend 1.16.0) reports an engine's notes only through its
filters: ``select_numeric_notes(notes)`` bars every engine config lacking a note, and
``deselect_numeric_notes(notes)`` every one having one (``include/cudnn_frontend/plans.h``,
``filter_numeric_notes``: barred = barred or (has note ? not keep : keep), per note, so selecting
several notes keeps the engines having all of them; deselecting several drops those having any).
A family is therefore one graph with :func:`family_filter`'s calls applied; :func:`families_of`
is the same rule on a known set of notes (the tests hold the two together). Within a family the
fastest of the first :data:`TOP_K` engines in the heuristics' order is the family's engine at that
shape: timing every plan (35-44 per shape, some of them 100x slower than the best) would make a
profile take minutes per network. Whether the pruning misses a faster engine is measured on a GPU
(bench/gpu/engines_probe.py times every plan of a few shapes beside the top-k choice).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FAMILIES = ("im2col", "direct", "fft", "winograd")
WINOGRAD_NOTES = ("WINOGRAD", "WINOGRAD_TILE_4x4", "WINOGRAD_TILE_6x6", "WINOGRAD_TILE_13x13")
#: Engines timed per family and shape (the heuristics' first ones that cuDNN can build)
TOP_K = 4
#: Every numerical note of cuDNN 9 (cudnn_frontend's ``NumericalNote_t`` minus NOT_SET)
NOTES = ("TENSOR_CORE", "DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION", "FFT", "NONDETERMINISTIC",
         *WINOGRAD_NOTES, "STRICT_NAN_PROP")

_NAME = re.compile(r"eng(\d+)((?:_k\d+=-?\d+)*)$")


@dataclass(frozen=True)
class NoteFilter:
    """What to apply to a cuDNN graph's execution plans: keep those with every note of
    ``select``, drop those with any note of ``deselect``, drop those needing more workspace than
    ``max_workspace_bytes`` (None: no limit)."""

    select: tuple[str, ...] = ()
    deselect: tuple[str, ...] = ()
    max_workspace_bytes: int | None = None

    def keeps(self, notes, workspace_bytes: int = 0) -> bool:
        """Whether an engine with ``notes`` and this workspace passes (the frontend's rule)."""
        have = set(notes)
        if any(n not in have for n in self.select) or any(n in have for n in self.deselect):
            return False
        return self.max_workspace_bytes is None or workspace_bytes <= self.max_workspace_bytes


def precision_filter(precision: str) -> NoteFilter:
    """The notes a precision refuses (module docstring)."""
    if precision == "fp32":
        return NoteFilter(deselect=("TENSOR_CORE", "DOWN_CONVERT_INPUTS"))
    if precision == "tf32":
        return NoteFilter()
    if precision in ("bf16", "fp16"):
        return NoteFilter(deselect=("REDUCED_PRECISION_REDUCTION",))
    raise ValueError(f"unknown precision {precision!r}")


def family_filter(family: str, precision: str) -> NoteFilter:
    """The filter whose surviving engines are ``family``'s under ``precision``."""
    base = precision_filter(precision)
    if family == "fft":
        return NoteFilter(("FFT",), base.deselect)
    if family == "winograd":
        return NoteFilter(("WINOGRAD",), base.deselect)
    gemm = base.deselect + ("FFT",) + WINOGRAD_NOTES
    if family == "im2col":
        return NoteFilter((), gemm)
    if family == "direct":
        return NoteFilter((), gemm, 0)
    raise ValueError(f"unknown convolution algorithm {family!r}; choose one of {FAMILIES}")


def families_of(notes, workspace_bytes: int, precision: str) -> tuple[str, ...]:
    """The families an engine with ``notes`` and this workspace belongs to under ``precision``
    (none when the precision refuses it; ``direct`` and ``im2col`` share the GEMM engines that
    need no workspace)."""
    return tuple(f for f in FAMILIES if family_filter(f, precision).keeps(notes, workspace_bytes))


def parse_plan_name(name: str) -> tuple[int, dict[int, int]]:
    """(engine id, {knob: value}) of a plan name such as ``eng67_k2=0_k13=0`` (an operation tag
    before it, ``ConvFwd_eng15_k5=1``, is ignored)."""
    m = _NAME.search(name)
    if m is None:
        raise ValueError(f"not a cuDNN plan name: {name!r}")
    knobs = {int(k): int(v) for k, v in re.findall(r"_k(\d+)=(-?\d+)", m.group(2))}
    return int(m.group(1)), knobs


def first_k(indices, k: int = TOP_K) -> list:
    """The first ``k`` of the plans a family kept, in the heuristics' order."""
    return list(indices)[:max(1, int(k))]
