"""Output of `dnnplan predict`: a step, a pipelined step, DeepSpeed's ZeRO-3 step or a plan file's
step, as tables for people (dnnplan.render.tables) or JSON for scripts; and why recomputation
bought nothing, when it did not."""

from __future__ import annotations

import json

from costmodel.calls.algorithms import CONV_ALGORITHMS, kernel_algorithm
from costmodel.step.breakdown import comm_parts, pipeline_terms, step_terms
from costmodel.step.pipeline import pipeline_json
from costmodel.step.prediction import prediction_json
from dnnplan.assumed import ASSUMED
from dnnplan.render import fmt, tables
from dnnplan.render.answer import memory_json, train_line
from dnnplan.render.plan import SMALL_NETWORK
from executor.session.predict import PlanStep, Predicted, mfu
from networks import durations
from networks.ir import Network
from profiler.context import Context


def step(ctx: Context, got: Predicted, layers: bool, as_json: bool, train=None, assumed: tuple[str, ...] = ()) -> None:
    """`dnnplan predict NET`'s answer: JSON, or the step by term, memory and MFU first; ``train``: a
    token budget's time and cost (costmodel.step.train_time.TrainTime); ``assumed``: the flags not
    given (dnnplan.assumed)."""
    pred = got.prediction
    limit = ctx.machine.device.mem_capacity_bytes
    if as_json:
        print(json.dumps({**prediction_json(pred), "step_breakdown_s": dict(step_terms(pred)),
                          "framework": ctx.choices.framework, "zero": ctx.choices.zero, **trained_as(ctx, assumed),
                          **memory_json(pred.memory_peak_bytes, limit),
                          "fallbacks": [f.__dict__ for f in got.fallbacks], "mfu": got.mfu, **_train(train)}))
        return
    tables.prediction_table(pred, got.fallbacks, got.mfu, layers or len(pred.layers) <= SMALL_NETWORK, limit)
    framework_line(ctx, pred)
    convolutions_line(pred)
    _train_line(train, memory_json(pred.memory_peak_bytes, limit)["memory_fits"])
    assumed_line(assumed)


def convolutions_line(pred) -> None:
    """Which algorithm the layout's convolutions are priced on: `predict` runs each on the default
    (:data:`costmodel.calls.layer_calls.DEFAULT_CONV_ALGORITHM`), where `dnnplan plan` and its
    baselines take each convolution's fastest, so a baseline of the same split can be faster."""
    used = sorted({kernel_algorithm(lp.layer.algorithm) for lp in pred.layers} & set(CONV_ALGORITHMS))
    if used:
        others = ", ".join(a for a in CONV_ALGORITHMS if a not in used)
        tables.console.print(f"convolutions priced as {', '.join(used)}; `dnnplan plan` and its baselines weigh "
                             f"each convolution's fastest algorithm ({others}), which can be faster (--layers "
                             "shows each layer's)", markup=False, emoji=False)


def trained_as(ctx: Context, assumed: tuple[str, ...]) -> dict:
    """The JSON's precision and optimiser, and the flags assumed (``assumed``, as `plan --json`'s sweep lists them)."""
    return {"precision": ctx.choices.precision, "fp8_params": ctx.choices.fp8_params,
            "grad_fp32": ctx.choices.grad_fp32, "optimizer": ctx.choices.optimizer, "assumed": list(assumed)}


def assumed_line(assumed: tuple[str, ...]) -> None:
    """The summary's last line: what was assumed because its flag was not given."""
    if assumed:
        tables.console.print(ASSUMED + "; ".join(assumed), markup=False, emoji=False, style="dim")


def framework_line(ctx: Context, pred) -> None:
    """The framework whose step is priced, and the layers its host holds back."""
    fw = ctx.framework
    if fw is None:
        return
    line = f"framework: {ctx.choices.framework} ({fw.about})"
    if pred.host_bound:
        names = ", ".join(pred.host_bound[:4]) + (", ..." if len(pred.host_bound) > 4 else "")
        line += f"; host-bound: {len(pred.host_bound)} of {len(pred.layers)} layers ({names})"
    tables.console.print(line, markup=False, emoji=False)


def stage_layers(pred) -> None:
    """Each stage's per-layer table (one micro-batch; ``--layers``) and the fullest stage's peak by
    part, as `plan --layers` prints a pipeline's."""
    one = len(pred.stages) == 1
    for stage in pred.stages:
        where = "" if one else f"stage {stage.index} ({fmt.many(stage.ranks, 'device')}), "
        tables.layer_table(stage.micro, f"{where}per layer, one micro-batch")
    if not one:
        fullest = max(pred.stages, key=lambda s: s.memory_peak_bytes)
        tables.console.print(f"{tables.memory_line(fullest.memory_parts)} (stage {fullest.index}, the peak's)",
                             markup=False, emoji=False)


