"""Training precisions as the GPU kernels see them (pure tables, plus the process's float32 mode).

A kernel finds the storage format from its arrays (float32, bfloat16, float16). What the arrays do
not say is whether float32 matrix work may run on the tensor cores in TF32: that is the process's
**float32 mode** (:func:`set_precision`, as PyTorch's ``allow_tf32`` flags), set once by the profiler
from ``--precision`` and by the GPU backend from the plan's precision. The names are the cost
model's (costmodel.choices.precision.PRECISIONS; tests/gpu/kernels/test_gpu_precision.py holds them equal).

=========  ===========  ========================  ==============================  ==================
precision  storage      cuBLAS compute type       cuDNN engines (notes allowed)   test tolerance
=========  ===========  ========================  ==============================  ==================
fp32       float32      ``COMPUTE_32F`` (68)      no TENSOR_CORE, no              1e-5
                                                  DOWN_CONVERT_INPUTS
tf32       float32      ``COMPUTE_32F_FAST_TF32``  all                            5e-3
                        (77)
fp16       float16      ``COMPUTE_32F`` (68):      no REDUCED_PRECISION_           5e-3
                        fp32 accumulation          REDUCTION
bf16       bfloat16     ``COMPUTE_32F`` (68)       as fp16                        2e-2
=========  ===========  ========================  ==============================  ==================

The tolerance is the relative norm error ``||gpu - ref|| / ||ref||`` of one kernel against the
numpy kernel in float64 on the same inputs (rounded to the storage format first): float32 lands far
under 1e-5 on these sizes, TF32 near 3e-4 and bfloat16 operands between 1e-3 and 1e-2
(/work/.library/device/METHOD.md's figures, each with a margin).
"""

from __future__ import annotations

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
STORAGE = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}

#: cuBLAS ``cublasComputeType_t`` values (cublas_api.h)
CUBLAS_COMPUTE_32F = 68
CUBLAS_COMPUTE_32F_FAST_TF32 = 77
CUBLAS_COMPUTE_64F = 70
#: CUDA ``cudaDataType_t`` values (library_types.h) by numpy dtype name
CUDA_DATA_TYPE = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 14}
#: cuDNN frontend ``data_type`` member by numpy dtype name
CUDNN_DATA_TYPE = {"float32": "FLOAT", "float64": "DOUBLE", "float16": "HALF", "bfloat16": "BFLOAT16"}
#: NCCL ``ncclDataType_t`` values (nccl.h) by numpy dtype name
NCCL_DATA_TYPE = {"float32": 7, "float64": 8, "float16": 6, "bfloat16": 9, "int64": 4, "int32": 2}

TOLERANCE = {"fp32": 1e-5, "tf32": 5e-3, "fp16": 5e-3, "bf16": 2e-2}
#: ``--check``'s floor per precision (executor.check.gradients): what one process in that
#: precision differs from float64 by on a whole step is measured by the check itself (it allows
#: four times that); this is the least it allows
CHECK_TOLERANCE = {"fp32": 1e-4, "tf32": 1e-2, "fp16": 2e-2, "bf16": 5e-2}

#: The precisions each GPU kernel runs in (the others are refused with a line saying so)
ALL = PRECISIONS
KERNEL_PRECISIONS: dict[str, tuple[str, ...]] = {
    "conv2d": ALL, "linear": ALL, "gemm": ALL,
    # cuDNN's fused attention takes 16-bit operands only (its SDPA graph: FP16 or BF16 io)
    "attention.flash": ("fp16", "bf16"),
    "attention.materialized": ALL,
    "batchnorm": ALL, "layernorm": ALL, "rmsnorm": ALL, "relu": ALL, "gelu": ALL, "swiglu": ALL,
    "dropout": ALL, "add": ALL, "softmax_xent": ALL, "sgd": ALL,
}

_MODE = {"precision": "fp32"}


def storage_of(precision: str) -> str:
    check(precision)
    return STORAGE[precision]


def check(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    return precision


def set_precision(precision: str) -> None:
    """The precision this process's kernels run float32 matrix work in (tf32: on the tensor
    cores); 16-bit arrays carry their own format."""
    _MODE["precision"] = check(precision)


def current() -> str:
    return _MODE["precision"]


def precision_of(dtype_name: str) -> str:
    """The precision a kernel runs in for arrays of ``dtype_name`` under the process's mode."""
    if dtype_name == "bfloat16":
        return "bf16"
    if dtype_name == "float16":
        return "fp16"
    if dtype_name == "float32":
        return "tf32" if _MODE["precision"] == "tf32" else "fp32"
    if dtype_name == "float64":
        return "fp32"
    raise ValueError(f"the GPU kernels do not run {dtype_name} arrays")


def compute_type(dtype_name: str) -> int:
    """cuBLAS compute type for operands of ``dtype_name`` (float32 accumulation everywhere)."""
    if dtype_name == "float64":
        return CUBLAS_COMPUTE_64F
    return CUBLAS_COMPUTE_32F_FAST_TF32 if precision_of(dtype_name) == "tf32" else CUBLAS_COMPUTE_32F


def supports(kernel: str, precision: str) -> bool:
    return check(precision) in KERNEL_PRECISIONS.get(kernel, ())
