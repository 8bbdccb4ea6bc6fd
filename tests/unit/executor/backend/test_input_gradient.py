"""A layer that reads only the network's inputs (the first convolution, reading the image) makes no
input gradient on a device whose launches cost the host time, as frameworks skip it (nothing reads
it); the host still makes it, as the cost model prices it. The check passes either way."""

from __future__ import annotations

from mpi4py import MPI

from executor.backend.host import HOST
from executor.ops import conv
from executor.runtime.run import run_plan

from tests.support.cases import load, make_plan
from tests.support.doubles.fake_devices import FusingBackend

DATA = conv.conv2d_backward_data


def _run(backend, monkeypatch):
    shapes = []

    def counted(dy, w, x_shape, *a, **k):
        shapes.append(tuple(x_shape))
        return DATA(dy, w, x_shape, *a, **k)

    monkeypatch.setattr(conv, "conv2d_backward_data", counted)
    net = load("lenet5")
    got = run_plan(make_plan(net, 8, 1, "data"), net, MPI.COMM_SELF, steps=1, warmup=0, check=True, seed=3,
                   backend=backend, measure_memory=False)
    return got, shapes, net


def test_the_first_convolution_makes_no_input_gradient_on_a_launch_bound_device(monkeypatch):
    host, host_shapes, net = _run(HOST, monkeypatch)
    fused, shapes, _ = _run(FusingBackend(), monkeypatch)
    image = (8, *net.inputs[0].shape)
    assert image in host_shapes and image not in shapes
    inner = [s for s in host_shapes if s != image]  # the second convolution's input
    assert len(host_shapes) == 2 and shapes == inner * 2  # one step on the host; the timed and the attribution step
    assert fused.check.passed and fused.losses == host.losses
