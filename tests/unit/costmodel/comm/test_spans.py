"""A collective is priced on the slowest of a strategy's groups (costmodel.comm.spans): the span
found from rank 0's group and the first ranks' residues equals the worst over every group listed."""

from dataclasses import replace
from itertools import product

import pytest

from costmodel.comm.spans import slowest_span
from costmodel.layer.comms import group_time
from costmodel.machine.loading import load_machine
from costmodel.parallel.axes import GRID_ORDER
from costmodel.parallel.strategy import make_strategy


def _every_group_worst(strategy, dims, machine, within=0):
    """Every group along ``dims`` listed, each rank's, and the one spanning the most domains."""
    spans = set()
    for rank in range(strategy.p):
        members = strategy.group_array(rank, dims)
        if within:
            chunks = [members[i:i + within] for i in range(0, len(members), within)]
            spans |= {machine.group_span(c) for c in chunks}
        else:
            spans.add(machine.group_span(members))
    return max(spans, key=lambda s: (s[1], s[0]))


MACHINES = {
    "gb200-nvl72": load_machine("gb200-nvl72"),  # 72-GPU NVLink domains of 4-GPU trays
    "dgx-h100": load_machine("dgx-h100"),  # 8-GPU nodes
    "24-domain": replace(load_machine("dgx-h100"), devices_per_domain=24),
}

LAYOUTS = [
    (144, {"N": 9, "F": 16}), (144, {"N": 18, "F": 8}), (144, {"N": 3, "E": 3, "F": 16}),
    (256, {"N": 8, "E": 32}), (96, {"N": 2, "H": 3, "F": 16}), (72, {"N": 4, "F": 18}),
    (48, {"N": 3, "F": 16}), (64, {"N": 4, "F": 16}), (120, {"N": 5, "C": 3, "F": 8}),
]


@pytest.mark.parametrize("machine", MACHINES)
@pytest.mark.parametrize("p,degrees", LAYOUTS)
def test_the_span_priced_is_the_worst_of_every_group(machine, p, degrees):
    m = MACHINES[machine]
    s = make_strategy(p, degrees)
    split = [d for d in GRID_ORDER if s.degree(d) > 1]
    for k in (1, 2):
        for dims in {tuple(sorted(c)) for c in product(split, repeat=k)}:
            assert slowest_span(s, dims, m) == _every_group_worst(s, dims, m), (machine, degrees, dims)


def test_groups_of_their_first_ranks_are_worst_over_every_chunk():
    m = MACHINES["gb200-nvl72"]
    s = make_strategy(144, {"N": 9, "F": 16})
    for within in (2, 3):
        assert slowest_span(s, ("N",), m, within) == _every_group_worst(s, ("N",), m, within)


def test_a_tensor_group_across_two_nvlink_domains_is_priced_over_the_link_between():
    """Tensor groups of 16 on 144 GB200s: ranks 64-79 straddle domains 0 and 1, so the allreduce
    waits for the link between racks; groups of 16 on 64 GPUs, all in one rack, do not."""
    m = MACHINES["gb200-nvl72"]
    crossing = group_time("allreduce", 64e6, make_strategy(144, {"N": 9, "F": 16}), ("F",), m)
    inside = group_time("allreduce", 64e6, make_strategy(64, {"N": 4, "F": 16}), ("F",), m)
    assert crossing > 2 * inside
