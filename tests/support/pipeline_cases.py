"""The small networks, settings and brute-force helpers the pipeline search's tests share
(tests/unit/planner/pipeline)."""

from __future__ import annotations

import itertools

from costmodel.choices.training import TrainingChoices
from planner.problem.solve import Settings

from tests.support.paths import ZOO

SETTINGS = Settings(choices=TrainingChoices(optimizer="adam", precision="fp16"))
#: every pair that could win is searched again
PROVE = Settings(gap=0.0, choices=TrainingChoices(optimizer="adam", precision="fp16"))


def compositions(n: int, parts: int):
    """Every cut of ``n`` blocks into ``parts`` stages of at least one block each (their sizes)."""
    for cuts in itertools.combinations(range(1, n), parts - 1):
        bounds = (0, *cuts, n)
        yield tuple(b - a for a, b in zip(bounds, bounds[1:]))


def step_1f1b(ts, os_, m):
    """A 1F1B step of stage times ``ts``, once-a-step times ``os_`` and ``m`` micro-batches
    (costmodel.step.pipeline)."""
    return sum(ts) + (m - 1) * max(ts) + max(os_)


def gpt4(tmp_path) -> str:
    """The zoo's tiny GPT with 4 blocks (a file in ``tmp_path``)."""
    text = (ZOO / "gpt-tiny.yaml").read_text().replace("repeat: 2", "repeat: 4")
    path = tmp_path / "gpt-4blocks.yaml"
    path.write_text(text)
    return str(path)


def moe4(tmp_path) -> str:
    """A 4-block mixture-of-experts GPT: grouped-query attention (4 heads, 2 key/value) and 4 SwiGLU
    experts, top 2, in place of the MLP; its attention can split the sequence (context parallelism)
    and its experts over an expert group."""
    text = (ZOO / "gpt-tiny.yaml").read_text().replace("repeat: 2", "repeat: 4").replace(
        'heads: "{heads}", causal: true', 'heads: "{heads}", kv_heads: 2, causal: true').replace(
        '      - {name: fc, op: linear, features: "{4 * dim}"}\n      - {name: gelu, op: gelu}\n'
        '      - {name: proj, op: linear, features: "{dim}"}\n',
        '      - {name: moe, op: moe, experts: 4, top_k: 2, hidden: 64}\n').replace(
        "inputs: [add1, mlp_drop]", "inputs: [add1, moe]").replace(
        '      - {name: mlp_drop, op: dropout, rate: "{rate}"}\n', "")
    path = tmp_path / "moe-4blocks.yaml"
    path.write_text(text)
    return str(path)
