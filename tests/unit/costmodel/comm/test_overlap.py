"""Communication overlapped with compute (costmodel.comm.overlap): one rule per purpose, never below
physics, exposed and overlapped summing to the collectives' time, none on the CPU executor's machine."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from costmodel.step.breakdown import comm_parts
from costmodel.compute.roofline import Roofline
from costmodel.calls.algorithms import default_algorithms
from costmodel.machine.loading import load_machine
from costmodel.layer.comms import Comm
from costmodel.frameworks.megatron import megatron_strategies
from costmodel.choices.optimizer import Optimizer
from costmodel.comm.overlap import (Overlap, default_overlap, front_layers, hidden_expert_s, overlapped,
                                    resolve_overlap, unpaired_passes)
from costmodel.choices.precision import with_precision
from costmodel.step.prediction import predict_step
from costmodel.frameworks.uniform import uniform_strategies
from dnnplan.cli import app
from networks.errors import DnnplanError
from networks.loader import load_network

H100 = load_machine("dgx-h100")
ROOF = Roofline(H100)
runner = CliRunner()
GPT2 = with_precision(load_network("gpt2"), "bf16")


def _step(overlap, net=GPT2, p=16, batch=32, tensor=1, zero=0, m=1, machine=H100, compute=ROOF):
    strategies, _ = megatron_strategies(net, p, batch // m, tensor, tensor > 1)
    return predict_step(net, batch, strategies, default_algorithms(net), machine, compute, Optimizer("adam", zero),
                        micro_batches=m, overlap=overlap)


CASES = [dict(), dict(tensor=4), dict(zero=1), dict(zero=3), dict(m=4), dict(tensor=2, zero=3, m=2)]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("mode", ["data", "all"])
def test_never_below_compute_or_communication_alone(case, mode):
    plain, hidden = _step("none", **case), _step(mode, **case)
    comm = hidden.comm_exposed_s + hidden.comm_overlapped_s
    # exposed + overlapped is the collectives' whole time: what the step waited for without overlap
    assert comm == pytest.approx(plain.comm_exposed_s, rel=1e-9) and plain.comm_overlapped_s == 0
    rest = plain.step_s - plain.comm_exposed_s  # compute, reshards, update: everything but collectives
    assert hidden.step_s == pytest.approx(rest + hidden.comm_exposed_s, rel=1e-9)
    assert hidden.step_s >= max(rest, comm) * (1 - 1e-12)
    assert hidden.step_s <= plain.step_s * (1 + 1e-12)
    # per layer too: its passes never shorter than their compute or their collectives
    for x in hidden.layers:
        e = x.layer
        compute = e.fwd_compute_s + e.bwd_compute_s
        assert e.fwd_comm_s + e.bwd_comm_s + e.grad_sync_s + compute >= max(compute, sum(
            c.link_time for c in e.comms)) * (1 - 1e-12)
    assert dict(comm_parts(hidden)) == {"exposed": hidden.comm_exposed_s, "overlapped": hidden.comm_overlapped_s}


def test_gradient_reduction_hides_under_the_layers_backward_but_the_last_bucket():
    pred = _step("data", p=64, batch=64)
    front = front_layers(GPT2, Overlap("data").bucket_bytes)
    # gpt2's token embedding (50257 x 768 x 2 bytes = 77 MB) fills the last bucket alone
    assert front == {"embed"} and 50257 * 768 * 2 >= 25 * 2 ** 20
    checked = 0
    for x in pred.layers:
        e, sync = x.layer, [c for c in x.layer.comms if c.purpose == "grad_sync"]
        if not sync:
            continue
        (c,) = sync
        window = 0.0 if e.name in front else e.bwd_compute_s
        assert c.seconds == pytest.approx(max(0.0, c.link_time - window), rel=1e-12, abs=1e-15)
        checked += 1
    embed = next(x.layer for x in pred.layers if x.layer.name == "embed")
    assert embed.grad_sync_s > 0 and embed.grad_sync_s == embed.comms[-1].link_time  # exposed whole
    assert checked == sum(1 for layer in GPT2.layers if layer.weights) > 50


def test_under_accumulation_only_one_micro_batchs_backward_hides_the_reduction():
    acc = _step("data", p=64, batch=256, m=4)
    for x in acc.layers:
        for c in x.layer.comms:
            if c.purpose == "grad_sync" and x.layer.name != "embed":
                # the layers are priced at one micro-batch: its backward is the window, not four
                assert c.seconds == pytest.approx(max(0.0, c.link_time - x.layer.bwd_compute_s), rel=1e-12,
                                                  abs=1e-15)


def test_one_window_is_shared_never_spent_twice():
    # a layer whose backward (1 ms) hides two collectives of 0.8 ms each: 0.6 ms exposed together
    layer = next(layer for layer in GPT2.layers if layer.op == "linear")
    comms = (Comm("grad_sync", "sync", "allreduce", 1, 2, 0.8e-3),
             Comm("input_grad", "bwd", "allreduce", 1, 2, 0.8e-3))
    got = overlapped(comms, layer, {"fwd": 0.0, "bwd": 1e-3}, Overlap("all"), front=False)
    assert sum(c.seconds for c in got) == pytest.approx(0.6e-3)
    assert [c.link_time for c in got] == [0.8e-3, 0.8e-3]
    # idempotent from the link times: applied again with another window
    again = overlapped(got, layer, {"fwd": 0.0, "bwd": 2e-3}, Overlap("all"), front=False)
    assert sum(c.seconds for c in again) == 0
    # data alone leaves the tensor-parallel one exposed, the reduction hidden
    data = overlapped(comms, layer, {"fwd": 0.0, "bwd": 1e-3}, Overlap("data"), front=False)
    assert [c.seconds for c in data] == [0.0, 0.8e-3]



def test_expert_all_to_alls_hide_under_the_opposite_pass_only_with_experts():
    """Megatron-Core's combined 1F1B (+experts): a forward dispatch or combine hides under the MoE
    layer's backward compute (another micro-batch's), a backward one under its forward; without
    +experts they are exposed whole. Forward 1 ms, backward 2 ms: the two forward all-to-alls of
    1.5 ms each share the backward's 2 ms (1 ms exposed), the backward ones (0.4 ms) hide."""
    moe = load_network("mixtral-8x7b")
    layer = next(x for x in moe.layers if x.op == "moe")
    comms = (Comm("dispatch", "fwd", "alltoall", 1, 8, 1.5e-3), Comm("combine", "fwd", "alltoall", 1, 8, 1.5e-3),
             Comm("combine_grad", "bwd", "alltoall", 1, 8, 0.2e-3),
             Comm("dispatch_grad", "bwd", "alltoall", 1, 8, 0.2e-3))
    windows = {"fwd": 1e-3, "bwd": 2e-3}
    got = overlapped(comms, layer, windows, Overlap("all", experts=True), front=False)
    assert [c.seconds for c in got] == pytest.approx([0.5e-3, 0.5e-3, 0.0, 0.0])
    assert all(c.seconds == c.link_time for c in overlapped(comms, layer, windows, Overlap("all"), front=False))
    spec = resolve_overlap("data+experts", H100)
    assert spec == Overlap("data", experts=True) and spec.spec == "data+experts" and spec.data and not spec.tensor
    assert "expert all-to-alls overlapped" in spec.label and "expert" not in Overlap("all").label
    with pytest.raises(DnnplanError):
        resolve_overlap("experts", H100)

