"""CUDA C of the fused passes (text in kernels/cuda/cu/; :mod:`kernels.cuda.launch` compiles it with
cupy's NVRTC).

One source, compiled once per storage format: a prelude defines ``T`` (the element as stored) and
``LD``/``ST`` (load to float, store from float), so every kernel computes in float32 whatever it
reads, as frameworks' mixed precision does. 16-bit formats are read as their bits
(``unsigned short``) and converted with PTX ``cvt`` instructions, so no CUDA header is needed:
bfloat16 -> float is a 16-bit shift, float -> bfloat16 is ``cvt.rn.bf16.f32`` (sm_80 and later),
float16 both ways ``cvt.f32.f16`` / ``cvt.rn.f16.f32``. Sums over many elements accumulate in float
(double for batch-norm statistics, which the executor all-reduces in float64).

``bench/gpu/nvrtc_check.py`` compiles every variant for sm_90 with NVRTC on a computer without a
GPU; tests/gpu/kernels/test_gpu_precision.py checks the text's structure.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

DTYPES = ("float32", "float16", "bfloat16")

_PRELUDE = {
    "float32": r"""
typedef float T;
__device__ __forceinline__ float LD(const T* p, long long i) { return p[i]; }
__device__ __forceinline__ void ST(T* p, long long i, float v) { p[i] = v; }
""",
    "bfloat16": r"""
typedef unsigned short T;
__device__ __forceinline__ float LD(const T* p, long long i) {
    return __uint_as_float(((unsigned int)p[i]) << 16);
}
__device__ __forceinline__ void ST(T* p, long long i, float v) {
    unsigned short u;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(u) : "f"(v));
    p[i] = u;
}
""",
    "float16": r"""
typedef unsigned short T;
__device__ __forceinline__ float LD(const T* p, long long i) {
    unsigned short u = p[i];
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(u));
    return f;
}
__device__ __forceinline__ void ST(T* p, long long i, float v) {
    unsigned short u;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(u) : "f"(v));
    p[i] = u;
}
""",
}

#: The files of the source, in order (kernels/cuda/cu/): shared helpers, then the kernels
FILES = ("common.cuh", "elementwise.cu", "multi_tensor.cu", "reductions.cu", "batchnorm.cu", "rows.cu", "pool.cu")
_DIR = Path(__file__).parent / "cu"


@lru_cache(maxsize=None)
def _text(name: str) -> str:
    return (_DIR / name).read_text(encoding="utf-8")


def source(dtype: str) -> str:
    """The whole CUDA source for arrays of ``dtype`` (every kernel above)."""
    if dtype not in _PRELUDE:
        raise ValueError(f"the fused GPU kernels take {', '.join(DTYPES)}, not {dtype}")
    return _PRELUDE[dtype] + "".join(_text(name) for name in FILES)


def kernel_names() -> list[str]:
    """Every ``extern "C"`` kernel of the source, in order."""
    text = "".join(_text(name) for name in FILES[1:])
    out = []
    for part in text.split('extern "C" __global__ void ')[1:]:
        out.append(part.split("(", 1)[0].strip())
    return out
