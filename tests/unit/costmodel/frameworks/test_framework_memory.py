"""Memory as the framework holds it (costmodel.frameworks.framework.FrameworkMemory): the tensors'
(allocated) peak and the reserved one beside it, the limit the planner holds the tensors under so
the reserved peak fits, and nothing added under the default framework."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

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


def _predicted(framework: str, devices: int = 4, network: str = "resnet18", micro_batches: int = 1):
    choices = TrainingChoices.from_flags(framework=framework, recompute="none")
    ctx = context.resolve(network, devices, 64, "dgx-h100", choices=choices, network_defaults=True)
    return predicting.step(ctx, predicting.LayerSplits(), micro_batches).prediction


def _file(tmp_path, memory: dict, name: str = "mine") -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "about": "a test framework", "memory": memory}))
    load_framework.cache_clear()
    return str(path)


def test_a_prediction_says_allocated_and_reserved_and_the_default_framework_adds_nothing(tmp_path):
    ideal, torch = _predicted("ideal"), _predicted("pytorch")
    assert ideal.memory_allocated_bytes == ideal.memory_reserved_bytes == ideal.memory_peak_bytes
    # pytorch's memory section alone (its context, communicator and reserve) holds the same tensors
    shipped = yaml.safe_load((Path(load_framework("pytorch").source)).read_text())["memory"]
    reserve = {k: v for k, v in shipped.items() if k != "grads_in_backward"}
    assert _predicted(_file(tmp_path, reserve)).memory_allocated_bytes == ideal.memory_allocated_bytes
    mem = load_framework("pytorch").memory
    assert torch.memory_reserved_bytes == mem.reserved_bytes(torch.memory_allocated_bytes, 4)
    assert torch.memory_reserved_bytes - torch.memory_allocated_bytes == torch.memory_parts["framework"] > 0


def test_gradients_made_in_backward_leave_out_those_backward_has_not_made_at_the_peak(tmp_path):
    ideal = _predicted("ideal", 1, "gpt2")
    made = _predicted(_file(tmp_path, {"grads_in_backward": True}), 1, "gpt2")
    assert made.grads_in_backward and not ideal.grads_in_backward
    # GPT-2's peak is its loss's backward, the first of the step: no weight has its gradient yet
    assert ideal.memory_parts["grads"] > 0 and made.memory_parts["grads"] == 0
    assert ideal.memory_allocated_bytes - made.memory_allocated_bytes == ideal.memory_parts["grads"]
    # accumulating over micro-batches holds every gradient from the first micro-batch's backward on
    two = _predicted(_file(tmp_path, {"grads_in_backward": True}, "again"), 1, "gpt2", micro_batches=2)
    assert not two.grads_in_backward and two.memory_parts["grads"] == ideal.memory_parts["grads"]
