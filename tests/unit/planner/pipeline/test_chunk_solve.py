"""Interleaved device solves count memory chunk by chunk as predict does (planner/pipeline/chunks.py,
costmodel/memory/pipeline.py ChunkHold, planner/pipeline/interleave.py)."""


import pytest

from costmodel.choices.training import TrainingChoices
from costmodel.frameworks.megatron import megatron_strategies
from costmodel.step.pipeline import INTERLEAVED, predict_pipeline
from costmodel.memory.pipeline import ChunkHold, held_bytes
from costmodel.step.prediction import predict_step
from planner.pipeline import interleave
from planner.problem.solve import Settings
from planner.pipeline.pair_search import PairSearch
from planner.pipeline.stack import uniform_stack
from planner.pipeline.stage_solver import StageSolver
from profiler import context

from tests.support.paths import ZOO

ZOO_TINY = ZOO / "gpt-tiny.yaml"
SETTINGS = Settings(choices=TrainingChoices(optimizer="adam", precision="fp16"))
P, BATCH, STAGES, M, CHUNKS = 8, 8, 2, 4, 2


def _ctx(tmp_path, p: int = P, **precision):
    spec = tmp_path / "gpt.yaml"
    spec.write_text(ZOO_TINY.read_text().replace("repeat: 2", "repeat: 4"))
    return context.resolve(str(spec), p, BATCH, "dgx-a100", None, choices=TrainingChoices(**precision))


def test_a_hold_is_the_most_over_its_moments_and_each_layer_counts_its_chunks():
    """By hand: two moments (3, 2) and (4, 1); layers in chunks 0, 0, 1 keeping 1, 2, 10 bytes."""
    hold = ChunkHold(((3, 2), (4, 1)), (0, 0, 1))
    assert hold.chunk_bytes((1, 2, 10)) == (3, 10)
    assert hold.held((1, 2, 10)) == max(3 * 3 + 2 * 10, 4 * 3 + 10) == 29
    assert hold.worst((1, 2, 10)) == (3, 2) and hold.worst((10, 20, 1)) == (4, 1)
    assert hold.most() == (4, 2)
    assert hold.per_layer((3, 2)) == (3.0, 3.0, 2.0)


def _search(ctx, limit: float):
    stack = uniform_stack(ctx.network)
    search = PairSearch(stack, BATCH, P, ctx.machine, ctx.compute, limit, SETTINGS)
    solver = StageSolver(P // STAGES, BATCH // M, M + (STAGES - 1) / CHUNKS, ctx.machine, ctx.compute, SETTINGS,
                         limit, exact=True)
    got = interleave.search(solver, stack, STAGES, M, CHUNKS, search.sends(STAGES, M, CHUNKS),
                            lambda s, net: search.tied(STAGES, s, net), lambda: None)
    return stack, solver, got


def test_the_solvers_count_is_predicts_for_the_plan_it_returns(tmp_path):
    """gpt-tiny with 4 blocks on 8 devices, 2 stages x 2 chunks, 4 micro-batches, under a limit
    the unconstrained device 0 exceeds by its chunk count: each device's solution, priced by
    predict, holds exactly what its solve counted (one micro-batch's count plus what Megatron's order
    holds beyond it, chunk by chunk), and fits the limit."""
    ctx = _ctx(tmp_path, precision="fp16")
    stack, free_solver, free = _search(ctx, float("inf"))
    hold0 = interleave.kept(stack, STAGES, 0, M, CHUNKS)
    unconstrained = free.solutions[0].held_bytes(hold0)
    limit = 0.97 * unconstrained
    stack, solver, got = _search(ctx, limit)
    assert got is not None and got.solutions[0].held_bytes(hold0) <= limit * (1 + 1e-9)
    assert solver.solves > free_solver.solves  # the limit binds: a device was solved under it
    pred = interleave.predict(stack, BATCH, P, STAGES, M, CHUNKS, got.solutions, ctx.machine, ctx.compute,
                              SETTINGS, got.step_s)
    for s, (sol, st) in enumerate(zip(got.solutions, pred.stages)):
        hold = interleave.kept(stack, STAGES, s, M, CHUNKS)
        assert sol.activation_bytes == pytest.approx(st.micro.activation_bytes, rel=1e-12)
        assert hold.held(sol.layer_activation_bytes) == pytest.approx(
            st.kept_micro_batches * st.micro.activation_bytes, rel=1e-9)
        counted = st.micro.memory_bound_bytes + st.micro.activation_bytes * (st.kept_micro_batches - 1)
        assert sol.held_bytes(hold) == pytest.approx(counted, rel=1e-9)
    # the equal chunk share (Megatron's warm-up + 1 chunk forwards over V) would have counted both
    # plans wrong: the unconstrained one holds more (the embedding is in the first chunk, 4 in
    # flight at the busiest moment), the one under the limit less (its first chunk made lighter)
    share = (2 * (STAGES - 1) + (CHUNKS - 1) * STAGES + 1) / CHUNKS
    assert unconstrained - free.solutions[0].memory_bytes > (share - 1) * free.solutions[0].activation_bytes
    assert pred.stages[0].kept_micro_batches < share