def test_the_passes_the_combined_schedule_runs_alone_hide_no_all_to_all():
    """Megatron-Core's combined 1F1B pairs a forward with another micro-batch's backward; the first
    forward and the last backward (without a pipeline), the warm-up forwards and one more and as many
    cool-down backwards (interleaved) have no partner. Hand-worked: the comms above hide 2 ms forward
    (3 ms of links, 1 ms exposed) and 0.4 ms backward; 4 stages of 2 chunks, 8 micro-batches: device
    0 warms up 2 x 3 + 4 = 10 forwards, 11 alone; with as many micro-batches as stages every pass is
    alone. A step of one micro-batch has no pair at all: +experts buys nothing."""
    moe = load_network("mixtral-8x7b")
    layer = next(x for x in moe.layers if x.op == "moe")
    comms = (Comm("dispatch", "fwd", "alltoall", 1, 8, 1.5e-3), Comm("combine", "fwd", "alltoall", 1, 8, 1.5e-3),
             Comm("combine_grad", "bwd", "alltoall", 1, 8, 0.2e-3),
             Comm("dispatch_grad", "bwd", "alltoall", 1, 8, 0.2e-3))
    got = overlapped(comms, layer, {"fwd": 1e-3, "bwd": 2e-3}, Overlap("all", experts=True), front=False)

    class _Layer:  # what hidden_expert_s reads of a layer prediction
        def __init__(self, comms):
            self.layer = type("L", (), {"comms": comms})()

    assert hidden_expert_s([_Layer(got)], "fwd") == pytest.approx(2e-3)
    assert hidden_expert_s([_Layer(got)], "bwd") == pytest.approx(0.4e-3)
    assert unpaired_passes(1, 0, 4, 1, warm_up=0) == 1
    assert unpaired_passes(4, 0, 8, 2, warm_up=10) == 11
    assert unpaired_passes(4, 0, 4, 2, warm_up=8) == 8
    net = with_precision(load_network("mixtral-8x7b", seq=512), "bf16")
    strategies, _ = megatron_strategies(net, 8, 8, 1, False, expert=8)

    def step(overlap, m):
        return predict_step(net, 8 * m, strategies, default_algorithms(net), H100, ROOF, Optimizer("adam", 1),
                            micro_batches=m, overlap=overlap)

    alone, plain = step("data+experts", 1), step("data", 1)
    assert alone.unpaired_expert_s > 0 and alone.step_s == pytest.approx(plain.step_s)
    paired = step("data+experts", 4)
    assert paired.step_s < step("data", 4).step_s
    assert paired.unpaired_expert_s == pytest.approx(alone.unpaired_expert_s)  # once a step, not per micro-batch


