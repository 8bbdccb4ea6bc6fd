"""The pipelined plan's layout line: each stage's splits with their layers, none left out unsaid."""

import re

from costmodel.parallel.strategy import make_strategy
from dnnplan.render.plan import stage_mix


def _strategies(*counts):
    out = {}
    for degrees, n in counts:
        for _ in range(n):
            out[f"l{len(out)}"] = make_strategy(16, degrees)
    return out


def test_a_stages_splits_beyond_the_three_commonest_are_counted_so_the_counts_sum_to_its_layers():
    """gpt3-175b's interleaved stage of 80 layers: 71, 7, 1 and 1 layers on four splits (a helper
    read 79 on the line, the attention layer's split left out)."""
    mix = stage_mix(_strategies(({"N": 2, "C": 8}, 71), ({"N": 2, "F": 8}, 7), ({"N": 4, "C": 4}, 1),
                                ({"N": 4, "C": 2, "F": 2}, 1)))
    assert mix.startswith("N=2,C=8 x71 N=2,F=8 x7 ") and mix.endswith(" and 1 other split x1")
    assert sum(int(n) for n in re.findall(r" x(\d+)", mix)) == 80
    five = stage_mix(_strategies(({"N": 16}, 5), ({"N": 8, "C": 2}, 3), ({"N": 4, "C": 4}, 2), ({"N": 2, "C": 8}, 1),
                                 ({"C": 16}, 1)))
    assert five.endswith(" and 2 other splits x2") and sum(int(n) for n in re.findall(r" x(\d+)", five)) == 12
    assert stage_mix(_strategies(({"N": 16}, 4))) == "N=16 x4"