def test_memory_per_device_by_what_holds_it_against_a_hand_count(tmp_path):
    """gpt-tiny with 4 blocks on 4 devices, 2 stages x 2 chunks of one block, data parallel in each
    stage (1 sample a rank), fp32 weights, gradients and momentum. By hand: device 0 holds the
    embedding (256 x 64 + 32 x 64 = 18,432) and blocks 0 and 2 (49,984 each): 118,400 parameters;
    device 1 blocks 1 and 3, ln_f (128) and the tied table again (16,384): 116,480. Megatron's
    order (S = 2, V = 2, m = 4) has in flight, per chunk, (3, 2) or (4, 1) on device 0 and (2, 1)
    or (3, 0) on device 1 (tests/unit/costmodel/step/test_pipeline_memory.py writes the order out)."""
    ctx = _ctx(tmp_path, p=4)

    def stage(net, ranks, micro, machine):
        strategies, _ = megatron_strategies(net, ranks, micro, 1)
        return predict_step(net, micro, strategies, {}, machine, ctx.compute)

    pred = predict_pipeline(ctx.network, BATCH, 4, STAGES, M, INTERLEAVED, ctx.machine, stage, chunks=CHUNKS)
    for st, params, moments in ((pred.stages[0], 118_400, ((3, 2), (4, 1))),
                                (pred.stages[1], 116_480, ((2, 1), (3, 0)))):
        parts = st.micro.memory_parts
        assert parts["weights"] == parts["grads"] == parts["optimizer"] == 4 * params
        layers = [x.layer for x in st.micro.layers]
        heads = {layer.name for layer in layers if layer.name.split(".")[0] in ("h0", "h1")} | {"embed", "embed_drop"}
        a0 = sum(layer.memory.activations for layer in layers if layer.name in heads)
        a1 = st.micro.activation_bytes - a0
        held = max(n0 * a0 + n1 * a1 for n0, n1 in moments)
        assert held == held_bytes(STAGES, st.index, M, (a0, a1))
        # the peak: the one-micro-batch peak, and what the order holds beyond one micro-batch
        assert st.memory_peak_bytes == pytest.approx(st.micro.memory_peak_bytes + held - st.micro.activation_bytes,
                                                     abs=1)
    # device 0's chunks differ by the embedding's dropout: its output (32 x 64 fp32) and mask (32 x 64
    # bytes), 10,240 bytes; the busiest moment holds 4 of the first chunk and 1 of the second
    first = pred.stages[0]
    block = (first.micro.activation_bytes - 10_240) / 2
    assert first.kept_micro_batches * first.micro.activation_bytes == pytest.approx(4 * (block + 10_240) + block)


class _Fake:
    """A stage solver over a two-layer device, layer i in chunk i: ``answers`` maps each count
    vector (per layer) to (objective, that layer's activations), or None (nothing fits); its own
    gap 0."""

    def __init__(self, answers, limit):
        self.limit, self.weight, self.worst_gap, self.asked = limit, 1.0, 0.0, []
        self.answers = answers

    def _sol(self, objective, acts):
        from planner.pipeline.stage_solver import StageSolution  # noqa: PLC0415 - the fake's answers only
        return StageSolution(None, {}, {}, objective, 0.0, float(sum(acts)), float(sum(acts)),
                             layer_activation_bytes=acts)

    def free(self, key, net, extra=None):
        return self._sol(1.0, (10.0, 10.0))

    def bound(self, key, net, kept, extra=None):
        self.asked.append(kept)
        answer = self.answers[kept]
        return None if answer is None else self._sol(*answer)


