"""bench/published/published_modern.py maps a published run to the step the cost model prices: the stated
layout on the stated GPUs, the cited model to its parameter, the source's FLOP convention to its
published figures. Mapping checks only, no timing (the errors are bench_published_modern.py's)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from costmodel.choices.moe_dispatch import moe_dispatch_of
from costmodel.choices.precision import PRECISIONS, with_precision
from dnnplan.cli import app
from networks.loader import load_network

from tests.support.bench import load_bench

pm = load_bench("published_modern")
ROWS = {r["name"]: r for r in pm.load_rows()}


def _attention_and_mlp(pred, op: str):
    """The strategy of the first layer named ``op`` (attn, moe, fc1) in each stage."""
    return [next(x.layer.strategy for x in s.micro.layers if x.layer.name.endswith("." + op)) for s in pred.stages]


@pytest.mark.parametrize("name, tensor, pipeline, context, data, expert", [
    ("foundry-main-mpt7b-s2048-g8", 1, 1, 1, 8, 1),  # FSDP over 8
    ("nemo2407-llama3-70b-64gpu-fp8", 4, 4, 2, 2, 1),  # TP 4, PP 4 (VP 5), CP 2
    ("mcore-moe-mixtral-8x7b-64gpu", 1, 4, 1, 16, 8),  # EP 8 out of DP 16, PP 4 (VP 8)
    ("llama3-t4-r3-405b-16384gpu-s128k", 8, 16, 16, 8, 1),  # Table 4 row 3: DP 8 (printed 4)
])
def test_a_row_is_priced_on_its_published_layout(name, tensor, pipeline, context, data, expert):
    row = ROWS[name]
    lay = pm.layout(row)
    assert (lay["tensor"], lay["pipeline"], lay["context"], lay["data"], lay["expert"]) == \
        (tensor, pipeline, context, data, expert)
    assert tensor * pipeline * context * data == row["config"]["gpus"]
    assert lay["micro"] * lay["data"] * lay["micro_batches"] == row["config"]["batch"]
    pred = pm.predict_row(row)
    assert len(pred.stages) == pipeline and pred.micro_batches == lay["micro_batches"]
    assert all(s.ranks * pipeline == row["config"]["gpus"] for s in pred.stages)
    assert pred.chunks == row["config"]["chunks"]
    for attn in _attention_and_mlp(pred, "attn"):  # heads over tensor, sequence over context, batch over data
        assert (attn.degree("F"), attn.degree("H"), attn.degree("N")) == (tensor, context, data)
        assert tensor * context * data * pipeline == row["config"]["gpus"]
    if expert > 1:
        for moe in _attention_and_mlp(pred, "moe"):  # experts carved out of the data ranks
            assert (moe.degree("E"), moe.degree("N")) == (expert, data // expert)
            assert tensor * pipeline * context * expert * (data // expert) == row["config"]["gpus"]


@pytest.mark.parametrize("name", [n for n, r in ROWS.items() if "params" in r["model"]])
def test_an_mpt_model_has_the_parameters_llm_foundry_prints(name):
    """The README's NumParams (learned positions of the row's sequence included), to the parameter."""
    row = ROWS[name]
    assert pm.parameter_count(pm.network_of(row)) == row["model"]["params"]


def test_zoo_models_and_cited_sizes_agree():
    """Mixtral as the zoo has it (the released checkpoint's 46,702,792,704); Llama 3's rows use the
    vocabulary its paper prints (128,000 against the checkpoint's 128,256: the embedding and head
    256 rows fewer each); 405B, GPT-3 XL 1.3B and 2.7B, Qwen3 30B-A3B and 235B-A22B at their names."""
    count = {name: pm.parameter_count(pm.network_of(r)) for name, r in ROWS.items()}
    zoo = {n: pm.parameter_count(with_precision(load_network(n), "bf16")) for n in ("mixtral-8x7b", "llama3-8b")}
    assert count["mcore-moe-mixtral-8x7b-64gpu"] == zoo["mixtral-8x7b"] == 46_702_792_704
    assert count["nemo2407-llama3-8b-8gpu-fp8"] == zoo["llama3-8b"] - 2 * 256 * 4096
    for name, size in (("llama3-t4-r1-405b-8192gpu-s8k", 405e9), ("fa2-t1-gpt3-1.3b-2k-flash", 1.3e9),
                       ("fa2-t1-gpt3-2.7b-2k-flash", 2.7e9), ("nemo2511-qwen3-30b-a3b-16gpu-fp8-cs", 30e9),
                       ("nemo2511-qwen3-235b-a22b-256gpu-fp8-cs", 235e9), ("nemo2511-llama3-70b-64gpu-fp8-cs", 70e9)):
        assert count[name] == pytest.approx(size, rel=0.035), name


def test_flop_conventions_give_the_published_mfu():
    """Each source's own FLOP count over its published step gives its published MFU (llm-foundry:
    Composer's H100 bf16 peak 989.5 TFLOP/s; Llama 3: its MFU is its TFLOP/s over the same peak)."""
    for name in ("foundry-main-mpt7b-s2048-g8", "foundry-large-mpt70b-s2048-g512", "foundry-main-mpt13b-s32768-g8"):
        row = ROWS[name]
        net = pm.network_of(row)
        per_gpu = pm.step_flops(row, net) / (pm.published_s(row, net) * row["config"]["gpus"])
        assert per_gpu / 989.5e12 == pytest.approx(row["published"]["mfu"], abs=0.0015), name
    row = ROWS["llama3-t4-r1-405b-8192gpu-s8k"]
    assert row["published"]["tflops_per_gpu"] / 989.5 == pytest.approx(row["published"]["mfu"], abs=0.005)
    net = pm.network_of(row)
    assert pm.metric_at(row, net, pm.published_s(row, net)) == pytest.approx(430)


def test_what_the_cost_model_lacks_is_named_not_hidden():
    """An FP8 row is priced in BF16 until the cost model has FP8, and says so; a BF16 row of a
    known kernel may calibrate."""
    fp8 = ROWS["nemo2511-llama3-8b-8gpu-fp8-cs"]
    has_fp8 = "fp8" in PRECISIONS
    assert pm.precision_of(fp8) == ("fp8" if has_fp8 else "bf16") and pm.kernels_as_run(fp8) == has_fp8
    assert any("FP8" in d for d in pm.deviations(fp8)) != has_fp8
    assert pm.kernels_as_run(ROWS["foundry-main-mpt7b-s2048-g8"])
    assert not pm.kernels_as_run(ROWS["fa2-t1-gpt3-1.3b-2k-flash"])  # FlashAttention-1's column
    assert not pm.kernels_as_run(ROWS["fa2-t1-gpt3-1.3b-2k-standard"])  # baseline not published


def test_a_dropless_expert_split_prices_the_host_synchronisation_and_says_so():
    """NeMo 25.11's Qwen3-30B-A3B ran dropless through Megatron-Core's alltoall dispatcher, which
    synchronises with the host before each expert all-to-all; NeMo 25.09's run of the same layout
    dropped and padded to capacity 1.0, which needs no synchronisation. Both are priced as the same
    capacity-1.0 buffer under the megatron framework; only the dropless row waits for the host in
    its MoE layers, and only it says so."""
    dropless = ROWS["nemo2511-qwen3-30b-a3b-16gpu-fp8-cs"]
    padded = ROWS["nemo2509-qwen3-30b-a3b-16gpu-fp8-cs-tokendrop"]
    assert pm.layout(dropless) == pm.layout(padded) and pm.model_spec(dropless) == pm.model_spec(padded)
    assert any("before_ep_alltoall" in d for d in pm.deviations(dropless))
    assert not any("before_ep_alltoall" in d for d in pm.deviations(padded))
    dense = ROWS["nemo2511-llama3-8b-8gpu-fp8-cs"]  # no experts, nothing to synchronise
    assert not any("before_ep_alltoall" in d for d in pm.deviations(dense))
    assert pm.framework_of(dropless) == pm.framework_of(padded) == pm.framework_of(dense) == "megatron"
    assert pm.framework_as_run(dropless).op("moe").sync_after > 0 == pm.framework_as_run(padded).op("moe").sync_after
    composer = ROWS["foundry-main-mpt7b-s2048-g8"]  # no framework file for Composer: the fused kernels, an idle host
    assert pm.framework_of(composer) == "ideal" and pm.framework_as_run(composer).host.zero


def test_nemo_26_02_and_26_02_01_qwen3_30b_rows_are_one_configuration_at_two_speeds():
    """NeMo 26.02 prints Qwen3-30B-A3B on 16 H100s at 5113 tokens/s a GPU, 26.02.01 at 9058, on
    the same printed layout: the rows price one configuration (the same step), both dropless with
    the same unpriced host synchronisation, so the two errors differ only by the published figure."""
    slow, fast = ROWS["nemo2602-qwen3-30b-a3b-16gpu-fp8-cs"], ROWS["nemo260201-qwen3-30b-a3b-16gpu-fp8-cs"]
    assert slow["config"] == fast["config"] and pm.model_spec(slow) == pm.model_spec(fast)
    assert pm.deviations(slow) == pm.deviations(fast)
    assert any("before_ep_alltoall" in d for d in pm.deviations(slow))
    assert (slow["published"]["tokens_per_s_per_gpu"], fast["published"]["tokens_per_s_per_gpu"]) == (5113, 9058)


def test_the_planner_plans_a_published_model_with_overlapped_buckets(tmp_path):
    """MPT-30B on 8 H100s (llm-foundry's row): the pipeline search's bound prices two blocks whose
    layers differ in candidates (the first block's gradients in the last bucket, costmodel.comm.overlap)
    and pairs each form's cost with its own memory; it stopped with an internal error before."""
    row = ROWS["foundry-main-mpt30b-s2048-g8"]
    spec = tmp_path / "mpt-30b.yaml"
    spec.write_text(pm.model_spec(row))
    got = CliRunner().invoke(app, ["plan", str(spec), "-p", "8", "-b", "504", "--machine", "dgx-h100",
                                   "--precision", "bf16", "--optimizer", "adam", "--time-limit", "10", "--json"])
    assert got.exit_code == 0, got.output
    out = json.loads(got.stdout)
    assert out["devices"] == 8 and out["step_s"] > 0


def _bench():
    return load_bench("bench_published_modern")


def test_rows_that_plan_different_specs_are_planned_apart(monkeypatch):
    """NeMo 24.07's and 25.11's Llama 3 8B rows share model, sequence, GPUs, batch, machine and
    precision but not the loss layer (25.11's fused cross entropy): each is planned on its own spec
    (one plan served both before, and 25.11's row showed 24.07's plan as slower than its layout)."""
    bench = _bench()
    old, new = ROWS["nemo2407-llama3-8b-8gpu-fp8"], ROWS["nemo2511-llama3-8b-8gpu-fp8-cs"]
    assert bench.plan_key(old) != bench.plan_key(new)
    assert bench.plan_key(ROWS["fa2-t1-gpt3-1.3b-2k-flash"]) == bench.plan_key(ROWS["fa2-t1-gpt3-1.3b-2k-flash2"])
    planned = []
    monkeypatch.setattr(bench, "plan_step", lambda row, limit: planned.append(row["name"]) or {"step_s": 1.0})
    results = [{"shipped": {"step_s": 2.0}} for _ in range(3)]
    bench.planner_check([old, new, ROWS["nemo2407-llama3-8b-8gpu-fp8"]], results, 8, 1.0)
    assert planned == [old["name"], new["name"]]
    assert all(r["planner"]["not_slower"] for r in results)


def test_flash_attention_2_table_1_runs_fit_the_a100_as_they_ran():
    """GPT3-2.7B at 8k (Dao 2023 Table 1) without recomputation: what a layer keeps for backward
    by hand, per token, d = 2560 wide, bf16: the residual into each norm (2 d each), each norm's
    output (2 d each), q, k, v and the attention output (8 d), the MLP's pre-activation and GELU
    output (8 d each): 32 d bytes. At the recipe's micro-batch 4 that is 80 GiB over 32 layers, so
    the row is priced at 2 (its notes), which fits the 80 GiB GPU."""
    row = ROWS["fa2-t1-gpt3-2.7b-8k-flash2"]
    assert row["config"]["micro"] == 2 and any("b4cc152" in n for n in row["notes"])
    pred = pm.predict_row(row, micro=4).stages[0].micro
    blocks = sum(x.layer.memory.activations for x in pred.layers if x.layer.name.startswith("h"))
    assert blocks == pytest.approx(32 * 2560 * 4 * 8192 * 32, rel=0.005)
    machine = pm.load_machine(row["machine"])
    assert pm.predict_row(row).memory_peak_bytes <= machine.device.mem_capacity_bytes


def test_an_unpublished_baseline_gets_the_least_recomputation_that_fits():
    """Table 1's GPT3-2.7B 8k baseline (materialised scores, micro-batch unpublished): one sequence
    does not fit 80 GiB with every score kept; with attention's core recomputed it does."""
    bench = _bench()
    row = ROWS["fa2-t1-gpt3-2.7b-8k-standard"]
    machine = pm.load_machine(row["machine"])
    cap = machine.device.mem_capacity_bytes
    assert pm.predict_row(row, micro=1, recompute="none").memory_peak_bytes > cap
    got = bench.baseline_layout(row, list(ROWS.values()), machine)
    assert got == {"micro": 1, "recompute": "selective"}
    assert pm.predict_row(row, **got).memory_peak_bytes <= cap
    published = ROWS["fa2-t1-gpt3-2.7b-8k-flash"]
    assert bench.baseline_layout(published, list(ROWS.values()), machine) == {"micro": 2, "recompute": "none"}


def test_llm_foundry_rows_reduce_as_composer_ran_fsdp():
    """Composer's FSDP under MP Mode DEFAULT reduce-scatters float32 gradients in every micro-batch
    (the asset's source paragraph): MPT-30B's fc1 (7168 x 28672 and its biases, bf16) gathers
    2 bytes an element before forward and backward and reduce-scatters 4 in each backward."""
    row = ROWS["foundry-main-mpt30b-s2048-g8"]
    assert row["config"]["grad_reduce"] == "fp32" and row["config"]["reduce_each_micro"]
    layer = next(x.layer for x in pm.predict_row(row).stages[0].micro.layers if x.layer.name == "h0.fc1")
    got = {(c.purpose, c.phase): c.nbytes for c in layer.comms}
    elems = 7168 * 28672 + 28672
    assert got == {("grad_sync", "bwd"): 4 * elems, ("param_gather", "fwd"): 2 * elems,
                   ("param_gather", "bwd"): 2 * elems}


def test_llama3_table4_runs_their_interleaved_schedule_with_one_layer_chunks():
    """Section 3.3.2: V stages a rank, one layer fewer on the first and last stage, so the first
    chunk holds only the embedding and the last only the output and loss: 128 one-layer chunks."""
    row = ROWS["llama3-t4-r3-405b-16384gpu-s128k"]
    net = pm.network_of(row)
    cuts = pm.cuts_of(row, net)
    assert len(cuts) == 16 * 8 == row["model"]["layers"] + 2
    assert [layer.name for layer in cuts[0]] == ["embed"]
    assert [layer.name for layer in cuts[-1]] == ["norm", "lm_head", "loss"]
    assert all(len({layer.name.split(".")[0] for layer in c}) == 1 for c in cuts[1:-1])
    assert pm.cuts_of(ROWS["foundry-main-mpt7b-s2048-g8"], pm.network_of(ROWS["foundry-main-mpt7b-s2048-g8"])) is None


def test_context_parallel_rows_run_sequence_parallelism_inside_each_context_rank():
    """Megatron-Core runs SP within CP: the norms split the local positions over the tensor group,
    and the 131,072-token row fits the 80 GiB its run had."""
    row = ROWS["llama3-t4-r3-405b-16384gpu-s128k"]
    assert pm.sequence_parallel(row) and not any("replicated" in d for d in pm.deviations(row))
    pred = pm.predict_row(row)
    norm = next(x.layer.strategy for x in pred.stages[1].micro.layers if x.layer.name.endswith(".norm1"))
    assert norm.degree("H") == 16 * 8
    assert pred.memory_peak_bytes < 80 * 2**30


def test_the_derived_virtual_stages_are_also_the_fastest_that_fit():
    """Table 4 does not print V; the row's V = 8 (one-layer chunks) is stated among its deviations,
    and of the V this cut allows it is the one a user of the tool would pick."""
    import copy
    row = ROWS["llama3-t4-r2-405b-16384gpu-s8k"]
    assert any(d.startswith("chunks 8 not published") for d in pm.deviations(row))
    steps = {}
    for v in (1, 2, 4, 8):
        trial = copy.deepcopy(row)
        trial["config"]["chunks"] = v
        pred = pm.predict_row(trial)
        if pred.memory_peak_bytes <= 80 * 2**30:
            steps[v] = pred.step_s
    assert min(steps, key=steps.get) == row["config"]["chunks"]


def test_a_context_rank_holds_what_a_short_sequence_holds():
    """Memory by what holds it: with SP inside CP 16, a block of the 131,072-token row keeps per
    device the activations the 8,192-token row's block keeps (each rank's 8,192 positions split 8
    ways over the tensor group for the norms), and the device holds them for the micro-batches its
    schedule keeps in flight beside its weights and state."""
    def block(name):
        pred = pm.predict_row(ROWS[name])
        stage = pred.stages[1]
        kept = sum(x.layer.memory.activations for x in stage.micro.layers if x.layer.name.startswith("h0."))
        return pred, stage, kept
    _, _, short = block("llama3-t4-r1-405b-8192gpu-s8k")
    pred, stage, long = block("llama3-t4-r3-405b-16384gpu-s128k")
    assert long == pytest.approx(short, rel=0.02)
    hidden, tensor, local = 16384, 8, 131072 // 16
    norm = next(x.layer.memory.activations for x in stage.micro.layers if x.layer.name == "h0.norm1")
    assert norm == local // tensor * (hidden * 2 + 4)  # its bf16 output shard and an fp32 statistic a position
    parts = stage.micro.memory_parts
    assert stage.memory_peak_bytes == sum(parts.values()) + int(stage.micro.activation_bytes * (stage.kept_micro_batches - 1))
    assert stage.kept_micro_batches == pred.micro_batches == 16  # M = S: every micro-batch warms up first


def test_a_recipe_with_tp_comm_overlap_hides_its_tensor_collectives_and_says_so():
    """NeMo 25.11's Llama 3 70B recipe pipelines its tensor-parallel collectives with their GEMMs
    (tp_comm_overlap): priced under overlap 'all', a TP-4 linear's all-gather and reduce-scatter are
    exposed only past their GEMM's time, the step is faster than with them exposed, and the
    deviations say which communication is still exposed; Qwen3-235B's H100 recipe turns it off."""
    row = ROWS["nemo2511-llama3-70b-64gpu-fp8-cs"]
    assert row["config"]["tp_comm_overlap"] and not ROWS["nemo2511-qwen3-235b-a22b-256gpu-fp8-cs"]["config"].get(
        "tp_comm_overlap")
    off = {**row, "config": {**row["config"], "tp_comm_overlap": False}}
    on_pred, off_pred = pm.predict_row(row), pm.predict_row(off)
    assert on_pred.step_s < off_pred.step_s

    def fc1(pred):
        return next(x for x in pred.stages[1].micro.layers if x.layer.name.endswith(".fc1"))

    on, exposed = fc1(on_pred), fc1(off_pred)
    tensor = [c for c in exposed.layer.comms if c.purpose in ("input_gather", "output_grad", "input_grad",
                                                                  "partial_sum")]
    assert tensor and all(c.seconds == pytest.approx(c.link_time) for c in tensor)
    hidden = [c for c in on.layer.comms if c.purpose in ("input_gather", "output_grad", "input_grad", "partial_sum")]
    assert len(hidden) == len(tensor) and all(c.seconds < c.link_time for c in hidden)
    assert any("tensor-parallel communication overlapped" in d for d in pm.deviations(row))
    assert any("tensor- and context-parallel communication not overlapped" in d for d in pm.deviations(off))


def test_a_recipe_with_moe_a2a_overlap_hides_its_expert_all_to_alls():
    """NeMo 25.11's Qwen3-235B ran Megatron-Core's combined 1F1B (moe_a2a_overlap): priced under
    ``data+experts`` its MoE layers' all-to-alls hide under their opposite pass, so the step is
    faster than with them exposed, but for the passes the schedule cannot pair; its H100 recipe runs
    no tensor-parallel overlap."""
    row = ROWS["nemo2511-qwen3-235b-a22b-256gpu-fp8-cs"]
    off = {**row, "config": {**row["config"], "moe_a2a_overlap": False}}
    assert pm.overlap_of(row) == "data+experts" and pm.overlap_of(off) == "data"
    on_pred, off_pred = pm.predict_row(row), pm.predict_row(off)
    assert on_pred.step_s < off_pred.step_s

    def a2a(pred):
        moe = next(x for x in pred.stages[1].micro.layers if x.layer.name.endswith(".moe"))
        return [c for c in moe.layer.comms if c.collective == "alltoall"]

    assert all(c.seconds == pytest.approx(c.link_time) for c in a2a(off_pred))
    assert a2a(on_pred) and all(c.seconds < c.link_time for c in a2a(on_pred))
    assert any("moe_a2a_overlap: each expert all-to-all hidden" in d for d in pm.deviations(row))
    # the passes the interleaved schedule runs alone (warm-up forwards and one more, the cool-down's
    # backwards) hide none: device 0 warms up 2 x 7 + 3 x 8 = 38 chunk forwards, the last device 24
    alone = [s.unpaired_s for s in on_pred.stages]
    assert all(s.unpaired_s == 0 for s in off_pred.stages) and alone[0] > alone[-1] > 0


def test_only_composer_rows_run_torch_fsdp_kernels():
    """torch FSDP's own kernels (costmodel.layer.fsdp) are priced for the rows Composer ran
    (framework: composer, every llm-foundry row), not for NeMo's Megatron FSDP row, which shards
    alike (fsdp-full-shard) but is not PyTorch FSDP."""
    foundry, nemo = ROWS["foundry-main-mpt7b-s2048-g8"], ROWS["nemo2511-llama3-8b-8gpu-fp8-cs"]
    assert foundry["config"]["data_sharding"] == nemo["config"]["data_sharding"] == "fsdp-full-shard"
    prep = [x.layer.grad_prep_s for x in pm.predict_row(foundry).stages[0].micro.layers]
    assert any(s > 0 for s in prep)
    assert all(x.layer.grad_prep_s == 0 for x in pm.predict_row(nemo).stages[0].micro.layers)
    assert all(r["config"].get("framework") == "composer" for r in ROWS.values() if r["group"].startswith("llm-foundry"))


def test_the_hybridep_recipe_runs_the_flex_dispatcher_and_the_planner_is_given_it():
    """NeMo 26.04's Qwen3-30B-A3B ran its recipe's EP 16 over two DGX-H100 nodes on Megatron-Core's
    flex dispatcher with HybridEP (moe_dispatcher: flex): its moe layers are marked flex, its expert
    exchanges are priced as the flex dispatcher's (each token across the network at most once, not
    the all-to-all's rows), the planner is given --moe-dispatch flex, and the alltoall rows are left
    as they were."""
    row = ROWS["nemo2604-qwen3-30b-a3b-16gpu-fp8-cs"]
    assert row["config"]["moe_dispatcher"] == "flex" and pm.layout(row)["expert"] == 16
    assert moe_dispatch_of(pm.network_of(row)) == "flex"
    assert moe_dispatch_of(pm.network_of(ROWS["nemo260201-qwen3-235b-a22b-256gpu-fp8-cs"])) == "alltoall"
    plain = {**row, "config": {k: v for k, v in row["config"].items() if k != "moe_dispatcher"}}
    flex, alltoall = pm.predict_row(row), pm.predict_row(plain)

    def exchanges(pred):
        moe = next(x for x in pred.stages[0].micro.layers if x.layer.name.endswith(".moe"))
        return [c for c in moe.layer.comms if c.purpose in ("dispatch", "combine", "combine_grad", "dispatch_grad")]

    assert {c.collective for c in exchanges(flex)} == {"flex"}
    assert {c.collective for c in exchanges(alltoall)} == {"alltoall"}
    assert sum(c.seconds for c in exchanges(flex)) < sum(c.seconds for c in exchanges(alltoall)) / 3
    assert flex.step_s < alltoall.step_s
    assert any("the flex dispatcher" in d for d in pm.deviations(row))
    bench = _bench()
    assert bench.plan_key(row) != bench.plan_key(plain) and bench.plan_key(row)[-1] == "flex"


def test_blackwell_rows_calibrate_a_set_of_their_own():
    """B200 and GB200 rows fit their own efficiencies on their own calibration rows; the A100/H100
    set is fitted without them; what their recipes ran that the cost model does not price is named."""
    bench = _bench()
    rows = pm.load_rows()
    blackwell = bench.fitting_rows(rows, "blackwell")
    assert blackwell and {r["machine"] for r in blackwell} == {"dgx-b200", "gb200-nvl72"}
    assert not any(r["machine"] in bench.GENERATIONS for r in bench.fitting_rows(rows))
    on_blackwell = [r for r in rows if r["machine"] in bench.GENERATIONS]
    assert 2 * len(blackwell) <= len(on_blackwell)
    regression = ROWS["nemo2511-b200-qwen3-30b-a3b-8gpu-fp8-mx"]
    assert regression["set"] == "held-out" and regression not in blackwell
    assert any("MXFP8" in d for d in pm.deviations(ROWS["nemo260401-gb200-llama3-70b-64gpu-fp8-mx"]))
    assert any("offloaded to the CPU" in d for d in pm.deviations(ROWS["nemo2511-gb200-llama3-70b-64gpu-fp8-cs"]))


def test_the_blackwell_set_fits_only_the_classes_its_rows_identify():
    from costmodel.compute.calibration import fit_efficiencies
    from costmodel.machine.loading import load_machine
    bench = _bench()
    rows = [r for r in pm.load_rows() if r["machine"] in bench.GENERATIONS]
    micro = {r["name"]: {"micro": r["config"]["micro"], "recompute": r["config"]["recompute"]} for r in rows}
    data = bench.calibration_data(rows, micro, "blackwell")
    assert len(data) == len(bench.fitting_rows(rows, "blackwell"))  # no A100/H100 row joins it
    device = load_machine("dgx-b200").device
    start = {k: device.efficiency_of(k) for k in ("cuda_cores", "tensor_tf32", "tensor_16bit", "memory")}
    fitted = fit_efficiencies(data, start, classes=bench.GENERATION_CLASSES)
    assert {k: fitted[k] for k in ("cuda_cores", "tensor_tf32")} == {k: start[k] for k in ("cuda_cores", "tensor_tf32")}
    assert fitted["tensor_16bit"] != start["tensor_16bit"]  # the shipped H100 fraction is not Blackwell's


def test_the_b200_gpt_oss_row_of_25_11_runs_its_recipes_expert_split_across_nodes():
    """NeMo 25.11's DGX-B200 GPT-OSS table prints EP 8, but its recipe (Megatron-Bridge v0.2.0,
    GPT_OSS_120B_B200_BF16_BASE_CONFIG) ran EP 64: the row runs EP 64 and says what was printed; its
    experts' all-to-alls then span the eight nodes, so the step is slower than at EP 8 inside one."""
    row = ROWS["nemo2511-b200-gpt-oss-120b-64gpu-bf16"]
    assert pm.layout(row)["expert"] == 64 and row["as_published"] == {"expert": 8}
    printed = {**row, "config": {**row["config"], "expert": 8}}
    assert pm.predict_row(row).step_s > 1.2 * pm.predict_row(printed).step_s


def test_blackwell_qwen3_30b_recipes_of_26_04_01_run_the_flex_dispatcher():
    """Megatron-Bridge v0.4.2's Qwen3-30B-A3B B200 and GB200 presets name HybridEP, which
    apply_flex_dispatcher_backend keeps on compute capability 10: both rows run the flex dispatcher;
    the B200 Qwen3-235B recipe sets alltoall and stays on it."""
    for name in ("nemo260401-b200-qwen3-30b-a3b-8gpu-fp8-mx", "nemo260401-gb200-qwen3-30b-a3b-8gpu-fp8-mx"):
        assert moe_dispatch_of(pm.network_of(ROWS[name])) == "flex"
    assert moe_dispatch_of(pm.network_of(ROWS["nemo260401-b200-qwen3-235b-a22b-256gpu-fp8-mx"])) == "alltoall"


def test_a_row_filed_as_a_regression_calibrates_nothing():
    """A calibration row the publisher filed as its framework's regression is predicted and
    reported, but no efficiency is fitted to it."""
    bench = _bench()
    rows = pm.load_rows()
    row = ROWS["nemo2511-b200-qwen3-235b-a22b-64gpu-fp8-mx"]
    assert row["set"] == "calibration" and row["regression"]
    assert row["name"] not in {r["name"] for r in bench.fitting_rows(rows, "blackwell")}
    assert bench.fitting_rows(rows, "blackwell")


def test_a_summary_of_one_split_has_no_empty_lines():
    """--rows may pick rows of one split only: the summary lists that split, never an empty one."""
    bench = _bench()
    got = {"error": 0.1}
    results = [{"source": "s", "split": "held-out", "generation": "", "moe": False, "regression": "",
                "shipped": got, "calibrated": got}]
    out = bench.summary(results, "calibrated")
    assert out["all | held-out"]["rows"] == 1
    assert not any(k.endswith("calibration") for k in out)
