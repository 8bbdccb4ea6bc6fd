"""What every cuDNN graph of the GPU kernel set shares: the handle (one per device, on the current
stream at each execution), strides, data types, the workspace, the cache of built graphs.

A graph is built once per (operation, shapes, format, options) and kept in :data:`CUDNN_GRAPHS`
for the process (building costs milliseconds to seconds; executing microseconds). The workspace is
one device buffer per device, grown to the largest a graph has asked for: like a framework's
caching allocator, it stays allocated, and the memory pool's peak counts it.
"""

from __future__ import annotations

from kernels.cuda import libs
from kernels.cuda.precision import CUDNN_DATA_TYPE

#: built graphs by key (kernels.cuda.conv, kernels.cuda.attention)
CUDNN_GRAPHS: dict = {}
_HANDLES: dict[int, int] = {}
_WORKSPACE: dict[int, object] = {}


def strides(shape) -> list[int]:
    """C-contiguous strides, in elements."""
    out, step = [], 1
    for s in reversed(tuple(shape)):
        out.append(step)
        step *= int(s)
    return list(reversed(out))


def cudnn_type(dtype_name: str):
    return getattr(libs.cudnn().data_type, CUDNN_DATA_TYPE[dtype_name])


def handle() -> int:
    """This device's cuDNN handle, set to the current stream."""
    cp = libs.cupy()
    cudnn = libs.cudnn()
    dev = cp.cuda.Device().id
    h = _HANDLES.get(dev)
    if h is None:
        h = _HANDLES[dev] = cudnn.create_handle()
    cudnn.set_stream(handle=h, stream=cp.cuda.get_current_stream().ptr)
    return h


#: bumped whenever a device's workspace is made again (grown): a prepared call's pointer to it is then stale
WORKSPACE_VERSION = [0]


def workspace(nbytes: int):
    """A device buffer of at least ``nbytes`` (at least 1 byte: cuDNN wants a valid pointer)."""
    cp = libs.cupy()
    dev = cp.cuda.Device().id
    ws = _WORKSPACE.get(dev)
    if ws is None or ws.nbytes < max(int(nbytes), 1):
        ws = _WORKSPACE[dev] = cp.empty(max(int(nbytes), 1), dtype=cp.uint8)
        WORKSPACE_VERSION[0] += 1
    return ws


def workspace_bytes() -> int:
    """What the workspace holds on the current device now."""
    ws = _WORKSPACE.get(libs.cupy().cuda.Device().id)
    return 0 if ws is None else int(ws.nbytes)


def pointers(tensors: dict) -> dict:
    """{graph tensor: device pointer} from {graph tensor: cupy array}."""
    return {t: a.data.ptr for t, a in tensors.items()}


def execute(graph, tensors: dict, index: int | None = None) -> None:
    """Run a built graph (its plan at ``index``, else the one it built) on the current stream."""
    h = handle()
    size = graph.get_workspace_size() if index is None else graph.get_workspace_size_plan_at_index(index)
    ws = workspace(size)
    if index is None:
        graph.execute(pointers(tensors), ws.data.ptr, handle=h)
    else:
        graph.execute_plan_at_index(pointers(tensors), ws.data.ptr, index, handle=h)