def test_a_held_solve_returns_the_first_relaxation_that_fits_every_moment():
    """Moments (3, 1) and (1, 3), limit 30 (the fake's one-micro-batch count is its activations
    alone, so a plan holds the most of 3 a0 + a1 and a0 + 3 a1). The free answer (10, 10) holds 40
    at both, the first taken; its relaxation answers (2, 12), whose busiest moment is (1, 3): 38 >
    30; that moment's relaxation answers (5, 5), 20 at both moments: it fits, and is the optimum of
    a relaxation, so the device's: no gap (its objective 4 is the best relaxation bound)."""
    from planner.pipeline.chunks import solve_held  # noqa: PLC0415 - beside the fake it drives
    hold = ChunkHold(((3, 1), (1, 3)), (0, 1))
    fake = _Fake({(3.0, 1.0): (3.0, (2.0, 12.0)), (1.0, 3.0): (4.0, (5.0, 5.0))}, 30.0)
    got = solve_held(fake, "k", None, hold)
    assert fake.asked == [(3.0, 1.0), (1.0, 3.0)]
    assert got.held_bytes(hold) == 20.0 and got.micro_s == 4.0
    assert got.gap == 0.0 and fake.worst_gap == 0.0


#: the relaxations of the two moments (3, 1) and (1, 3), whose answers cycle: each holds 38 at the
#: other moment, over the limit 30; the best bound of the two is 3.5
CYCLING = {(3.0, 1.0): (3.0, (2.0, 12.0)), (1.0, 3.0): (3.5, (12.0, 2.0))}


def test_a_held_solve_goes_from_the_mean_of_the_moments_tried_toward_each_chunks_most():
    """When the relaxations' answers cycle (the second's busiest moment is the first's) before one
    fits every moment, the counts between their mean (2, 2) and each chunk's most (3, 3) are solved
    in turn (the mean itself, a relaxation, not solved),
    :data:`planner.pipeline.chunks.TOWARD_MOST` of the way: (2.05, 2.05) answers (2, 12), 38 at
    (1, 3), over; (2.2, 2.2) answers (6, 6), 24 at both moments: taken, its gap against the
    relaxations' bound (3.5), as these counts bound nothing."""
    from planner.pipeline.chunks import TOWARD_MOST, solve_held  # noqa: PLC0415 - beside the fake it drives
    assert TOWARD_MOST == (0.05, 0.2)
    hold = ChunkHold(((3, 1), (1, 3)), (0, 1))
    fake = _Fake({**CYCLING, (2.05, 2.05): (3.6, (2.0, 12.0)), (2.2, 2.2): (5.0, (6.0, 6.0))}, 30.0)
    got = solve_held(fake, "k", None, hold)
    assert fake.asked[2:] == [(2.05, 2.05), (2.2, 2.2)]
    assert got.held_bytes(hold) == 24.0 and got.micro_s == 5.0
    assert got.gap == pytest.approx(1 - 3.5 / 5.0) and fake.worst_gap == got.gap


def test_a_held_solve_falls_back_on_each_chunks_most_with_the_relaxations_bound():
    """When no count between the mean and the most gives a plan that fits every moment, each chunk
    counted at its most, (3, 3), restricts the plan to one that fits every moment; its gap is
    against the relaxations' bound, not its own (a restriction's optimum bounds nothing)."""
    from planner.pipeline.chunks import solve_held  # noqa: PLC0415 - beside the fake it drives
    hold = ChunkHold(((3, 1), (1, 3)), (0, 1))
    answers = {**CYCLING, (2.05, 2.05): (3.6, (2.0, 12.0)), (2.2, 2.2): (3.7, (12.0, 2.0)),
               (3.0, 3.0): (6.0, (4.0, 4.0))}
    fake = _Fake(answers, 30.0)
    got = solve_held(fake, "k", None, hold)
    assert fake.asked[-1] == (3.0, 3.0) and len(fake.asked) == 5
    assert got.held_bytes(hold) == 16.0 and got.gap == pytest.approx(1 - 3.5 / 6.0)


