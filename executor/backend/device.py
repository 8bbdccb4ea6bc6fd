"""The device interface: what the runtime, the ops and the communication code may ask of a device.

A device is one backend over this small interface (as tinygrad adds a device as one
``runtime/ops_<name>.py`` over a fixed Allocator/Program interface): the runtime, ops and comm
packages never import an array or MPI library of their own and never ask which array module
they hold; they take it from the backend (``backend.xp``), make every collective through a
:class:`Communicator` the backend gave them, and read the clock the backend keeps. A capability
that only some devices have is its own Protocol, checked with ``isinstance(backend, Protocol)``:
:class:`DeviceMemory` (arrays outside the host's memory), :class:`LaunchBound` (launches cost the host
time, so the runtime makes fewer), :class:`StepGraphs` (a step recorded once and replayed).

What a backend provides (:class:`Backend`):

- **arrays and their module**: ``xp`` (``numpy`` on the host, ``cupy`` on an NVIDIA GPU), with
  which every array the executor makes is allocated (``xp.empty``, ``xp.zeros``); the kernels
  find the same module from their arguments (kernels.xp.module_of);
- **memory**: :meth:`Backend.held_bytes` of arrays kept across steps, and
  :meth:`Backend.peak_bytes` allocated on top of them while one step runs;
- **streams and synchronisation**: :meth:`Backend.synchronize` waits for the work queued on the
  rank's stream (nothing to wait for on the host);
- **a clock**: :meth:`Backend.now_s`, the seconds every span is timed with (the host's monotonic
  clock; on a GPU the time of an event recorded on the stream, so a span measures the device's
  work, not the host's launch);
- **collectives**: :meth:`Backend.communicator` joins the launcher's MPI communicator (the world
  of ``mpiexec``, or a group of it) and returns a :class:`Communicator` over the same ranks.

What the GPU backend (``cuda.py``: cupy, CUDA events, NCCL) implements, without changing this
interface (it is also an :class:`EventClock`, so spans are events resolved at each step's end):

- ``xp = cupy``; one CUDA stream per rank (device ``local rank mod devices``), on which the
  kernels and the collectives run;
- ``synchronize()``: that stream's ``synchronize()``;
- ``now_s()``: record a CUDA event on the stream, wait for it, and return a base host time plus
  ``cupy.cuda.get_elapsed_time(base_event, event) / 1e3`` (the base event recorded when the
  backend starts), so spans are device time on the host clock's scale;
- ``held_bytes``/``peak_bytes``: the arrays' ``nbytes``; the memory pool's peak of used bytes
  over the step (``cupy.get_default_memory_pool().used_bytes()`` sampled, or the driver's
  ``cudaMemGetInfo`` before and after), on top of what it held when the step began;
- ``to_host``/``from_host`` (:class:`DeviceMemory`): ``cupy.asnumpy`` and ``cupy.asarray``;
- ``communicator(world)``: an NCCL communicator over ``world``'s ranks, its unique id made by
  rank 0 and broadcast over ``world`` (``world.bcast``), each :meth:`Communicator.split` one more
  NCCL communicator (the id broadcast within the new group, split by colour over ``world``
  first); allreduce, allgather, reduce-scatter and send/recv as NCCL calls on the stream,
  all-to-all(v) as grouped sends and receives (``ncclGroupStart``/``ncclGroupEnd``); when ranks
  share one GPU (NCCL refuses that), :class:`executor.backend.staging.StagedCommunicator` over
  the host's MPI communicator instead, which copies every buffer to the host and back.

Arrays in and out of a :class:`Communicator` are the backend's own (``xp``) arrays, contiguous,
of float32 or float64 (every rank the same dtype and, per collective, the same counts): the
communicator, not its caller, hands them to MPI or NCCL. Small Python objects (a result, a
verdict, samples) move with the ``*_object`` calls, pickled, through the host.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable, Iterable, Protocol, Sequence, runtime_checkable

#: An array of the backend's module: ``numpy.ndarray`` on the host, ``cupy.ndarray`` on a GPU.
Array = Any


@runtime_checkable
class Request(Protocol):
    """A message :meth:`Communicator.isend` started."""

    def test(self) -> bool:
        """Whether the message has left (its buffer may be reused or let go)."""


@runtime_checkable
class Communicator(Protocol):
    """A group of ranks and the collectives the executor makes over it (collective: every rank of
    the group calls, in the same order, with the same counts)."""

    rank: int
    size: int

    def barrier(self) -> None:
        """Wait until every rank of the group has arrived."""

    def allreduce(self, arr: Array, op: str = "sum") -> Array:
        """Sum (``op="max"``: the maximum of) ``arr`` over the group, in place; returns ``arr``."""

    def allgather(self, send: Array | None, recv: Array, counts: Sequence[int], displs: Sequence[int]) -> None:
        """Rank ``k``'s ``counts[k]`` elements at ``recv[displs[k]:]`` on every rank; ``send``
        None: this rank's part is already in place in ``recv``."""

    def reduce_scatter(self, send: Array, recv: Array, counts: Sequence[int]) -> None:
        """Sum ``send`` over the group; rank ``k`` receives the ``counts[k]`` elements of its part
        (the parts consecutive, rank by rank)."""

    def alltoallv(self, send: Array, send_counts: Sequence[int], send_displs: Sequence[int],
                  recv: Array, recv_counts: Sequence[int], recv_displs: Sequence[int]) -> None:
        """Each rank sends ``send_counts[k]`` elements from ``send_displs[k]`` to rank ``k`` and
        receives ``recv_counts[k]`` from it at ``recv_displs[k]``."""

    def isend(self, arr: Array, dest: int, tag: int) -> Request:
        """Start sending ``arr`` to rank ``dest``; ``arr`` must stay alive and unchanged until
        the request says it has left."""

    def recv(self, arr: Array, source: int, tag: int) -> None:
        """Receive into ``arr`` from rank ``source`` (blocking)."""

    def wait_all(self, requests: Iterable[Request]) -> None:
        """Wait until every message of ``requests`` has left."""

    def split(self, color: int | None, key: int) -> Communicator | None:
        """The communicator of the ranks that give the same ``color``, ordered by ``key``; None
        for a rank that gives None (collective over this group)."""

    def free(self) -> None:
        """Let the communicator go (collective)."""

    def bcast_object(self, obj: object, root: int) -> object:
        """``root``'s ``obj`` on every rank."""

    def gather_object(self, obj: object, root: int) -> list | None:
        """Every rank's ``obj`` in rank order on ``root``, None elsewhere."""

    def allgather_object(self, obj: object) -> list:
        """Every rank's ``obj`` in rank order, on every rank."""


