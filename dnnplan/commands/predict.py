"""`dnnplan predict`: one layout of the layers, or a plan file, priced by the cost model."""

from __future__ import annotations

import typer
from typer._click.core import ParameterSource  # typer >= 0.29 (pyproject) carries its own click

from costmodel.choices.training import TrainingChoices
from costmodel.step.train_time import tokens_per_step, train_time
from dnnplan.assumed import assumed_flags
from dnnplan.commands.predict_from import predict_from
from dnnplan.flag_values import price_for
from dnnplan.output import check_outputs, json_beside, named
from dnnplan.choice_flags import takes_choices
from dnnplan.options import (BatchOpt, ChunksOpt, ContextOpt, DevicesOpt, ExpertOpt, ForceOpt, ForeignProfileOpt,
                             FromNetworkOpt, FromOpt, JsonOpt, LayersOpt, MachineOpt, MicroBatchesOpt,
                             PredictNetworkArg, PipelineOpt, PlanOutOpt,
                             PredictStepContextOpt, ProfileOpt, RecomputeModeOpt, RuntimeOpt, PredictScheduleOpt,
                             SequenceParallelOpt, StrategyOpt, TensorOpt, PriceOpt, TokensOpt, foreign_warning, token_budget)
from dnnplan.render import predict as render, tables
from dnnplan.render.crossings import crossing_lines
from dnnplan.render.terminal.messages import warn
from dnnplan.render.plan import wrote_line
from executor.session import predict as predicting
from planner.export.megatron_layout import sequence_length
from executor.session.predict import LayerSplits
from planner.plan.plan_file import is_plan_file, write_plan
from networks.errors import DnnplanError
from networks.writing import standard_stream
from profiler import context


#: The worked examples of `dnnplan predict --help`, after its docstring (dnnplan.cli.command_help)
EXAMPLES = """
Each of M micro-batches holds batch/M samples, split over a stage's data-parallel ranks.
GPT-3 175B as Narayanan et al. (SC21, Table 2) ran it on 1536 GPUs, tensor 8 x pipeline 12 x
data 16, micro-batches of one sample:
dnnplan predict gpt3-175b -p 1536 -b 1536 --precision fp16 --optimizer adam --tensor 8
--pipeline 12 --micro-batches 96 --recompute full --machine dgx-a100
Add --schedule interleaved --chunks 2 for Megatron-LM's interleaved 1F1B with 2 model chunks a device
(of 4 of a stage's 8 blocks each).

Llama 3 8B under FSDP on 64 H100s in FP8, 4 micro-batches of one sequence, the gradient
reduction and the gathers overlapped (--overlap data, the default on GPU machines):
dnnplan predict llama3-8b -p 64 -b 256 --machine dgx-h100 --precision fp8 --optimizer adam
--zero 3 --micro-batches 4

--context C splits the sequence over C devices, --expert E a mixture of experts' experts over E
data-parallel ones (Megatron-Core's context and expert parallelism). Mixtral 8x7B on 64 H100s:
dnnplan predict mixtral-8x7b -p 64 -b 256 --machine dgx-h100 --precision bf16 --optimizer adam
--expert 8 --pipeline 4 --micro-batches 16

DeepSpeed's ZeRO-3 as Narayanan et al. (Table 2) ran GPT-3 on 1536 GPUs, one sample each:
dnnplan predict gpt3-175b -p 1536 -b 1536 --precision fp16 --optimizer adam --zero 3
--recompute full --framework deepspeed --machine dgx-a100. --out FILE writes the layers' strategies
as a plan (no pipeline) for `dnnplan execute`, e.g. tiny-moe -p 4 -b 8 --tensor 2 --expert 2.
"""


@takes_choices("precision", "optimizer", "zero", "attention", "overlap", "bucket_mb", "batch_norm", "moe_dispatch",
               "seq", "framework", "fp8_params", "grad_fp32")
