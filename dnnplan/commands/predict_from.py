"""`dnnplan predict --from FILE`: a framework's launch configuration predicted. Parse, one library
call (executor.session.predict_launch), render (dnnplan.render.predict_launch)."""

from __future__ import annotations

import dataclasses

from typer._click.core import ParameterSource  # typer >= 0.29 (pyproject) carries its own click
from typer._click.globals import get_current_context

from costmodel.step.train_time import tokens_per_step, train_time
from dnnplan.flag_values import price_for
from dnnplan.options import token_budget
from dnnplan.render import predict_launch as render
from dnnplan.render.crossings import crossing_lines
from dnnplan.render.terminal.messages import warn
from executor.session.predict_launch import launch_step
from networks.errors import DnnplanError, short
from networks.reading import read_text
from planner.launch_import.formats import read_launch

#: the parameters of `dnnplan predict` that go with --from (the file states the rest)
WITH_FROM = ("from_", "network", "network_name", "devices", "machine", "profile", "foreign_profile", "as_json",
             "tokens", "price", "layers", "batch_norm", "framework")


def predict_from(path: str | None, network: str | None, network_name: str | None, devices: int,
                 machine: str | None, profile: str | None, foreign_profile: bool, as_json: bool,
                 tokens: str | None, price: float | None, layers: bool = False, batch_norm: str | None = None,
                 framework: str | None = None) -> None:
    """Read the launch configuration at ``path`` and print its prediction (one line for a flag that
    the file states instead, or a network given as the positional argument); ``batch_norm``, how the
    network's batch normalisation takes its statistics, which no launch file states (the script's
    nn.BatchNorm2d or SyncBatchNorm), where given; ``framework``, the framework whose step is priced
    where the file names none (a dnnplan line names the one it was planned under)."""
    if path is None:
        raise DnnplanError("--network goes with --from FILE" if network_name else "give a network or a plan file",
                           hint="dnnplan predict NETWORK ..., or dnnplan predict --from launch.sh [--network NET]")
    if network is not None:
        raise DnnplanError(f"{short(network)} and --from: with --from the network is --network's",
                           hint=f"write --network {short(network)}")
    given = _given()
    if "runtime" in given:
        raise DnnplanError(f"{given['runtime']} with --from: name the framework with --framework", file=path,
                           hint="write --framework F")
    if "out" in given:
        raise DnnplanError("--out with --from: predict --from writes no plan", file=path,
                           hint="plan the network with `dnnplan plan NETWORK ... --out PLAN.yaml`, or predict the "
                                "layout's flags with `dnnplan predict NETWORK ... --out PLAN.yaml`")
    if "step_context" in given:
        raise DnnplanError(f"{given['step_context']} with --from: it prices a plan file as `dnnplan execute` runs it "
                           "on this machine", file=path, hint="leave it out: a launch file is priced on --machine")
    others = [flag for name, flag in given.items() if name not in WITH_FROM]
    if others:
        raise DnnplanError(f"{others[0]} with --from: the file states it", file=path,
                           hint="edit the file, or predict without --from")
    budget = token_budget(tokens, price)
    config = read_launch(read_text(path, "launch configuration"), path)
    header = config.written_for
    if framework is not None and header is not None and header.framework and header.framework != framework:
        raise DnnplanError(f"--framework {framework} with --from: the file's dnnplan line prices it under "
                           f"{header.framework}", file=path,
                           hint="leave --framework out, or edit the file's dnnplan line")
    # what no launch file states, as given: the choices the file's are priced with, each said where idle
    named = {k: v for k, v in (("batch_norm", batch_norm), ("framework", framework)) if v is not None}
    choices = config.choices.but(**named, given=config.choices.given | set(named))
    config = dataclasses.replace(config, choices=choices)
    got = launch_step(config, network_name, devices if "devices" in given else None, machine, profile,
                      foreign_profile)
    for line in (*choices.idle(got.network), *crossing_lines(got.prediction, got.machine, got.plan.devices,
                                                             got.network)):
        warn(line)
    price = price_for(price, got.plan.machine)
    train = None if budget is None else train_time(got.prediction.step_s, tokens_per_step(got.network, got.plan.batch),
                                                   got.plan.devices, budget, price)
    render.launch(got, as_json, train, layers)


def _given() -> dict[str, str]:
    """The command's parameters the user gave, each with the flag that gives it."""
    click = get_current_context(silent=True)
    if click is None:
        return {}
    return {p.name: (p.opts[0] if p.opts else p.name) for p in click.command.params
            if click.get_parameter_source(p.name) not in (ParameterSource.DEFAULT, None)}