def test_a_held_solve_whose_restriction_fits_nothing_is_unresolved_not_infeasible():
    """A relaxation fits, so a plan fitting every moment may exist though none of the solves found
    one and the restriction fits nothing: no answer and no claim that nothing fits, but
    :class:`planner.pipeline.chunks.Unresolved` with the relaxations' bound on the device."""
    from planner.pipeline.chunks import Unresolved, solve_held  # noqa: PLC0415 - beside the fake it drives
    hold = ChunkHold(((3, 1), (1, 3)), (0, 1))
    fake = _Fake({**CYCLING, (2.05, 2.05): (3.6, (2.0, 12.0)), (2.2, 2.2): (3.7, (12.0, 2.0)), (3.0, 3.0): None},
                 30.0)
    with pytest.raises(Unresolved) as raised:
        solve_held(fake, "k", None, hold)
    assert raised.value.lower_s == 3.5 and fake.asked[-1] == (3.0, 3.0)


def test_a_held_solve_whose_first_relaxation_fits_nothing_fits_nothing():
    """A relaxation is a superset of the plans that fit every moment: where it fits nothing, the
    device fits nothing (None), after that one solve."""
    from planner.pipeline.chunks import solve_held  # noqa: PLC0415 - beside the fake it drives
    hold = ChunkHold(((3, 1), (1, 3)), (0, 1))
    fake = _Fake({(3.0, 1.0): None}, 30.0)
    assert solve_held(fake, "k", None, hold) is None and fake.asked == [(3.0, 1.0)]


@pytest.mark.parametrize("stages", [4, 5, 8])  # with 3 stages device 1 is the only middle one: nothing to hold
@pytest.mark.parametrize("chunks", [2, 3, 5])
@pytest.mark.parametrize("groups", [1, 2, 4])
def test_device_1_holds_at_least_what_any_middle_device_holds_chunk_by_chunk(stages, chunks, groups):
    """The planner solves one middle device, holding device 1's moments: every moment of a later
    middle device is, chunk by chunk, at most one of device 1's, so the plan fits each of them."""
    from costmodel.memory.pipeline import in_flight  # noqa: PLC0415 - this test's only use
    m = groups * stages
    one = in_flight(stages, 1, m, chunks)
    later = range(2, stages - 1)
    assert len(later) >= 1
    for s in later:
        assert all(any(all(a <= b for a, b in zip(v, u)) for u in one) for v in in_flight(stages, s, m, chunks))


def _average(brackets) -> float:
    """The bound before the busiest device was weighed: the devices' brackets averaged."""
    return sum(brackets) / len(brackets)


@pytest.mark.parametrize("seed", range(40))
def test_the_triples_bound_is_below_every_plan_of_random_devices_and_not_below_the_average(seed):
    """Each device picks one of a few (T, O) of its own; each bracket ``w T + O`` is known only to
    within a gap (half the cases exact). Brute force over every pick: no plan's interleaved step is
    below :func:`interleave.lower_s`, and it is never below the devices' average bracket."""
    import itertools

    import numpy as np

    rng = np.random.default_rng(seed)
    stages, chunks = int(rng.integers(2, 5)), int(rng.integers(1, 4))
    m = stages * int(rng.integers(1, 4))
    weight = m + (stages - 1) / chunks
    options = [[(float(rng.uniform(0.1, 2)) * (1 + 2 * (s in (0, stages - 1)) * rng.random()),
                 float(rng.uniform(0, 3))) for _ in range(3)] for s in range(stages)]
    gaps = rng.uniform(0, 0.3, stages) * (rng.random() < 0.5)
    brackets = [min(weight * t + o for t, o in opts) * (1 - g) for opts, g in zip(options, gaps)]
    best = min(interleave.step_s([t for t, _ in pick], [o for _, o in pick], m, chunks)
               for pick in itertools.product(*options))
    got = interleave.lower_s(brackets, m, chunks)
    assert _average(brackets) * (1 - 1e-12) <= got <= best * (1 + 1e-12)


