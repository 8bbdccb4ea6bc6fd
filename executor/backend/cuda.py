"""The GPU backend: cupy arrays on one CUDA device per rank, one stream, CUDA events for the clock,
the memory pool's peak, NCCL collectives (executor.backend.device's docstring lists each part).

- **Device**: local rank ``mod`` the devices this node has; the local rank is the launcher's
  (``OMPI_COMM_WORLD_LOCAL_RANK``, ``MPI_LOCALRANKID``, ``SLURM_LOCALID``, ``LOCAL_RANK``), else
  the rank among those with the same host name (:func:`local_rank`).
- **Stream**: one non-blocking stream per rank, made current, on which every kernel, copy and
  collective runs; ``synchronize`` waits for it.
- **Clock**: ``now_s`` records an event on the stream, waits for it, and returns the host time the
  backend started plus the device time since a base event recorded then: a span measures the
  device's work, on the host clock's scale. As an EventClock (``mark``/``seconds``/``at``/``recycle``)
  it lets the timers record a step's spans as events and wait once, at the step's end, so the host
  queues kernels ahead of the device (as PyTorch's eager mode does) instead of waiting at every
  span; the events come from a pool, each read event recorded again (none made per span).
- **Memory**: the arrays' ``nbytes``; the peak is the pool's (executor.backend.cuda_memory) plus
  the cuDNN workspace the rank holds.
- **Collectives**: NCCL (executor.backend.nccl) when every rank of the job has a GPU of its own;
  when two ranks share one (NCCL refuses that), every rank stages through the host's MPI
  (executor.backend.staging) and :attr:`staged` says so for the report.
- **Precision**: the plan's, set once for the process's kernels (kernels.cuda.precision).
- **Graphs**: a step captured as a CUDA graph in a memory pool of its own and replayed
  (``capture``/``replay``; cuBLAS bound to the stream with a workspace of its own first,
  kernels.cuda.cublas_direct; the dropout step counter advanced inside, kernels.cuda.elementwise),
  unless collectives are staged through the host (``graph_refusal``).
"""

from __future__ import annotations

import os
import socket
import time

from executor.backend.cuda_memory import device_held_bytes, pool_peak_bytes
from executor.backend.host import HostCommunicator
from executor.backend.nccl import NcclCommunicator
from executor.backend.staging import StagedCommunicator
from kernels.cuda import cublas_direct, elementwise, libs
from kernels.cuda.cudnn_graphs import workspace_bytes
from kernels.cuda.precision import set_precision

LOCAL_RANK_VARS = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MPICH_LOCALRANKID", "PMI_LOCAL_RANK",
                   "SLURM_LOCALID", "LOCAL_RANK")


def local_rank(world, environ=None) -> int:
    """This rank's index among the ranks on its node (module docstring)."""
    env = os.environ if environ is None else environ
    for var in LOCAL_RANK_VARS:
        if env.get(var, "").isdigit():
            return int(env[var])
    hosts = world.allgather(socket.gethostname())
    mine = hosts[world.Get_rank()]
    return sum(1 for r in range(world.Get_rank()) if hosts[r] == mine)


def shared_devices(placements: list[tuple[str, str]]) -> bool:
    """Whether two ranks of ``placements`` ((host name, device bus id) per rank) share a GPU."""
    return len(set(placements)) < len(placements)


