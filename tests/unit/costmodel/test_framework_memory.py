"""Memory as the framework holds it (costmodel.frameworks.framework.FrameworkMemory): the tensors'
(allocated) peak and the reserved one beside it, the limit the planner holds the tensors under so
the reserved peak fits, and nothing added under the default framework."""

from __future__ import annotations

import pytest

from costmodel.frameworks.framework import framework_from_dict
from costmodel.frameworks.loading import load_framework
from executor.session import predict as predicting
from costmodel.choices.training import TrainingChoices
from profiler import context

GIB = 2 ** 30


def _memory(context_bytes=5e8, communicator_bytes=4e8, allocator=1.25):
    return framework_from_dict({"name": "x", "about": "y", "memory": {
        "context_bytes": context_bytes, "communicator_bytes": communicator_bytes, "allocator": allocator}}).memory


def test_reserved_is_the_allocators_reserve_the_context_and_on_several_devices_the_communicator():
    mem = _memory()
    assert mem.reserved_bytes(8 * 10 ** 9, 1) == int(5e8 + 1.25 * 8e9)
    assert mem.reserved_bytes(8 * 10 ** 9, 8) == int(5e8 + 4e8 + 1.25 * 8e9)
    assert mem.added_bytes(8 * 10 ** 9, 8) == mem.reserved_bytes(8 * 10 ** 9, 8) - 8 * 10 ** 9


@pytest.mark.parametrize("devices", [1, 8])
def test_the_tensors_limit_is_the_inverse_of_the_reserved_peak(devices):
    mem = _memory()
    tensors = mem.tensors_limit(80 * GIB, devices)
    assert mem.reserved_bytes(int(tensors), devices) == pytest.approx(80 * GIB, abs=2)
    assert mem.tensors_limit(1e8, devices) == 0.0  # the framework alone exceeds it
    assert load_framework("ideal").memory.tensors_limit(80 * GIB, devices) == 80 * GIB


def _predicted(framework: str, devices: int = 4):
    choices = TrainingChoices.from_flags(framework=framework, recompute="none")
    ctx = context.resolve("resnet18", devices, 64, "dgx-h100", choices=choices, network_defaults=True)
    return predicting.step(ctx, predicting.LayerSplits()).prediction


def test_a_prediction_says_allocated_and_reserved_and_the_default_framework_adds_nothing():
    ideal, torch = _predicted("ideal"), _predicted("pytorch")
    assert ideal.memory_allocated_bytes == ideal.memory_reserved_bytes == ideal.memory_peak_bytes
    assert torch.memory_allocated_bytes == ideal.memory_allocated_bytes  # the same tensors
    mem = load_framework("pytorch").memory
    assert torch.memory_reserved_bytes == mem.reserved_bytes(torch.memory_allocated_bytes, 4)
    assert torch.memory_reserved_bytes - torch.memory_allocated_bytes == torch.memory_parts["framework"] > 0