def predict(click: typer.Context, network: PredictNetworkArg = None, devices: DevicesOpt = 1,
            strategy: StrategyOpt = "data", batch: BatchOpt = None, machine: MachineOpt = None, profile: ProfileOpt = None,
            choices: TrainingChoices = TrainingChoices(), tensor: TensorOpt = 1,
            sequence_parallel: SequenceParallelOpt = False, context_: ContextOpt = 1, expert: ExpertOpt = 1,
            pipeline: PipelineOpt = 1, micro_batches: MicroBatchesOpt = 1, schedule: PredictScheduleOpt = "1f1b",
            chunks: ChunksOpt = 1, recompute: RecomputeModeOpt = "none", runtime: RuntimeOpt = None,
            step_context: PredictStepContextOpt = True, layers: LayersOpt = False, as_json: JsonOpt = False,
            foreign_profile: ForeignProfileOpt = False, out: PlanOutOpt = None, force: ForceOpt = False,
            tokens: TokensOpt = None, price: PriceOpt = None, from_: FromOpt = None,
            network_name: FromNetworkOpt = None) -> None:
    """Predict one training step under one strategy applied to every layer, or evaluate a plan file.

    Given a plan file (from `dnnplan plan --out`, possibly edited by hand) instead of a network,
    predicts that plan on the network, batch, devices, machine, precision and optimiser it names
    (for machine `local`, as `dnnplan execute` predicts it before its run: --step-context); a flag
    that would change what the file names is refused (plan again with it).

    Layers that cannot take the strategy fall back to data parallelism, and the output says which.
    The step is forward + backward + gradient synchronisation + update, each collective at the time
    it is not hidden under compute (--overlap; docs/costmodel.md). With --tensor T each layer takes
    its Megatron split over groups of T devices and the data split over the rest. With --pipeline S
    the layers are cut into S stages run as a pipeline of --micro-batches, --strategy or --tensor
    applying inside each stage; without it (or with --pipeline 1), --micro-batches M accumulates
    gradients: M micro-batches one after another, the activations of one held, the gradients
    reduced and the weights updated once a step.

    With --from FILE, predicts a framework's launch configuration instead: Megatron-LM's arguments
    as a launch script passes them, a torchtitan job TOML (.toml) or a DeepSpeed JSON (.json)
    (docs/export.md, "Importing a launch configuration"), on the network --network names (else the
    one the file names, or the zoo network of the model shape it states), the devices the file states
    (else --devices) and --machine; it prints the step, memory per device, MFU, what dominates and
    the options that do not change the prediction (--layers: the per-layer tables too). A Megatron-LM
    script on 16 H100s: dnnplan predict --from train_llama3_8b.sh --devices 16 --machine dgx-h100; a
    DeepSpeed JSON: dnnplan predict --from ds_config.json --network llama3-8b --devices 8 --machine dgx-h100.
    """
    budget = token_budget(tokens, price)
    if from_ is not None or network is None or network_name is not None:
        return predict_from(from_, network, network_name, devices, machine, profile, foreign_profile, as_json,
                            tokens, price, layers, choices.batch_norm if "batch_norm" in choices.given else None,
                            choices.framework if "framework" in choices.given else None)

    def train(net, batch: int, devices: int, step_s: float):  # the budget's time and cost at the step
        return None if budget is None else train_time(step_s, tokens_per_step(net, batch), devices, budget, price)

    if is_plan_file(network):
        _plan_holds(click, network)
        got = predicting.plan_step(network, profile, step_context, foreign_profile, choices)
        price = price_for(price, got.plan.machine)
        for line in (*(got.ahead.warnings if got.ahead else ()), *([got.lacks] if got.lacks else []),
                     *crossing_lines(got.prediction, got.machine, got.plan.devices, got.network)):
            warn(line)
        return render.plan_step(network, got, layers, as_json,
                                train(got.network, got.plan.batch, got.plan.devices, got.prediction.step_s))
    splits = LayerSplits(strategy, tensor, sequence_parallel, context_, expert)
    choices, flag = framework_of(choices, runtime)
    ctx = context.resolve(network, devices, batch, machine, profile, choices=choices.but(recompute=recompute,
                          schedule=schedule), foreign_ok=foreign_profile, network_defaults=True)
    assumed = assumed_flags(lambda name: click.get_parameter_source(name) != ParameterSource.DEFAULT, ctx)
    check_options(splits.megatron, strategy, out, force, ctx.framework.step, pipeline, micro_batches,
                  reads=(network, machine, profile, choices.framework), as_json=as_json)
    check_framework(ctx.framework.step, choices, flag, tensor, pipeline, sequence_parallel, strategy)
    check_splits(ctx.network, splits, ctx.batch, ctx.devices, pipeline, micro_batches,
                 click.get_parameter_source("micro_batches") != ParameterSource.DEFAULT)
    predicting.algorithms(ctx)  # an unknown recomputation or attention algorithm: one line, before any split
    price = price_for(price, ctx.machine.name)
    train(ctx.network, ctx.batch, ctx.devices, 0.0)  # a budget of tokens for a network of none: one line, now
    step_given = click.get_parameter_source("step_context") != ParameterSource.DEFAULT
    for line in [foreign_warning(foreign_profile, profile),
                 "--step-context applies to a plan file for machine `local` (predicted as `dnnplan execute` "
                 "predicts it); ignored" if step_given else None, *ctx.choices.idle(ctx.network),
                 *idle_layout(ctx.network, splits, pipeline, micro_batches, schedule, chunks),
                 context_warning(ctx.network, splits)]:
        if line is not None:
            warn(line)
    if ctx.framework.step == "zero3":
        step, fallbacks, micro = predicting.deepspeed_step(ctx, micro_batches)
        _lacks(ctx, profile)
        return render.deepspeed(ctx, step, fallbacks, micro, micro_batches, as_json,
                                train(ctx.network, ctx.batch, ctx.devices, step.step_s), assumed)
    if pipeline > 1 or (schedule != "1f1b" and micro_batches > 1):  # one 1F1B stage: accumulation
        got = predicting.pipelined(ctx, splits, pipeline, micro_batches, chunks)
        _lacks(ctx, profile)
        _crossings(ctx, got.prediction)
        return render.pipelined(got, as_json, train(ctx.network, ctx.batch, ctx.devices, got.prediction.step_s), ctx,
                                assumed, layers)
    got = predicting.step(ctx, splits, micro_batches)
    _lacks(ctx, profile)
    _crossings(ctx, got.prediction)
    if got.plain is not None and (line := render.recompute_warning(ctx.network, recompute, got.prediction,
                                                                    got.plain)) is not None:
        warn(line)
    render.step(ctx, got, layers, as_json, train(ctx.network, ctx.batch, ctx.devices, got.prediction.step_s), assumed)
    if out:
        made = predicting.as_plan(ctx, got.prediction, network, machine)
        write_plan(made, out, replace=force)
        if not as_json and not standard_stream(out):
            tables.console.print(wrote_line(made, out, ctx.machine.device.kind, ctx.devices))