def test_zero3_gathers_hide_under_forward_and_backward():
    pred = _step("data", p=16, batch=32, zero=3)
    plain = _step("none", p=16, batch=32, zero=3)
    hidden = [c for x in pred.layers for c in x.layer.comms if c.purpose == "param_gather"]
    assert hidden and sum(c.link_time - c.seconds for c in hidden) > 0
    assert pred.fwd_s < plain.fwd_s and pred.bwd_s < plain.bwd_s


def test_cpu_machine_overlaps_nothing_as_its_executor():
    local = load_machine("local")
    assert default_overlap(local).mode == "none" and default_overlap(H100).mode == "data"
    net = load_network("gpt-tiny")
    compute = Roofline(local)
    strategies, _ = uniform_strategies(net, 2, 8, "data")
    pred = predict_step(net, 8, strategies, default_algorithms(net), local, compute)
    none = predict_step(net, 8, strategies, default_algorithms(net), local, compute, overlap="none")
    assert pred.overlap == "none" and pred.comm_overlapped_s == 0 and pred.step_s == none.step_s
    assert all(c.link_s is None for x in pred.layers for c in x.layer.comms)


def test_predict_overlap_flag_and_the_breakdown_in_plan_and_predict(tmp_path):
    args = ["predict", "gpt2", "-p", "16", "-b", "32", "--machine", "dgx-h100", "--precision", "bf16",
            "--optimizer", "adam", "--json"]
    got = {m: json.loads(runner.invoke(app, args + ["--overlap", m]).output) for m in ("none", "data")}
    default = json.loads(runner.invoke(app, args).output)
    assert default["overlap"] == "data" and default["step_s"] == got["data"]["step_s"] < got["none"]["step_s"]
    assert got["data"]["comm_exposed_s"] + got["data"]["comm_overlapped_s"] == \
        pytest.approx(got["none"]["comm_exposed_s"], rel=1e-9)
    bad = runner.invoke(app, args + ["--overlap", "sometimes"])
    assert bad.exit_code == 2 and "--overlap" in bad.output
    text = runner.invoke(app, args[:-1])
    assert "overlapped with compute (overlap data)" in text.output
    plan = tmp_path / "p.yaml"
    out = runner.invoke(app, ["plan", "gpt2", "-p", "8", "-b", "16", "--machine", "dgx-h100", "--precision", "bf16",
                              "--optimizer", "adam", "--out", str(plan), "--json"])
    assert out.exit_code == 0, out.output
    planned = json.loads(out.stdout)
    again = json.loads(runner.invoke(app, ["predict", str(plan), "--json"]).output)
    assert planned["step_comm_s"]["exposed"] == pytest.approx(again["comm_exposed_s"], rel=1e-9)
    assert planned["step_comm_s"]["overlapped"] == pytest.approx(again["comm_overlapped_s"], rel=1e-9)
    assert planned["step_breakdown_s"]["gradient sync"] == pytest.approx(again["grad_sync_s"], rel=1e-9)
    said = runner.invoke(app, ["plan", "gpt2", "-p", "8", "-b", "16", "--machine", "dgx-h100", "--precision", "bf16",
                               "--optimizer", "adam"]).output
    assert "reduced in 25 MiB buckets overlapped with the backward pass" in " ".join(said.split())
    assert "overlapped with compute (overlap data)" in said



