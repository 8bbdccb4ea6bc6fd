"""`dnnplan predict --from FILE` as a library call: a framework's launch configuration, read by
planner.launch_import, predicted as the plan it runs (:func:`launch_step`).

The configuration becomes a plan (planner.launch_import.to_plan) on the network the file or
``--network`` names (or the zoo network of the shape the file states), and the plan is priced by
:func:`executor.session.predict.predict_plan`, as `dnnplan predict PLAN.yaml` prices a plan file:
a plan exported (`dnnplan export`) and read back predicts the same step and memory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from costmodel.choices.precision import get_precision
from costmodel.machine.loading import DEFAULT_MACHINE, load_machine
from costmodel.machine.model import Machine
from costmodel.step.pipeline import PipelinePrediction
from costmodel.step.prediction import StepPrediction, model_flops_utilization
from executor.session.predict import predict_plan
from networks.errors import DnnplanError
from networks.ir import Network
from networks.loader import load_network
from planner.export.megatron_model import gpt_shape
from planner.export.exported_header import WHERE, same_step
from planner.launch_import.deepspeed import with_world_size
from planner.launch_import.launch_config import LaunchConfig
from planner.launch_import.trained_network import check_biases, check_shape, network_ref, shape_difference
from planner.launch_import.to_plan import launch_plan
from planner.plan.plan import Plan
from planner.plan.plan_file import read_plan
from profiler import context


@dataclass(frozen=True)
class LaunchStep:
    """A launch configuration's prediction: the configuration, the network it trains (``named_by``:
    how it was found, in words), the plan it runs and its step."""

    config: LaunchConfig
    network_ref: str
    named_by: str
    network: Network
    plan: Plan
    machine: Machine  # the plan's machine, as its step is priced on it
    prediction: StepPrediction | PipelinePrediction
    mfu: float
    memory_limit_bytes: float
    #: where the machine came from, in words: "--machine", the file's dnnplan line, or assumed
    machine_from: str = "--machine"
    #: the step the file's dnnplan line states where it is not this prediction's (to its four
    #: digits): the plan was priced from something not given here (a profile, a framework file)
    written_step_s: float | None = None


def launch_step(config: LaunchConfig, network: str | None, devices: int | None, machine: str | None,
                profile: str | None = None, foreign_ok: bool = False) -> LaunchStep:
    """``config`` predicted on ``network`` (``--network``; None: the file's, or the zoo network of the
    shape it states), ``devices`` (``--devices``; None: the launcher's) and ``machine``; one line
    naming the file for a world size given twice differently or not at all, or a network that does
    not match the file."""
    exported, unread = (None, None) if network or config.network else exported_from(config)
    if exported:  # the flavor the file names, which dnnplan does not ship, is the plan's network's
        config = replace(config, ignored=tuple(i for i in config.ignored if i.option != "[model] flavor"))
    try:
        ref = network_ref(config, network or (exported[0] if exported else None))
    except DnnplanError:
        if unread is not None:  # the plan the file names is there and does not read back: why is said
            raise unread from None
        raise
    named_by = ("--network" if network else "the file" if config.network
                else f"the plan the file was exported from, {exported[1]}" if exported
                else "the zoo network of the shape the file states")
    header = config.written_for  # a file dnnplan exported: the devices, machine and framework it was planned for
    if header is not None and devices is None and config.devices is None:
        config = replace(config, devices=header.devices, devices_from=WHERE)
    machine_from = "--machine" if machine else WHERE if header is not None else \
        f"assumed, --machine not given: {DEFAULT_MACHINE}"
    machine = machine or (header.machine if header is not None else None)
    count = world_size(config, devices)
    if config.framework == "deepspeed":
        config = with_world_size(config, count)
    choices = config.choices
    if header is not None and header.framework and "framework" not in choices.given:
        choices = choices.but(framework=header.framework)
    own_seq = _own_seq(ref)
    if choices.seq is not None and own_seq is None:  # a CNN named by the file or --network
        raise DnnplanError(f"{ref} (named by {named_by}) is not a transformer, and the file trains one at "
                           f"{choices.seq} tokens a sequence", file=config.path,
                           hint="give --network the transformer the file trains, or fix the file's model")
    if choices.seq is not None and own_seq == choices.seq:
        choices = choices.but(seq=None)  # the network's own sequence: loaded as a plan of it loads it
    config = replace(config, choices=choices)
    ctx = context.resolve(ref, count, None, machine, profile, choices=choices, foreign_ok=foreign_ok)
    check_shape(config, ctx.network)
    check_biases(config, ctx.network)
    plan = launch_plan(config, ctx.network, ref, count, ctx.machine, machine or DEFAULT_MACHINE)
    pred = predict_plan(plan, ctx.network, ctx)
    mfu = model_flops_utilization(ctx.network, plan.batch, pred.step_s, count, load_machine(plan.machine),
                                  get_precision(choices.precision).matmul)
    written = header.step_s if header is not None and header.step_s is not None \
        and not same_step(pred.step_s, header.step_s) else None
    return LaunchStep(config, ref, named_by, ctx.network, plan, ctx.machine, pred, mfu,
                      ctx.machine.device.mem_capacity_bytes,
                      machine_from, written)


def exported_from(config: LaunchConfig) -> tuple[tuple[str, str] | None, DnnplanError | None]:
    """The network of the plan a file dnnplan exported was made from, and that plan's path, where the
    file's second line names it (planner.export.exported_header), the plan is found from the file's
    folder or the working folder, reads back, and its network is the one the line names and has the
    shape the file states, or the name of the model it names where it states no shape (torchtitan's
    flavor: a file edited since trains another); else None, with the error of a plan found that did
    not read back (its network edited or gone), if any."""
    header = config.written_for
    if header is None or header.origin is None or (config.shape is None and config.unshipped_model is None):
        return None, None
    unread = None
    for plan_path, name in header.origins():
        here = os.path.join(os.path.dirname(config.path), plan_path)
        for path in dict.fromkeys((here, plan_path)):
            if not os.path.isfile(path):
                continue
            try:
                plan, net = read_plan(path)
            except DnnplanError as err:  # edited or its network gone: said where nothing else is found
                unread = unread or err
                continue
            same = (config.unshipped_model == net.name if config.shape is None
                    else shape_difference(config.shape, net) is None)
            if net.name == name and same:
                return (plan.network, path), None
    return None, unread


def world_size(config: LaunchConfig, devices: int | None) -> int:
    """The devices: ``--devices`` or the launcher's (one line when they differ, or neither says)."""
    if devices is not None and config.devices is not None and devices != config.devices:
        raise DnnplanError(f"--devices {devices}, and {config.devices} from {config.devices_from}", file=config.path,
                           hint="leave --devices out, or make them agree")
    if devices is None and config.devices is None:
        raise DnnplanError(f"the world size is not stated: {config.devices_from}", file=config.path,
                           hint="give --devices N")
    return devices if devices is not None else config.devices


def _own_seq(ref: str) -> int | None:
    """The tokens a sequence of the network as it ships (None: not a transformer)."""
    net = load_network(ref)
    return gpt_shape(net).seq_length if any(layer.op == "attention" for layer in net.layers) else None
