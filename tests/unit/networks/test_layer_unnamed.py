"""Layer.unnamed, the key the planner prices a layer under: every field but the name, inputs and
source line kept as they are, the same layer ``dataclasses.replace`` makes."""

from __future__ import annotations

import pickle
from dataclasses import fields, replace

import pytest

from networks.loader import load_network


@pytest.mark.parametrize("name", ["resnet50", "qwen3-30b-a3b", "gpt2"])
def test_unnamed_is_the_layer_without_its_name_inputs_and_line(name):
    for layer in load_network(name).layers:
        before = dict(layer.__dict__)
        got, want = layer.unnamed(), replace(layer, name="", inputs=(), line=None)
        assert type(got) is type(want)
        assert [getattr(got, f.name) for f in fields(want)] == [getattr(want, f.name) for f in fields(want)]
        assert got == want and hash(got) == hash(want) and got.__dict__ == want.__dict__
        assert pickle.loads(pickle.dumps(got)) == got
        assert (got.name, got.inputs, got.line) == ("", (), None) and layer.__dict__ == before