def test_plan_takes_the_overlap_the_user_runs_and_its_plan_file_keeps_it(tmp_path):
    """`dnnplan plan --overlap all` (Megatron-Core's --tp-comm-overlap) prices every candidate with
    its tensor-parallel collectives under their GEMMs: GPT-2 at 2 sequences on 8 H100s needs a
    tensor split, so the plan is faster than under the default (data); the plan file records the
    mode, and `dnnplan predict` of the file prices it under that mode again (its recorded step)."""
    args = ["plan", "gpt2", "-p", "8", "-b", "2", "--machine", "dgx-h100", "--precision", "bf16", "--json"]
    got = {}
    for mode in ("data", "all"):
        out = runner.invoke(app, args + ["--overlap", mode, "--out", str(tmp_path / f"{mode}.yaml")])
        assert out.exit_code == 0, out.output
        got[mode] = json.loads(out.stdout)
    assert got["all"]["overlap"] == "all" and got["data"]["overlap"] == "data"
    assert got["all"]["step_s"] < got["data"]["step_s"]
    again = json.loads(runner.invoke(app, ["predict", str(tmp_path / "all.yaml"), "--json"]).output)
    assert again["step_s"] == pytest.approx(got["all"]["step_s"], rel=1e-9)
    said = runner.invoke(app, args[:-1] + ["--overlap", "all"]).output
    assert "tensor-parallel collectives overlapped with their GEMMs" in " ".join(said.split())
    bad = runner.invoke(app, args + ["--overlap", "sometimes"])
    assert bad.exit_code == 2 and "--overlap" in bad.output

def test_the_bucket_is_part_of_the_mode_a_plan_file_records():
    from costmodel.comm.overlap import BUCKET_MARK
    assert Overlap("data").spec == "data" and Overlap("data", 76 * 2 ** 20).spec == f"data{BUCKET_MARK}76"
    assert resolve_overlap("all+experts@40", None) == Overlap("all", 40 * 2 ** 20, True)
    assert resolve_overlap(Overlap("data", 3 * 2 ** 19).spec, None).bucket_bytes == 3 * 2 ** 19  # 1.5 MiB
    assert Overlap("none", 76 * 2 ** 20).spec == "none"  # no bucket is reduced under compute
    for bad in ("data@", "data@x", "data@-2", "sometimes@25"):
        with pytest.raises(DnnplanError, match="overlap"):
            resolve_overlap(bad, None)


def test_plan_takes_the_bucket_and_its_plan_file_keeps_it(tmp_path):
    """`dnnplan plan --bucket-mb` prices every candidate with that gradient bucket: GPT-2 on 8 H100s
    at 16 sequences is data parallel, its last bucket's reduction exposed, so a 200 MiB bucket (every
    gradient in it) exposes the whole reduction and the step grows; the plan file records the bucket
    in its mode and `dnnplan predict` of the file prices it with that bucket again."""
    args = ["plan", "gpt2", "-p", "8", "-b", "16", "--machine", "dgx-h100", "--precision", "bf16",
            "--optimizer", "adam", "--json"]
    got = {}
    for mb in (None, 200):
        path = tmp_path / f"b{mb}.yaml"
        out = runner.invoke(app, args + ["--out", str(path)] + ([] if mb is None else ["--bucket-mb", str(mb)]))
        assert out.exit_code == 0, out.output
        got[mb] = json.loads(out.stdout)
    assert got[None]["overlap"] == "data" and got[200]["overlap"] == "data@200"
    assert got[200]["step_comm_s"]["exposed"] > got[None]["step_comm_s"]["exposed"]
    assert got[200]["step_s"] > got[None]["step_s"]
    again = json.loads(runner.invoke(app, ["predict", str(tmp_path / "b200.yaml"), "--json"]).output)
    assert again["overlap"] == "data@200" and again["step_s"] == pytest.approx(got[200]["step_s"], rel=1e-9)
    bad = runner.invoke(app, args + ["--bucket-mb", "0"])
    assert bad.exit_code == 2 and "--bucket-mb" in bad.output