def pipelined(got: Predicted, as_json: bool, train=None, ctx: Context | None = None,
              assumed: tuple[str, ...] = (), layers: bool = False) -> None:
    """`dnnplan predict NET --pipeline S`'s answer: JSON, or the stages' table (``layers``: each
    stage's layers and the fullest stage's memory by part before it) and the first fallback."""
    pred = got.prediction
    limit = ctx.machine.device.mem_capacity_bytes if ctx is not None else None
    memory = memory_json(pred.memory_peak_bytes, limit)
    if as_json:
        comm = dict(comm_parts(pred))
        print(json.dumps({**pipeline_json(pred), "step_breakdown_s": dict(pipeline_terms(pred)), "mfu": got.mfu,
                          "overlap": pred.stages[0].micro.overlap,
                          "comm_exposed_s": comm["exposed"], "comm_overlapped_s": comm["overlapped"],
                          **({"machine": ctx.machine.name, "framework": ctx.choices.framework,
                              "zero": ctx.choices.zero, **trained_as(ctx, assumed)} if ctx is not None else {}),
                          **memory, "fallbacks": [f.__dict__ for f in got.fallbacks], **_train(train)}))
        return
    if layers:
        stage_layers(pred)
    tables.pipeline_table(pred, limit, got.mfu, ctx.machine.name if ctx is not None else None)
    _train_line(train, memory["memory_fits"])
    assumed_line(assumed)
    if got.fallbacks:
        f = got.fallbacks[0]
        tables.console.print(f"{len(got.fallbacks)} layer(s) could not take their split and run {f.used} "
                             f"instead, first {f.layer} ({f.wanted}: {f.reason})")


def deepspeed(ctx: Context, step_: object, fallbacks, micro: int, micro_batches: int, as_json: bool,
              train=None, assumed: tuple[str, ...] = ()) -> None:
    """DeepSpeed's ZeRO-3 step (costmodel.frameworks.deepspeed.Zero3Step): JSON, or its terms in words,
    with whether its peak fits the device's memory and its model FLOP utilisation, as every step says."""
    limit = ctx.machine.device.mem_capacity_bytes
    fits = step_.memory_peak_bytes <= limit * (1 + 1e-9)
    utilisation = mfu(ctx, step_.step_s)
    out = {"runtime": "deepspeed", "framework": "deepspeed", "network": ctx.network.name, "devices": ctx.devices,
           "machine": ctx.machine.name, "batch": ctx.batch,
           "micro_batches": micro_batches, "step_s": step_.step_s, "per_micro_s": step_.per_micro_s,
           "fwd_compute_s": step_.fwd_compute_s, "bwd_compute_s": step_.bwd_compute_s,
           "gather_s": step_.gather_s, "gathers_in_backward": step_.gathers_in_backward,
           "reduce_scatter_s": step_.reduce_scatter_s, "update_s": step_.update_s,
           "exposed_comm_s": step_.exposed_comm_s, "step_breakdown_s": dict(step_.terms()),
           "comm_exposed_s": step_.comm_exposed_s, "comm_overlapped_s": step_.comm_overlapped_s,
           "memory_peak_bytes": step_.memory_peak_bytes,
           "memory_limit_bytes": limit, "memory_fits": fits, "fits": fits, "mfu": utilisation,
           **trained_as(ctx, assumed), "fallbacks": [f.__dict__ for f in fallbacks], **_train(train)}
    if as_json:
        print(json.dumps(out))
        return
    c = tables.console
    s = fmt.seconds
    c.print(f"{ctx.network.name}: batch {ctx.batch} on {ctx.devices} x {ctx.machine.name}, DeepSpeed ZeRO-3, "
            f"{micro_batches} micro-batch{'es' if micro_batches > 1 else ''} of {micro}")
    c.print(f"step {s(step_.step_s)} = {micro_batches} x (max(forward {s(step_.fwd_compute_s)}, gathers "
            f"{s(step_.gather_s)}) + max(backward {s(step_.bwd_compute_s)}, {step_.gathers_in_backward} x "
            f"gathers) + reduce-scatters {s(step_.reduce_scatter_s)}) + update {s(step_.update_s)}")
    over = "" if fits else f" (over the limit of {fmt.nbytes(limit)}: it does not fit)"
    exposed, hidden = step_.comm_exposed_s, step_.comm_overlapped_s
    c.print(f"communication {s(exposed + hidden)}: {s(exposed)} exposed (in the terms above), {s(hidden)} "
            f"overlapped with compute; peak memory {fmt.nbytes(step_.memory_peak_bytes)} a device{over};  model "
            f"FLOP utilisation {utilisation:.1%} (docs/costmodel.md, DeepSpeed ZeRO-3)")
    if fallbacks:
        c.print(f"{len(fallbacks)} layer(s) could not split the micro-batch over every device and run "
                f"data parallel on fewer, first {fallbacks[0].layer}")
    _train_line(train, fits)
    assumed_line(assumed)