class CudaBackend:
    """cupy + CUDA events + NCCL (or host staging) on one GPU per rank."""

    name = "cuda"

    def __init__(self, device: int, precision: str = "fp32"):
        cp = libs.cupy()
        self.xp = cp
        self.device_id = int(device) % cp.cuda.runtime.getDeviceCount()
        cp.cuda.Device(self.device_id).use()
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.stream.use()
        set_precision(precision)
        self.precision = precision
        self.staged = False  # True once ranks are found to share a GPU (communicator)
        self._events: list = []  # CUDA events read and free to record again (mark, recycle)
        self._graph_pools: list = []  # the memory of captured steps (capture)
        self._base = cp.cuda.Event()
        self._base.record(self.stream)
        self._base.synchronize()
        self._base_host = time.perf_counter()

    # -- device memory both ways (executor.backend.device.DeviceMemory) ----------------------

    def to_host(self, arr):
        return self.xp.asnumpy(arr, stream=self.stream)

    def from_host(self, arr, out=None):
        if out is None:
            return self.xp.asarray(arr)
        out.set(arr, stream=self.stream)
        return out

    # -- the Backend interface -------------------------------------------------------------

    def communicator(self, world):
        host = HostCommunicator(world)
        here = (socket.gethostname(), self.xp.cuda.Device(self.device_id).pci_bus_id)
        self.staged = shared_devices(host.allgather_object(here))
        staging = StagedCommunicator(self, host)
        if self.staged:
            return staging
        return NcclCommunicator(host, libs.nccl(), self.stream.ptr, staging)

    def synchronize(self) -> None:
        self.stream.synchronize()

    def now_s(self) -> float:
        ev = self.mark()
        ev.synchronize()
        at = self._base_host + self.xp.cuda.get_elapsed_time(self._base, ev) / 1e3
        self.recycle([ev])
        return at

    # -- marks on the stream (executor.backend.device.EventClock) -----------------------------

    def mark(self):
        """An event from the pool (a new one only when every pooled one is in use), recorded."""
        ev = self._events.pop() if self._events else self.xp.cuda.Event()
        ev.record(self.stream)
        return ev

    def recycle(self, marks) -> None:
        self._events.extend(marks)

    def seconds(self, start, end) -> float:
        end.synchronize()
        return self.xp.cuda.get_elapsed_time(start, end) / 1e3

    def at(self, mark) -> float:
        return self._base_host + self.seconds(self._base, mark)

    def held_bytes(self, arrays) -> int:
        return device_held_bytes(arrays)

    # -- launches cost the host time (executor.backend.device.LaunchBound) ----------------------

    def fuse_launches(self) -> bool:
        return True

    # -- a step recorded once and replayed (executor.backend.device.StepGraphs) -----------------

    def graph_refusal(self) -> str | None:
        if self.staged:
            return ("ranks share a GPU, so collectives are staged through the host's MPI, which a CUDA graph "
                    "cannot capture")
        return None

    def capture(self, run):
        """``run``'s work on the rank's stream as a CUDA graph (cupy's ``Stream.begin_capture``, relaxed
        mode, and ``end_capture``: cupy/cupy cupy/cuda/stream.pyx and graph.pyx), its arrays from a
        memory pool of its own that nothing else allocates from, kept as long as the backend, so a
        replay's buffers are never another array's."""
        cp = self.xp
        pool = cp.cuda.MemoryPool()
        self._graph_pools.append(pool)
        elementwise.dropout_step()  # made outside the graph's pool; each replay advances it (below)
        # cuBLAS bound to the stream with a workspace of its own before the capture (CuPy's wrappers refuse it inside)
        with cublas_direct.bound(self.stream.ptr), cp.cuda.using_allocator(pool.malloc):
            self.stream.begin_capture()
            try:
                elementwise.advance_dropout_step()  # a new dropout mask at each replay
                out = run()
            finally:
                graph = self.stream.end_capture()
        graph.upload(self.stream)
        return graph, out

    def replay(self, graph) -> None:
        graph.launch(self.stream)

    def peak_bytes(self, run) -> int:
        return pool_peak_bytes(self.xp, run, self.synchronize) + workspace_bytes() + cublas_direct.workspace_bytes()

    def describe(self) -> dict:
        """What the report says of the device: its name, and whether collectives were staged."""
        props = self.xp.cuda.runtime.getDeviceProperties(self.device_id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        return {"device": name, "device_id": self.device_id, "staged": self.staged, "precision": self.precision}