def test_fsdp_reducing_in_float32_every_micro_batch_moves_what_it_runs():
    """Composer's FSDP (mixed_precision DEFAULT, no no_sync): each micro-batch's backward
    reduce-scatters its gradients in float32. GPT-2's h0.fc, a 768 x 3072 weight and 3072 biases in
    bf16 (2 bytes an element), over 16 data ranks: gathered as 4,724,736 bytes before forward and
    before backward, its gradients reduce-scattered as 9,449,472 bytes in each of 4 micro-batches,
    instead of 4,724,736 once a step after the last (under ``no_sync``, the whole gradient kept)."""
    strategies, _ = megatron_strategies(GPT2, 16, 8, 1, False)
    fsdp = Optimizer("adam", 3, reduce_bytes=4, reduce_each_micro=True)

    def run(opt, overlap="none"):
        return predict_step(GPT2, 32, strategies, default_algorithms(GPT2), H100, ROOF, opt, micro_batches=4,
                            overlap=overlap)

    once, each = run(Optimizer("adam", 3, reduce_each_micro=False)), run(fsdp)

    def comms(pred):
        layer = next(x.layer for x in pred.layers if x.layer.name == "h0.fc")
        return {(c.purpose, c.phase): c for c in layer.comms}

    elems = 768 * 3072 + 3072
    assert {k: c.nbytes for k, c in comms(once).items()} == {
        ("grad_sync", "sync"): 2 * elems, ("param_gather", "fwd"): 2 * elems, ("param_gather", "bwd"): 2 * elems}
    got = comms(each)
    assert {k: c.nbytes for k, c in got.items()} == {
        ("grad_sync", "bwd"): 4 * elems, ("param_gather", "fwd"): 2 * elems, ("param_gather", "bwd"): 2 * elems}
    # the step counts the reduce-scatter once a micro-batch, inside the backward passes
    sync = [c for x in each.layers for c in x.layer.comms if c.purpose == "grad_sync"]
    assert sync and all(c.phase == "bwd" for c in sync) and each.sync_s == 0
    assert each.comm_exposed_s - once.comm_exposed_s == pytest.approx(
        sum(4 * c.seconds for c in sync) - once.sync_s, rel=1e-9)
    # overlapped, it hides under each micro-batch's backward as the reduction once a step did
    hidden = run(fsdp, "data")
    assert hidden.comm_exposed_s + hidden.comm_overlapped_s == pytest.approx(each.comm_exposed_s, rel=1e-9)
    with pytest.raises(DnnplanError):
        Optimizer("adam", 3, reduce_bytes=3)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_sharded_gradients_are_reduced_in_every_micro_batch_by_default(stage):
    """ZeRO-2 and -3 hold a weight's gradient as a shard, so under gradient accumulation they
    reduce-scatter it in every micro-batch's backward (DeepSpeed's stages 2 and 3, PyTorch FSDP as
    torchtitan accumulates); stages 0 and 1 accumulate the whole gradient and reduce it once a step.
    GPT-2 on 16 data ranks: with one micro-batch the step is the same either way; with 4, stages 2
    and 3 reduce four times what once a step reduces."""
    strategies, _ = megatron_strategies(GPT2, 16, 8, 1, False)
    each = stage >= 2
    assert Optimizer("adam", stage).reduces_each_micro == each
    assert Optimizer("adam", stage, reduce_each_micro=not each).reduces_each_micro == (not each)

    def run(opt, m):
        return predict_step(GPT2, 32 * m, strategies, default_algorithms(GPT2), H100, ROOF, opt, micro_batches=m,
                            overlap="none")

    default, once = Optimizer("adam", stage), Optimizer("adam", stage, reduce_each_micro=False)
    assert run(default, 1).step_s == pytest.approx(run(once, 1).step_s, rel=1e-12)
    reduced = [c for x in run(default, 4).layers for c in x.layer.comms if c.purpose == "grad_sync"]
    assert reduced and all(c.phase == ("bwd" if each else "sync") for c in reduced)
    extra = run(default, 4).comm_exposed_s - run(once, 4).comm_exposed_s
    assert extra == pytest.approx(3 * sum(c.seconds for c in reduced) if each else 0.0, rel=1e-9, abs=1e-15)



@pytest.mark.parametrize("args", [
    ["gpt2", "-p", "16", "--pipeline", "2", "--micro-batches", "4"],  # tied embedding: synced between the ends
    ["resnet152", "-p", "32", "--machine", "dgx-b200", "--pipeline", "4", "--micro-batches", "8"],  # sends
])
def test_a_pipelines_communication_holds_its_sends_and_its_tied_sync(args):
    """In a pipeline the communication line holds every term that is communication: the stages'
    sends and the gradient sync whole (the tied embedding's two-rank allreduce between the first and
    the last stage with it), not only the layers' collectives; with nothing overlapped, all exposed."""
    got = json.loads(runner.invoke(app, ["predict", *args, "--overlap", "none", "--json"]).output)
    terms = got["step_breakdown_s"]
    sends, sync = terms.get("pipeline sends", 0.0), terms["gradient sync"]
    assert sends + sync > 0 and got["comm_overlapped_s"] == 0
    assert got["comm_exposed_s"] >= sends + sync
    tied = max(s.get("tied_sync_s", 0.0) for s in got["stages"])
    assert (tied > 0) == (args[0] == "gpt2")
