"""The collectives one training step makes, as the cost model prices them, listed so that a run
can time exactly these (``dnnplan execute --fresh-profile``, profiler.in_step.collectives). Pure.

Each :class:`CommCall` is a collective, its bytes (as :mod:`costmodel.comm.collectives` means them;
``alltoallv``: the most bytes a rank receives in a reshard), the size of the group it runs in and
the cache state it meets in the step: ``cold`` after a layer's kernels (reshards, halo exchanges,
partial sums, statistics), ``warm`` after another collective (the weight-gradient allreduces the
executor makes back to back). Its :attr:`CommCall.measured_key` is the key of
``Machine.measured``, through which a time measured so prices the same collective in
:func:`costmodel.layer.comms.group_time` and in a reshard.

Why time them in the run: the collectives' fits come from an earlier ``dnnplan profile-comm``, and
a machine's speed drifts between runs, for collectives as for kernels, so fits made earlier price
the step less well than times taken in the run itself (docs/executor.md, "The collectives, timed
inside the run too", gives the measured errors both ways).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Mapping

from costmodel.calls.kernel_call import KernelCall
from costmodel.calls.layer_calls import backward_calls, kernel_calls
from costmodel.layer.edge import reshard_exchange
from costmodel.parallel.shard import input_layout, local_layer, output_layout
from costmodel.step.prediction import StepPrediction
from costmodel.parallel.strategy import Strategy
from networks.ir import DTYPE_BYTES, Network

#: The collectives a run can time (profiler.in_step.collectives).
TIMED = ("allreduce", "allgather", "reduce_scatter", "broadcast", "alltoallv", "alltoall")


#: What a collective's key (:attr:`CommCall.key`) starts with.
COMM_PREFIX = "comm:"


def comm_measured_key(key: str) -> tuple[str, int, int, str]:
    """The ``Machine.measured`` key of a :attr:`CommCall.key`."""
    collective, nbytes, group, state = key[len(COMM_PREFIX):].split("/")
    return collective, int(nbytes), int(group), state


@dataclass(frozen=True)
class CommCall:
    collective: str
    nbytes: int
    group: int
    state: str  # "cold" or "warm"
    #: The kernel calls the step makes just before it (the last two of its layer's pass; for a
    #: forward reshard, of the layer before it in the step), which profiler.in_step.collectives runs before
    #: a cold sample (after a layer without kernels, flatten, the nearest kernels before it; empty
    #: when the step runs none before it: the cold cache pass then).
    #: Not part of what the call is: equal calls after other kernels are one call, the first kept.
    after: tuple[KernelCall, ...] = field(default=(), compare=False, repr=False)

    @property
    def key(self) -> str:
        """The key of its samples (next to the kernel calls' keys, which never start with ``comm:``)."""
        return f"{COMM_PREFIX}{self.collective}/{self.nbytes}/{self.group}/{self.state}"

    @property
    def measured_key(self) -> tuple[str, int, int, str]:
        return (self.collective, self.nbytes, self.group, self.state)


def step_collectives(net: Network, batch: int, strategies: Mapping[str, Strategy],
                     pred: StepPrediction, algorithms: Mapping[str, str] | None = None) -> tuple[CommCall, ...]:
    """Every distinct collective of the step ``pred`` prices (its layers' collectives) and of the
    reshards between the layers' layouts, in step order; none spans a single rank. Each carries the
    kernel calls just before its first run (:attr:`CommCall.after`; ``algorithms``: the plan's
    convolution algorithms, im2col where not given)."""
    algorithms = algorithms or {}
    by_name = {layer.name: layer for layer in net.layers}

    order = [layer.name for layer in net.layers]

    def last_kernels(name: str, phase: str) -> tuple[KernelCall, ...]:
        """The last two kernels of ``name``'s pass, else of the nearest pass the step runs before
        it (a layer without kernels, flatten, is passed over: the kernels before it are still
        in the caches)."""
        i = order.index(name)
        for other in (order[i::-1] if phase == "fwd" else order[i:]):
            loc, algo = local_layer(by_name[other], strategies[other], batch), algorithms.get(other, "")
            got = (kernel_calls(loc, "fwd", algo) if phase == "fwd" else backward_calls(loc, algo))[-2:]
            if got:
                return tuple(got)
        return ()

    out: dict[CommCall, None] = {}
    for row in pred.layers:
        for c in row.layer.comms:
            if c.group > 1 and c.nbytes > 0 and c.collective in TIMED:
                cold = c.phase != "sync"
                after = last_kernels(row.layer.name, c.phase) if cold and row.layer.name in by_name else ()
                out.setdefault(CommCall(c.collective, int(c.nbytes), c.group, "cold" if cold else "warm", after))
    before = {layer.name: prev.name for prev, layer in zip(net.layers[-1:] + net.layers[:-1], net.layers)}
    for layer in net.layers:
        for slot, src in enumerate(layer.inputs):
            if src not in by_name:
                continue
            a = output_layout(by_name[src], strategies[src], batch)
            b = input_layout(layer, strategies[layer.name], batch, slot)
            itemsize = DTYPE_BYTES.get(by_name[src].dtype, 4)
            for s, d, backward in ((a, b, False), (b, a, True)):
                nbytes, group = reshard_exchange(s, d, backward, itemsize)
                if nbytes > 0 and group > 1:
                    after = last_kernels(layer.name, "bwd") if backward else last_kernels(before[layer.name], "fwd")
                    out.setdefault(CommCall("alltoallv", int(nbytes), group, "cold", after))
    return tuple(out)


def measured_from_samples(calls, samples: Mapping[str, list[float]]) -> tuple:
    """``Machine.measured`` from the median of each call's samples (calls without samples left out)."""
    return tuple((c.measured_key, float(statistics.median(samples[c.key])))
                 for c in calls if isinstance(c, CommCall) and samples.get(c.key))