def plan_step(path: str, got: PlanStep, layers: bool, as_json: bool, train=None) -> None:
    """`dnnplan predict plan.yaml`'s answer: JSON, or the step's table and how it compares with the
    step the plan file recorded."""
    plan, pred, ahead = got.plan, got.prediction, got.ahead
    limit = plan.solver.get("memory_limit_bytes")
    memory = memory_json(pred.memory_peak_bytes, limit)
    if plan.pipeline is not None and ahead is None:
        if as_json:
            comm = dict(comm_parts(pred))  # as the flags' pipeline names them
            print(json.dumps({**pipeline_json(pred), "step_breakdown_s": dict(pipeline_terms(pred)),
                              "overlap": pred.stages[0].micro.overlap,
                              "comm_exposed_s": comm["exposed"], "comm_overlapped_s": comm["overlapped"],
                              "plan": {"file": path, "recorded_step_s": plan.step_s},
                              "machine": plan.machine, "mfu": got.mfu, "precision": plan.choices.precision,
                              "optimizer": plan.choices.optimizer, "zero": plan.choices.zero, **memory,
                              **_train(train)}))
            return
        if layers:
            stage_layers(pred)
        tables.pipeline_table(pred, limit, got.mfu, plan.machine)
        recorded_line(plan.step_s, pred.step_s)
        _train_line(train, memory["memory_fits"])
        return
    alone = ahead.profile_step_s if ahead else None
    if as_json:
        out = prediction_json(pred)
        out["step_breakdown_s"] = dict(step_terms(pred))  # as `plan --json` and `predict --from --json` name them
        out["mfu"] = got.mfu
        out["plan"] = {"file": path, "recorded_step_s": plan.step_s}
        out["as_execute_predicts"] = ahead is not None
        out["profile_predicted_step_s"] = alone
        out["precision"], out["optimizer"], out["zero"] = plan.choices.precision, plan.choices.optimizer, \
            plan.choices.zero
        print(json.dumps({**out, **memory, **_train(train)}))
        return
    tables.prediction_table(pred, (), got.mfu, layers or len(pred.layers) <= SMALL_NETWORK, limit)
    _train_line(train, memory["memory_fits"])
    if ahead is None:
        recorded_line(plan.step_s, pred.step_s)
        return
    tables.ahead_of_time_line(pred, alone)
    if plan.step_s:
        tables.console.print(f"the plan file recorded {durations.seconds(plan.step_s, 6)}, the planner's price: the profile's "
                             "kernels timed alone, no wait for other ranks")


def _train(train) -> dict:
    """The JSON of a token budget's time and cost, when one was asked for."""
    return {} if train is None else {"train": train.json()}


def _train_line(train, fits: bool = True) -> None:
    if train is not None:
        tables.console.print(train_line(train, fits))


def recorded_line(recorded_s: float, now_s: float) -> None:
    """Where a plan file's recorded step differs from what it predicts as written now."""
    if recorded_s and abs(recorded_s - now_s) > 1e-9 * recorded_s:
        tables.console.print(f"the plan file recorded {durations.seconds(recorded_s, 6)}; as written it predicts "
                             f"{durations.seconds(now_s, 6)} ({now_s / recorded_s:.4f}x)")


def recompute_warning(net: Network, mode: str, pred, plain) -> str | None:
    """Why ``--recompute MODE`` buys nothing here (None when it lowers the peak memory)."""
    if pred.memory_peak_bytes < plain.memory_peak_bytes:
        return None
    if mode == "selective" and not any(layer.op == "attention" for layer in net.layers):
        return f"--recompute selective reruns attention only, and {net.name} has none: nothing is recomputed"
    return (f"--recompute {mode} saves no memory for {net.name}: the peak rises from "
            f"{fmt.nbytes(plain.memory_peak_bytes)} to {fmt.nbytes(pred.memory_peak_bytes)} a device and the step from "
            f"{fmt.seconds(plain.step_s)} to {fmt.seconds(pred.step_s)} (convolutions are not recomputed, so the "
            "inputs they keep stay, and a block's recomputation holds its activations again while its backward "
            "runs); leave it out")
