"""Builds every cuDNN graph dnnplan makes (kernels.cuda.conv's convolution graphs per pass, format and
family; kernels.cuda.attention's SDPA forward and backward graphs) with the real frontend, one line
per graph: ``ok`` with what the frontend says of it, or the frontend's error (``FAIL``; ``none`` for an FFT
or Winograd family cuDNN has no engine for, which runs the im2col family's engine instead).

On a GPU (default): the graphs as the kernels build them, then, for a convolution, how many engine
configs the heuristics list and the family's first ``TOP_K`` that build (what the kernel times). A graph that
fails here fails the same way in a profile or a run, so this is the GPU run's first, seconds-long check.

Without a GPU (``--validate-only``): the graphs up to ``validate()``, the frontend's own checks of
dims, strides, data types, masks and the SDPA support surface (handle 0; the handle-needing steps are
skipped). It needs nvidia-cudnn-frontend 1.16.0, a cuDNN 9 library (nvidia-cudnn-cu13's
``libcudnn.so.9``, ``_graph``, ``_heuristic``, ``_ops``, ``_cnn``, ``_adv``) and, for SDPA, whose
checks ask the CUDA runtime for the device, a ``libcudart.so.13`` answering ``cudaGetDevice`` and
``cudaGetDeviceProperties`` (an H100's: major 9, 132 SMs) put first on ``LD_LIBRARY_PATH`` (bench/gpu/fake_cudart.c). On
2026-11-27 every graph below validated that way (frontend 1.16.0 on cuDNN 9.28).

    python bench/gpu/cudnn_validate.py [--validate-only]
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kernels.cuda import attention, conv, libs  # noqa: E402
from kernels.cuda.engines import FAMILIES, TOP_K, family_filter  # noqa: E402
from kernels.cuda.precision import set_precision, storage_of  # noqa: E402
from networks.ops.conv_geometry import make_geom  # noqa: E402

#: (x shape, w shape, stride, padding, dilation, groups): a ResNet 3x3, a grouped strided dilated one
CONVS = (((8, 64, 14, 14), (64, 64, 3, 3), 1, 1, 1, 1), ((2, 6, 9, 7), (4, 3, 3, 3), (2, 1), (1, 1, 0, 0), (1, 2), 2))
#: (q shape, k shape, causal): self-attention, grouped-query with fewer queries (bottom-right causal)
SDPAS = (((2, 4, 64, 64), (2, 4, 64, 64), True), ((2, 4, 32, 128), (2, 2, 64, 128), True),
         ((2, 4, 64, 64), (2, 4, 64, 64), False))


class _Validating:
    """A real ``pygraph`` whose handle-needing steps are skipped (``--validate-only``)."""

    def __init__(self, cudnn, **kw):
        self._g = cudnn.pygraph(**kw)

    def __getattr__(self, name):
        return getattr(self._g, name)

    def build_operation_graph(self):
        pass

    def create_execution_plans(self, modes):
        pass

    def build(self, modes=None):
        self._g.validate()


def _validate_only() -> None:
    import cudnn  # noqa: PLC0415 - no cupy here: the frontend itself

    proxy = type(sys)("cudnn_validating")
    proxy.__dict__.update({k: getattr(cudnn, k) for k in dir(cudnn) if not k.startswith("__")})
    proxy.pygraph = lambda **kw: _Validating(cudnn, **{**kw, "handle": 0})
    libs.cudnn = lambda: proxy
    conv.handle = attention.handle = lambda: 0


def _conv_line(pass_: str, geo, precision: str, family: str, full: bool) -> str:
    g = make_geom(*geo)
    graph, _ = conv._build(pass_, g, storage_of(precision), family_filter(family, precision))
    if not full:
        return "validated"
    count = graph.get_execution_plan_count()
    built = conv._candidates(graph, None, TOP_K)  # as kernels.cuda.conv chooses (all: minutes of builds)
    return f"{count} engine configs; the family's first {len(built)} that build: {[name for _, name, _ in built]}"


def _sdpa_line(kind: str, q, k, causal: bool) -> str:
    build = attention._flash_fwd_graph if kind == "fwd" else attention._flash_bwd_graph
    graph, _ = build(q, k, "bfloat16", causal, q[-1] ** -0.5)
    return "validated" if isinstance(graph, _Validating) else f"built, workspace {graph.get_workspace_size()} B"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--validate-only", action="store_true", help="no GPU: the frontend's validate() alone")
    args = ap.parse_args()
    if args.validate_only:
        _validate_only()
    failed = 0
    cases = [(("conv", p, geo, prec, fam), lambda p=p, geo=geo, prec=prec, fam=fam: (
        set_precision(prec), _conv_line(p, geo, prec, fam, not args.validate_only))[1])
        for p in conv.PASSES for geo in CONVS for prec in ("fp32", "tf32", "bf16", "fp16") for fam in FAMILIES]
    cases += [(("sdpa", kind, q, k, causal), lambda kind=kind, q=q, k=k, causal=causal: _sdpa_line(kind, q, k, causal))
              for q, k, causal in SDPAS for kind in ("fwd", "bwd")]
    for label, case in cases:
        try:
            print("ok  ", *label, "--", case(), flush=True)
        except Exception as err:  # noqa: BLE001 - every graph reported, the failures named
            optional = label[0] == "conv" and label[-1] in ("fft", "winograd")  # these fall back to im2col
            failed += not optional
            print("none" if optional else "FAIL", *label, "--", f"{type(err).__name__}: {str(err)[:300]}", flush=True)
            traceback.print_exc(limit=2)
    print(f"{len(cases) - failed} of {len(cases)} graphs ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
