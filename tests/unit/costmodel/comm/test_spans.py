"""A collective is priced on the slowest of a strategy's groups (costmodel.comm.spans): the span
found from rank 0's group and the first ranks' residues equals the worst over every group listed."""

from dataclasses import replace
from itertools import product

import pytest

from costmodel.comm.spans import pipeline_view, slowest_span
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


def _every_stage_worst(strategy, dims, machine, stages):
    """Every group of every stage listed (stage ``s`` the same strategy on ranks ``s d`` on), and the
    one spanning the most domains."""
    spans = set()
    for s in range(stages):
        for rank in range(strategy.p):
            spans.add(machine.group_span(strategy.group_array(rank, dims) + s * strategy.p))
    return max(spans, key=lambda span: (span[1], span[0]))


STAGE_LAYOUTS = [  # (stage ranks, its degrees, stages)
    (32, {"N": 2, "F": 16}, 8), (32, {"N": 8, "F": 4}, 8), (16, {"N": 2, "F": 8}, 9), (48, {"N": 3, "F": 16}, 3),
    (36, {"N": 3, "F": 12}, 4), (64, {"N": 4, "E": 16}, 4), (8, {"F": 8}, 18),
]


@pytest.mark.parametrize("machine", MACHINES)
@pytest.mark.parametrize("d,degrees,stages", STAGE_LAYOUTS)
def test_a_stage_is_priced_on_the_worst_group_of_every_stage(machine, d, degrees, stages):
    """Stage ``s`` of a pipeline runs on ranks ``[s d, (s + 1) d)``: on the machine as a stage sees it
    (pipeline_view) the span priced is the worst over every stage's groups, not stage 0's."""
    m = MACHINES[machine]
    view = pipeline_view(m, d * stages, stages)
    s = make_strategy(d, degrees)
    split = [g for g in GRID_ORDER if s.degree(g) > 1]
    for dims in {(g,) for g in split}:
        assert slowest_span(s, dims, view) == _every_stage_worst(s, dims, m, stages), (machine, degrees, dims)


def test_stages_that_begin_at_a_domain_edge_see_the_machine_itself():
    """Stages of whole domains, or one stage: every stage lies as stage 0 does, and the view is the
    machine (its pricing and caches unchanged); stages of 32 on 72-GPU domains are not."""
    nvl, dgx = MACHINES["gb200-nvl72"], MACHINES["dgx-h100"]
    assert pipeline_view(nvl, 144, 2) is nvl and pipeline_view(nvl, 256, 1) is nvl
    assert pipeline_view(dgx, 16384, 64) is dgx and pipeline_view(dgx, 64, 16) != dgx  # stages of 4 on 8-GPU nodes
    assert pipeline_view(nvl, 256, 8).copies == (8, 16, 24, 32, 48, 56, 64)


def test_a_tensor_group_in_a_later_stage_across_two_racks_slows_every_stage():
    """Llama-style stages of 32 GB200s with tensor groups of 16, 8 stages: stage 2 (ranks 64-95) holds
    ranks 64-79 across racks 0 and 1, so its allreduce waits for the link between racks; stage 0's
    alone would not."""
    m = MACHINES["gb200-nvl72"]
    s = make_strategy(32, {"N": 2, "F": 16})
    alone = group_time("allreduce", 64e6, s, ("F",), m)
    staged = group_time("allreduce", 64e6, s, ("F",), pipeline_view(m, 256, 8))
    assert staged > 2 * alone
    assert group_time("allreduce", 64e6, s, ("F",), pipeline_view(MACHINES["dgx-h100"], 256, 8)) == \
        group_time("allreduce", 64e6, s, ("F",), MACHINES["dgx-h100"])


def test_the_axes_whose_groups_lie_across_more_domains_than_rank_0s_are_named_each_its_worst():
    from costmodel.comm.spans import Crossing, crossings
    m = load_machine("gb200-nvl72")

    def S(p, **degrees):
        return make_strategy(p, degrees)
    assert crossings([S(144, N=9, C=16)], m) == (Crossing("tensor", 16, 1, 2),)
    assert crossings([S(144, N=9, E=16), S(144, N=3, E=48)], m) == (Crossing("expert", 16, 1, 2),)
    assert crossings([S(144, N=9, H=2, C=8)], m) == (Crossing("context", 2, 1, 2),)  # ranks 8 apart: 64 and 72
    assert crossings([S(144, N=18, C=8), S(144, N=16, H=9), S(144, N=2, C=72)], m) == ()
    assert crossings([S(144, N=9, F=16)], m, sequence=False) == (Crossing("tensor", 16, 1, 2),)
    assert crossings([S(144, N=9, H=16)], m, sequence=False) == (Crossing("spatial", 16, 1, 2),)
    # a stage of 32 in 8 over 256: stage 2's tensor groups of 16 hold ranks 64-79
    assert crossings([S(32, N=2, C=16)], pipeline_view(m, 256, 8)) == (Crossing("tensor", 16, 1, 2),)
    assert crossings([S(32, N=4, C=8)], pipeline_view(m, 256, 8)) == ()
    assert crossings([S(144, N=144)], m) == ()  # data parallelism spans the nodes anyway: not named
