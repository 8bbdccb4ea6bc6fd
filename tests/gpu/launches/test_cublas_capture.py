"""GEMMs inside a CUDA graph's capture (kernels.cuda.cublas_direct), against recording doubles of
CuPy and of the cuBLAS library: CuPy refuses cuBLAS while a stream captures, so the handle is bound
to the stream with a workspace before the capture and the GEMMs go to cuBLAS with the arguments
CuPy's wrappers would have passed; outside a capture nothing changes."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from kernels.cuda import cublas_direct, gemm
from tests.support.doubles.fake_cupy import FakeCupy

HANDLE, STREAM = 77, 0x5000


class FakeCublas:
    """The C library: each function records its name and arguments and returns ``status``."""

    def __init__(self, status: int = 0):
        self.calls: list[tuple] = []
        self.status = status

    def __getattr__(self, name):
        if name not in cublas_direct.SIGNATURES:
            raise AttributeError(name)
        return lambda *args: self.calls.append((name, *args)) or self.status


@pytest.fixture()
def doubles(monkeypatch):
    cp = FakeCupy().install(monkeypatch)
    wrapped = []  # CuPy's own wrappers
    cp.cuda.device = SimpleNamespace(get_cublas_handle=lambda: HANDLE)
    cp.cuda.cublas = SimpleNamespace(getVersion=lambda h: 130100,
                                     gemmEx=lambda *a: wrapped.append(("gemmEx", *a)),
                                     gemmStridedBatchedEx=lambda *a: wrapped.append(("gemmStridedBatchedEx", *a)))
    cp.uint8 = np.uint8
    lib = FakeCublas()
    monkeypatch.setattr(cublas_direct, "library", lambda: lib)
    monkeypatch.setattr(cublas_direct, "_WORKSPACES", {})
    monkeypatch.setattr(cublas_direct, "_BOUND", {})
    return cp, lib, wrapped


def _operands(cp, batched: bool):
    shape_a, shape_b = ((3, 4, 5), (3, 5, 6)) if batched else ((4, 5), (5, 6))
    return cp.ascontiguousarray(np.ones(shape_a, np.float32)), cp.ascontiguousarray(np.ones(shape_b, np.float32))


@pytest.mark.parametrize("batched", [False, True])
def test_inside_a_capture_the_gemm_goes_to_cublas_with_cupys_arguments(doubles, batched):
    cp, lib, wrapped = doubles
    a, b = _operands(cp, batched)
    gemm.matmul(a, b)  # eager: CuPy's wrapper
    assert len(wrapped) == 1 and lib.calls == []
    with cublas_direct.bound(STREAM):
        gemm.matmul(a, b)
    # bound before the capture: the stream, then a workspace of its own, then the GEMM
    (set_stream, *_), (set_ws, _, _, nbytes), direct = lib.calls
    assert lib.calls[0] == ("cublasSetStream_v2", HANDLE, STREAM)
    assert set_ws == "cublasSetWorkspace_v2" and nbytes == cublas_direct.WORKSPACE_BYTES
    name = "cublasGemmStridedBatchedEx" if batched else "cublasGemmEx"
    assert direct[0] == name and wrapped[0][0] == name[len("cublas"):].replace("G", "g", 1)
    # the same arguments but the host scalars' and the output's addresses, which each call makes anew
    skip = {6, 15, 16} if batched else {6, 13, 14}
    assert [v for i, v in enumerate(direct[1:]) if i not in skip] == \
        [v for i, v in enumerate(wrapped[0][1:]) if i not in skip]
    gemm.matmul(a, b)  # after the capture: CuPy's wrapper again
    assert len(wrapped) == 2 and len(lib.calls) == 3


def test_the_workspace_is_made_once_and_counted(doubles):
    cp, lib, _ = doubles
    assert cublas_direct.workspace_bytes() == 0
    with cublas_direct.bound(STREAM):
        pass
    with cublas_direct.bound(STREAM):
        pass
    first, second = (c[2] for c in lib.calls if c[0] == "cublasSetWorkspace_v2")
    assert first == second  # replays of the first capture still use it
    assert cublas_direct.workspace_bytes() == cublas_direct.WORKSPACE_BYTES


def test_a_failed_call_raises_and_unbinds(doubles, monkeypatch):
    cp, lib, _ = doubles
    lib.status = 7
    with pytest.raises(RuntimeError, match="cublasSetStream returned cuBLAS status 7"):
        with cublas_direct.bound(STREAM):
            pass
    assert cublas_direct.captured_handle() is None


def test_the_library_is_the_one_the_loader_has_then_the_wheels(tmp_path):
    lib = tmp_path / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcublas.so.13").write_bytes(b"")
    assert cublas_direct.library_paths(13, [str(tmp_path)]) == ["libcublas.so.13", str(lib / "libcublas.so.13")]
