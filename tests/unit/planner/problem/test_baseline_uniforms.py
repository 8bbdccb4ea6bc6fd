"""The baselines' uniform strategies, chosen once for each distinct layer (planner.problem.baselines.uniform),
are those costmodel.frameworks.uniform.uniform_strategies chooses layer by layer."""

from __future__ import annotations

import pytest

from costmodel.frameworks.uniform import NAMED, uniform_strategies
from costmodel.layer.candidates import candidate_strategies
from networks.loader import load_network
from planner.problem.baselines import uniform


@pytest.mark.parametrize("name, p, batch", [("resnet50", 64, 256), ("gpt2", 64, 64), ("mixtral-8x7b", 64, 64),
                                            ("llama3.1-405b", 512, 64)])
def test_one_choice_per_distinct_layer_is_every_layers_choice(name, p, batch):
    net = load_network(name)
    specs = set(NAMED) | {",".join(x for x in s.label.split(",") if not x.startswith("R="))
                          for layer in net.layers[:40] for s in candidate_strategies(layer, p, batch)} - {"", "serial",
                                                                                                        "replicated"}
    assert len(specs) > len(NAMED)
    for spec in sorted(specs):
        assert uniform(net, p, batch, spec) == uniform_strategies(net, p, batch, spec)[0], spec
