"""A pipeline device's peak activations counted chunk by chunk under interleaved 1F1B
(costmodel/memory/pipeline.py, costmodel/step/pipeline.py)."""


import pytest

from costmodel.step.pipeline import INTERLEAVED, block_stages, kept_micro_batches, predict_pipeline
from costmodel.memory.pipeline import held_bytes, in_flight, order, warm_up
from profiler import context
from costmodel.frameworks.megatron import megatron_strategies

from tests.support.paths import ZOO

ZOO_TINY = ZOO / "gpt-tiny.yaml"


def test_the_order_is_megatrons_warm_up_then_one_forward_one_backward():
    """S = 2, V = 2, m = 4 on the last device: warm-up 2 (S - s - 1) + (V - 1) S = 2 forwards;
    forward k on chunk (k // 2) % 2, backward k on chunk 1 - (k // 2) % 2 (written out by hand)."""
    assert warm_up(2, 1, 4, 2) == 2
    assert order(2, 1, 4, 2) == [("F", 0), ("F", 0),
                                 ("F", 1), ("B", 1), ("F", 1), ("B", 1), ("F", 0), ("B", 0), ("F", 0), ("B", 0),
                                 ("F", 1), ("B", 1), ("F", 1), ("B", 1),
                                 ("B", 0), ("B", 0)]


def test_unequal_chunks_peak_where_the_heavy_chunk_is_in_flight():
    """By hand from the order above: after each forward from the warm-up's end the last device
    holds (chunk 0, chunk 1) = (2, 1), (3, 0), (3, 0), (2, 1), (2, 1) micro-batches; device 0
    (warm-up 2 + 2 = 4) holds (3, 2), (4, 1), (4, 1), (3, 2)."""
    assert set(in_flight(2, 1, 4, 2)) == {(2, 1), (3, 0)}
    assert set(in_flight(2, 0, 4, 2)) == {(3, 2), (4, 1)}
    loss_last, loss_first = (1, 10), (10, 1)  # activations of one micro-batch, chunk 0 and chunk 1
    assert held_bytes(2, 1, 4, loss_last) == max(2 * 1 + 1 * 10, 3 * 1) == 12  # the loss chunk: one micro-batch
    assert held_bytes(2, 1, 4, loss_first) == 3 * 10 == 30
    assert held_bytes(2, 0, 4, loss_last) == 3 + 2 * 10 == 23
    assert held_bytes(2, 0, 4, loss_first) == 4 * 10 + 1 == 41
    # the share rule charged every chunk the average: (W + 1) / V = 3 / 2 (last), 5 / 2 (first) of 11
    assert kept_micro_batches(INTERLEAVED, 2, 1, 4, 2) * 11 == 16.5
    assert kept_micro_batches(INTERLEAVED, 2, 0, 4, 2) * 11 == 27.5


@pytest.mark.parametrize("stages", [2, 3, 4, 8])
@pytest.mark.parametrize("chunks", [2, 3, 5])
@pytest.mark.parametrize("groups", [1, 2, 3, 6])
def test_equal_chunks_hold_megatrons_warm_up_plus_one_in_chunk_shares(stages, chunks, groups):
    """Equal chunks: the simulated peak is 2 (S - s - 1) + (V - 1) S + 1 chunk forwards (all m V
    when m = S), the share rule; and no count in the order goes below zero or ends above it."""
    m = groups * stages
    for s in range(stages):
        n = [0] * chunks
        for kind, c in order(stages, s, m, chunks):
            n[c] += 1 if kind == "F" else -1
            assert n[c] >= 0
        assert n == [0] * chunks
        warm = m * chunks if m == stages else min(2 * (stages - s - 1) + (chunks - 1) * stages + 1, m * chunks)
        assert held_bytes(stages, s, m, (7,) * chunks) == 7 * warm
        assert kept_micro_batches(INTERLEAVED, stages, s, m, chunks) == warm / chunks


def _gpt(tmp_path, repeat: int):
    spec = tmp_path / "gpt.yaml"
    spec.write_text(ZOO_TINY.read_text().replace("repeat: 2", f"repeat: {repeat}"))
    ctx = context.resolve(str(spec), 4, 8, "dgx-a100")

    def stage(net, ranks, micro, machine):
        from costmodel.step.prediction import predict_step
        strategies, _ = megatron_strategies(net, ranks, micro, 1)
        return predict_step(net, micro, strategies, {}, machine, ctx.compute)
    return ctx, stage


def test_a_device_is_priced_chunk_by_chunk_from_its_layers(tmp_path):
    """gpt-tiny with 4 blocks on 2 devices x 2 chunks: each device's peak is its one-micro-batch
    peak plus what the order holds beyond one micro-batch, from each chunk's layers' activations;
    the last device's loss chunk (logits over the vocabulary) is heavier than its other chunk."""
    ctx, stage = _gpt(tmp_path, 4)
    pred = predict_pipeline(ctx.network, 8, 4, 2, 4, INTERLEAVED, ctx.machine, stage, chunks=2)
    cuts = [{layer.name for layer in chunk} for chunk in block_stages(ctx.network, 4)]
    assert "embed" in cuts[0] and "loss" in cuts[3]
    for s, st in enumerate(pred.stages):
        acts = tuple(sum(x.layer.memory.activations for x in st.micro.layers if x.layer.name in cuts[c])
                     for c in (s, s + 2))
        assert sum(acts) == st.micro.activation_bytes
        held = held_bytes(2, s, 4, acts)
        assert st.kept_micro_batches == pytest.approx(held / sum(acts), rel=1e-12)
        assert st.memory_peak_bytes == pytest.approx(st.micro.memory_peak_bytes + held - sum(acts), abs=1)
    last = pred.stages[1]
    share = kept_micro_batches(INTERLEAVED, 2, 1, 4, 2)
    heavy = sum(x.layer.memory.activations for x in last.micro.layers if x.layer.name in cuts[3])
    assert heavy > last.micro.activation_bytes / 2 and last.kept_micro_batches < share
    plain = predict_pipeline(ctx.network, 8, 4, 2, 4, "1f1b", ctx.machine, stage)
    assert [st.kept_micro_batches for st in plain.stages] == [2, 1]  # one chunk: the 1F1B rule, unchanged


@pytest.mark.parametrize("stages,m,chunks", [(2, 4, 2), (4, 16, 8), (16, 32, 8), (8, 64, 5), (2, 32, 24)])
def test_the_last_device_holds_one_loss_chunk_and_the_first_up_to_2s_embedding_chunks(stages, m, chunks):
    """Megatron's order runs the last device's last chunk's backward right after its forward, while
    the first device's first chunk reaches 2 S micro-batches in flight (m > S)."""
    assert max(n[-1] for n in in_flight(stages, stages - 1, m, chunks)) == 1
    assert max(n[0] for n in in_flight(stages, 0, m, chunks)) == 2 * stages