@runtime_checkable
class Backend(Protocol):
    """A device the executor runs a plan on (see the module docstring for each part)."""

    name: str
    xp: ModuleType

    def communicator(self, world: object) -> Communicator:
        """The group of ``world``'s ranks (the launcher's MPI communicator: mpi4py's
        ``COMM_WORLD``, ``COMM_SELF`` or a group of them) as this device makes collectives."""

    def synchronize(self) -> None:
        """Wait for the work queued on this rank's stream."""

    def now_s(self) -> float:
        """Seconds on this device's clock, once the work queued before the call is done."""

    def held_bytes(self, arrays: Iterable[Array]) -> int:
        """Bytes of the distinct arrays given (an array listed twice counts once)."""

    def peak_bytes(self, run: Callable[[], object]) -> int:
        """The most bytes allocated at once on top of what was allocated when ``run`` started,
        while it ran."""


@runtime_checkable
class EventClock(Protocol):
    """A device whose clock can mark its stream without waiting (CUDA events): the timers resolve
    a step's marks once, at its end (executor.runtime.timers), instead of waiting for the device at
    every span. ``seconds(a, b)`` waits for ``b``; ``at(mark)`` is a mark on :meth:`Backend.now_s`'s
    scale."""

    def mark(self) -> Any:
        """A mark recorded on the stream now (the work queued before it done when it completes)."""

    def seconds(self, start: Any, end: Any) -> float:
        """Device seconds from ``start`` to ``end``."""

    def at(self, mark: Any) -> float:
        """``mark``'s time on the backend's clock."""

    def recycle(self, marks: Iterable[Any]) -> None:
        """``marks`` have been read: the device may record them again (a pool of CUDA events)."""


@runtime_checkable
class LaunchBound(Protocol):
    """A device whose kernels the host launches one by one onto a queue, each launch costing host
    time (a GPU): the runtime makes fewer, larger launches where the results are the same, such as
    every weight's update in one multi-tensor launch (kernels.optimizer.sgd_momentum_update_many),
    its time shared among the layers by their parameter counts (executor.runtime.timers). The
    host's numpy calls are the work itself, so it keeps one call and one span per layer."""

    def fuse_launches(self) -> bool:
        """Whether fewer launches are worth coarser spans now."""


@runtime_checkable
class StepGraphs(Protocol):
    """A device that can record the work one step queues on the rank's stream and replay it (CUDA
    graphs): the runtime captures a whole step after its eager warm-up and times each replay with
    one pair of marks (executor.runtime.graphs)."""

    def graph_refusal(self) -> str | None:
        """Why this device cannot capture a step now (ranks sharing a GPU stage their collectives
        through the host), None when it can."""

    def capture(self, run: Callable[[], Any]) -> tuple[Any, Any]:
        """(graph, what ``run`` returned): the work ``run`` queues on the stream recorded, not
        done, its arrays in memory kept for the graph alone."""

    def replay(self, graph: Any) -> None:
        """Queue the recorded work again (into the same arrays)."""


@runtime_checkable
class DeviceMemory(Protocol):
    """A device whose arrays are not in the host's memory: it copies them both ways."""

    def to_host(self, arr: Array) -> Any:
        """A host (numpy) copy of ``arr``."""

    def from_host(self, arr: Any, out: Array | None = None) -> Array:
        """``arr`` (numpy) on the device: into ``out`` when given (same shape and dtype), else new."""


def on_host(backend: Backend, arr: Array) -> Any:
    """``arr`` as a host (numpy) array: a copy from a :class:`DeviceMemory` device, else itself."""
    return backend.to_host(arr) if isinstance(backend, DeviceMemory) else arr


def on_device(backend: Backend, arr: Any) -> Array:
    """A host (numpy) array on ``backend``'s device: a copy there, or itself on the host."""
    return backend.from_host(arr) if isinstance(backend, DeviceMemory) else arr
