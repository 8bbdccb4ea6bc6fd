"""Which profile tables may price which plans: a table's precision and GPU model against the plan's.

A GPU table times kernels in one precision (its fingerprint's ``precision``; fp32 when absent) on
one GPU model. A plan in another precision is refused (TF32 and float32 time the same float32
calls differently; a bfloat16 plan's calls are other calls). A table of another GPU model than
the machine's datasheet device (an H100 table for ``dgx-a100``), or than the GPU a plan runs on,
is refused unless the user says ``--foreign-profile``; then the compute model's name says whose
kernels priced the plan.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from costmodel.compute.profile_table import ProfileTable, table_precision
from networks.errors import DnnplanError

_MODEL = re.compile(r"\b([A-Z]{1,2}\d{2,3}[A-Z]?)\b")


def gpu_model(name: str | None) -> str | None:
    """The GPU model a device name gives ("NVIDIA H100 80GB HBM3" -> "H100", "A100 SXM4 40GB" ->
    "A100"), None for a name without one (a CPU, ``auto``)."""
    m = _MODEL.search(str(name or "").upper())
    return m.group(1) if m else None


def check_precision(table: ProfileTable, precision: str) -> None:
    have = table_precision(table.fingerprint)
    if have != precision:
        raise DnnplanError(f"the profile table was timed in {have}, the plan is for {precision}", file=table.source,
                           field="fingerprint.precision",
                           hint=f"profile in that precision (`dnnplan profile ... --backend cupy --precision "
                                f"{precision}`), or plan with --precision {have}")


def foreign_gpu(fp: Mapping[str, Any], device_name: str | None) -> str | None:
    """Why a GPU table's kernels are not ``device_name``'s (None: they are, or nothing says)."""
    if fp.get("backend") != "cupy":
        return None
    table, other = gpu_model(fp.get("device")), gpu_model(device_name)
    if table and other and table != other:
        return f"timed on {fp.get('device')} ({table}), not {device_name} ({other})"
    return None


def check_gpu(table: ProfileTable, device_name: str | None, foreign_ok: bool, what: str) -> str | None:
    """Refuse a table of another GPU model than ``device_name`` (``what``: the machine or the GPU
    running the plan), or with ``foreign_ok`` return the line that says whose kernels price it."""
    why = foreign_gpu(table.fingerprint, device_name)
    if why is None:
        return None
    if not foreign_ok:
        raise DnnplanError(f"the profile table's kernels were {why}, {what}", file=table.source,
                           hint="profile that GPU, or pass --foreign-profile to plan from these kernel times anyway")
    return f"kernel times of another GPU: {why}"