def test_the_triples_bound_weighs_the_busiest_device_and_stays_below_its_exact_optimum(tmp_path):
    """gpt-tiny with 4 blocks, 2 stages x 2 chunks: the first device carries the embedding and the
    last the head, so their brackets differ and the busiest one's weighed as the slowest gives a
    bound strictly above the devices' average. Under a limit that binds, the bound from the
    Lagrangian device solves (gaps left open) stays below the triple's exact optimum."""
    ctx = _ctx(tmp_path, precision="fp16")
    stack, _, free = _search(ctx, float("inf"))
    search = PairSearch(stack, BATCH, P, ctx.machine, ctx.compute, float("inf"), SETTINGS)
    weight = M + (STAGES - 1) / CHUNKS
    brackets = [sol.lower_s(weight) + weight * send
                for sol, send in zip(free.solutions, search.sends(STAGES, M, CHUNKS))]
    assert max(brackets) > min(brackets) * 1.01
    assert free.lower_s == pytest.approx(interleave.lower_s(brackets, M, CHUNKS), rel=1e-12)
    assert _average(brackets) * 1.001 < free.lower_s <= free.step_s * (1 + 1e-12)
    hold0 = interleave.kept(stack, STAGES, 0, M, CHUNKS)
    limit = 0.97 * free.solutions[0].held_bytes(hold0)
    _, _, exact = _search(ctx, limit)
    relaxed = interleave.search(StageSolver(P // STAGES, BATCH // M, weight, ctx.machine, ctx.compute, SETTINGS, limit),
                                stack, STAGES, M, CHUNKS, search.sends(STAGES, M, CHUNKS),
                                lambda s, net: search.tied(STAGES, s, net), lambda: None)
    assert relaxed.lower_s <= exact.step_s * (1 + 1e-12) <= relaxed.step_s * (1 + 1e-12)


def _triple(ctx, above=None, solve=None):
    """gpt-tiny's (2, 4, 2) searched with no memory limit; ``solve``: the solver's solve, wrapped."""
    stack = uniform_stack(ctx.network)
    search = PairSearch(stack, BATCH, P, ctx.machine, ctx.compute, float("inf"), SETTINGS)
    solver = StageSolver(P // STAGES, BATCH // M, M + (STAGES - 1) / CHUNKS, ctx.machine, ctx.compute, SETTINGS,
                         float("inf"), exact=True)
    if solve is not None:
        solver.solve = solve(solver.solve)
    sends = search.sends(STAGES, M, CHUNKS)
    return sends, interleave.search(solver, stack, STAGES, M, CHUNKS, sends, lambda s, net: search.tied(STAGES, s, net),
                                    lambda: None, above)


def test_a_triple_whose_first_device_proves_it_no_faster_than_the_step_to_beat_is_left_there(tmp_path):
    """With ``above`` (the step to beat), once the devices solved bound the step at least that
    (:func:`interleave.lower_s` on their brackets, the others at 0) the search stops with
    :class:`interleave.Unplanned` ``"bound"`` and that bound, which is never above the full triple's
    own lower bound; below it the devices are all solved and the plan is the one without ``above``."""
    ctx = _ctx(tmp_path, precision="fp16")
    sends, full = _triple(ctx)
    weight = M + (STAGES - 1) / CHUNKS
    first = interleave.lower_s([full.solutions[0].lower_s(weight) + weight * sends[0], 0.0], M, CHUNKS)
    assert 0 < first < full.lower_s
    with pytest.raises(interleave.Unplanned) as raised:
        _triple(ctx, above=first * 0.999)
    assert raised.value.why == "bound" and raised.value.lower_s == pytest.approx(first, rel=1e-12)
    assert _triple(ctx, above=first * 1.001)[1] == full


def test_a_triple_with_an_unresolved_device_is_unplanned_at_its_devices_bounds(tmp_path):
    """A device whose solves find no plan fitting every moment and cannot prove none fits
    (:class:`planner.pipeline.chunks.Unresolved`) leaves the triple :class:`interleave.Unplanned`
    ``"unresolved"``, never "nothing fits": its bound is the step's formula on the brackets of the
    devices solved and the unresolved device's own bound."""
    from planner.pipeline.chunks import Unresolved  # noqa: PLC0415 - this test's only use

    def unresolved_last(solve):
        def wrapped(key, net, kept, extra=None):
            if key[-1] == "last":
                raise Unresolved(key, 5.0)
            return solve(key, net, kept, extra)
        return wrapped

    ctx = _ctx(tmp_path, precision="fp16")
    sends, full = _triple(ctx)
    weight = M + (STAGES - 1) / CHUNKS
    with pytest.raises(interleave.Unplanned) as raised:
        _triple(ctx, solve=unresolved_last)
    want = interleave.lower_s([full.solutions[0].lower_s(weight) + weight * sends[0], 5.0 + weight * sends[1]],
                              M, CHUNKS)
    assert raised.value.why == "unresolved" and raised.value.lower_s == pytest.approx(want, rel=1e-12)