def check_splits(net, splits: LayerSplits, batch: int, devices: int, pipeline: int, micro_batches: int,
                 micro_given: bool) -> None:
    """One line for a layout the flags give that no framework runs, before it is priced: more expert
    ranks than the model has experts, and --micro-batches leaving fewer samples in a micro-batch than
    data-parallel ranks (each layer would run whole on every rank)."""
    if splits.megatron:  # the degrees' own arithmetic, before any warning about the layout they give
        stage_ranks = devices // max(1, pipeline)
        if stage_ranks % splits.tensor == 0 and (stage_ranks // splits.tensor) % splits.context:
            raise DnnplanError(f"the context-parallel degree {splits.context} does not divide the "
                               f"{stage_ranks // splits.tensor} devices --tensor leaves",
                               hint="give --context a divisor of --devices / --tensor")
        sequence_split(net, splits)
    experts = [layer.p["experts"] for layer in net.layers if layer.op == "moe"]
    if splits.expert > 1 and experts and splits.expert > max(experts):
        raise DnnplanError(f"--expert {splits.expert} is more expert ranks than {net.name}'s {max(experts)} experts",
                           hint=f"give --expert a divisor of {max(experts)}")
    if not micro_given or splits.strategy != "data" and not splits.megatron or batch % max(1, micro_batches):
        return  # a batch the micro-batches do not divide: said by the pipeline's own check
    stage_ranks = devices // max(1, pipeline)
    data = stage_ranks // (splits.tensor * splits.context) if splits.megatron else stage_ranks
    samples = batch // max(1, micro_batches)
    if data > 1 and samples < data:
        most = max(1, batch // data)
        raise DnnplanError(f"--micro-batches {micro_batches} leaves micro-batches of {samples} sample"
                           f"{'' if samples == 1 else 's'} for {data} data-parallel ranks", hint=f"give at most "
                           f"--micro-batches {most}, a sample a rank each, or a larger --batch")


def sequence_split(net, splits: LayerSplits) -> None:
    """One line for sequence parallelism over a sequence the tensor group cannot split evenly: each
    rank's positions (the sequence over the context ranks) are cut over the tensor group, which
    Megatron-LM asserts divides them ("First dimension of the tensor should be divisible by tensor
    parallel size", megatron/core/tensor_parallel/mappings.py _split_along_first_dim at d98e8a6);
    priced anyway, its tensor-parallel layers would fall back to all-reduces and reshards."""
    if not splits.sequence_parallel or splits.tensor < 2 or not any(layer.op == "attention" for layer in net.layers):
        return
    seq, ways = sequence_length(net), splits.tensor * splits.context
    if seq % ways == 0:
        return
    of = f"--tensor {splits.tensor}" + (f" x --context {splits.context}" if splits.context > 1 else "")
    fit = -(-seq // ways) * ways
    raise DnnplanError(f"--sequence-parallel cuts the {seq} positions over {of} = {ways} ranks, which do not divide "
                       f"them (Megatron-LM asserts they do)", hint=f"give --seq a multiple of {ways} (e.g. --seq "
                       f"{fit}), or leave --sequence-parallel out")


def context_warning(net, splits: LayerSplits) -> str | None:
    """The line saying a context split of a causal sequence not in 2 x C equal chunks runs in dnnplan's
    executor (the straggler rank's ceil(S / C) positions priced) but not in Megatron-LM or torchtitan
    (`--seq-length should be a multiple of 2 * context-parallel-size`, megatron/training/arguments.py
    at d98e8a6; `dnnplan export` refuses it)."""
    attention = [layer for layer in net.layers if layer.op == "attention"]
    if splits.context < 2 or not attention or not attention[0].p.get("causal"):
        return None
    seq = sequence_length(net)
    if seq % (2 * splits.context) == 0:
        return None
    fit = -(-seq // (2 * splits.context)) * 2 * splits.context
    return (f"--context {splits.context} on {seq} positions: Megatron-LM and torchtitan split a causal sequence into "
            f"2 x {splits.context} equal chunks, so they need a multiple of {2 * splits.context} (e.g. --seq {fit}); "
            "priced as dnnplan's executor runs it, the last rank's chunks short")


def idle_layout(net, splits: LayerSplits, pipeline: int, micro_batches: int, schedule: str, chunks: int) -> list[str]:
    """The layout flags given that change nothing for ``net`` or beside the others, each in one line
    naming the flag and why (as :meth:`TrainingChoices.idle` says of the choices)."""
    piped = pipeline > 1 or micro_batches > 1
    out = []
    if splits.expert > 1 and not any(layer.op == "moe" for layer in net.layers):
        out.append(f"--expert {splits.expert} changes nothing: {net.name} has no mixture-of-experts layer")
    if splits.context > 1 and not any(layer.op == "attention" for layer in net.layers):
        out.append(f"--context {splits.context} splits {net.name}'s image height over {splits.context} devices (a "
                   "spatial split, the rows at each cut exchanged): it has no sequence")
    if splits.sequence_parallel and splits.tensor == 1:
        out.append("--sequence-parallel changes nothing without --tensor above 1 (it splits the tensor groups' "
                   "norms over the sequence)")
    if schedule != "1f1b" and not piped:
        out.append(f"--schedule {schedule} changes nothing without --pipeline or --micro-batches")
    elif chunks > 1 and not piped:
        out.append(f"--chunks {chunks} changes nothing without --pipeline and --schedule interleaved")
    return out


#: what a plan file names itself (its network's layout, batch, devices and machine), as predict's
#: parameters and their flags: given with a plan file, they would be ignored
PLAN_HOLDS = (("devices", "--devices"), ("batch", "--batch"), ("machine", "--machine"), ("strategy", "--strategy"),
              ("tensor", "--tensor"), ("sequence_parallel", "--sequence-parallel"), ("context_", "--context"),
              ("expert", "--expert"), ("pipeline", "--pipeline"), ("micro_batches", "--micro-batches"),
              ("schedule", "--schedule"), ("chunks", "--chunks"), ("recompute", "--recompute"), ("out", "--out"))


def _plan_holds(click: typer.Context, path: str) -> None:
    """One line for the flags given beside a plan file that the file itself decides."""
    given = [flag for name, flag in PLAN_HOLDS if click.get_parameter_source(name) != ParameterSource.DEFAULT]
    if given:
        raise DnnplanError(f"{', '.join(given)} given with a plan file, which names its own layout, batch, devices "
                           "and machine", file=path,
                           hint=f"leave {'them' if len(given) > 1 else 'it'} out, or plan again with "
                                f"{'them' if len(given) > 1 else 'it'} (`dnnplan plan NETWORK ... --out FILE`)")


def framework_of(choices: TrainingChoices, runtime: str | None) -> tuple[TrainingChoices, str]:
    """The choices with the framework ``--runtime`` (the earlier name of ``--framework``) names, and
    the flag that named it (one line for two that differ; the framework itself is read, and a bad
    one refused, with the context)."""
    if runtime is None:
        return choices, "--framework"
    if "framework" in choices.given and choices.framework != runtime:
        raise DnnplanError(f"--runtime {runtime} and --framework {choices.framework} name different frameworks",
                           hint="give --framework alone")
    return choices.but(framework=runtime, given=choices.given | {"framework"}), "--runtime"


def check_options(megatron: bool, strategy: str, out: str | None, force: bool, step: str, pipeline: int,
                  micro_batches: int, reads: tuple[str | None, ...] = (), as_json: bool = False) -> None:
    """Options that exclude each other (one line each); --out writes a plan without pipeline, of a
    framework whose step is its layers' (``step``: the framework's, costmodel.frameworks.framework),
    never over a file the command reads (``reads``), nor into standard output beside --json."""
    json_beside(as_json, out)
    if megatron and strategy != "data":
        raise DnnplanError("--tensor (--context, --expert) and --strategy both give the layers' splits",
                           hint="give one: --tensor T splits the batch over the devices it leaves")
    if not named("--out", out):
        check_outputs({"--out": out}, force, reads)  # --force alone: said to change nothing
        return
    if pipeline > 1 or micro_batches > 1 or step != "layers":
        given = [flag for flag, on in (("--pipeline", pipeline > 1), ("--micro-batches", micro_batches > 1),
                                       ("--framework", step != "layers")) if on]
        raise DnnplanError("--out writes a plan without pipeline or micro-batches, of a framework that runs "
                           "layer by layer", hint=f"drop {' and '.join(given)}, or plan it with `dnnplan plan "
                                                  "--pipeline S --micro-batches M --out FILE`")
    check_outputs({"--out": out}, force, reads)


def _crossings(ctx, prediction) -> None:
    """Warn of groups that lie across a link domain's edge (dnnplan.render.crossings)."""
    for line in crossing_lines(prediction, ctx.machine, ctx.devices, ctx.network):
        warn(line)


def _lacks(ctx, profile: str | None) -> None:
    """Warn where the table given (--profile) lacked kernels the prediction priced."""
    if (line := predicting.table_lacks(ctx.compute, profile)) is not None:
        warn(line)


def check_framework(step: str, choices: TrainingChoices, flag: str, tensor: int, pipeline: int,
                    sequence_parallel: bool, strategy: str) -> None:
    """One line for a framework the options cannot run under (``flag``: the flag that named it;
    ``step``: how the framework composes the step)."""
    if step == "zero3" and (choices.zero != 3 or tensor > 1 or pipeline > 1 or sequence_parallel
                                             or strategy != "data"):
        raise DnnplanError(f"{flag} {choices.framework} prices DeepSpeed's ZeRO-3 over every device, without model parallelism",
                           hint="give --zero 3, and no --tensor, --pipeline, --sequence-parallel or --strategy")
