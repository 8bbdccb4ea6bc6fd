"""Layer.unnamed, the key the planner prices a layer under: every field but the name, inputs and
source line kept as they are, the same layer ``dataclasses.replace`` makes, one object a layer;
and the layer's hash, kept once asked, the dataclass's and never pickled."""

from __future__ import annotations

import pickle
from dataclasses import fields, replace

import pytest

from networks.loader import load_network


@pytest.mark.parametrize("name", ["resnet50", "qwen3-30b-a3b", "gpt2"])
def test_unnamed_is_the_layer_without_its_name_inputs_and_line(name):
    for layer in load_network(name).layers:
        before = [getattr(layer, f.name) for f in fields(layer)]
        hash(layer)  # kept on the layer: never carried to its unnamed twin
        got, want = layer.unnamed(), replace(layer, name="", inputs=(), line=None)
        assert type(got) is type(want) and got is layer.unnamed()
        assert [getattr(got, f.name) for f in fields(want)] == [getattr(want, f.name) for f in fields(want)]
        assert got == want and hash(got) == hash(want) == hash(tuple(getattr(want, f.name) for f in fields(want)
                                                                     if f.compare))
        again = pickle.loads(pickle.dumps(layer))
        assert again == layer and "_hash" not in again.__dict__ and "_unnamed" not in again.__dict__
        assert (got.name, got.inputs, got.line) == ("", (), None)
        assert [getattr(layer, f.name) for f in fields(layer)] == before
