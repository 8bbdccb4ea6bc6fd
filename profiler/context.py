"""What a command works on: the network, the machine, the batch and where kernel times come from.

The compute model is chosen here, once for every command: a profile table when one is given or
the machine names one; for the ``local`` machine this computer's per-user cache, profiled on
demand (:mod:`profiler.ondemand`); else the datasheet roofline (:class:`costmodel.compute.roofline.Roofline`).
A table that holds collectives fitted by `dnnplan profile-comm` also gives the machine its links.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.compute.model import ComputeModel
from costmodel.compute.roofline import Roofline
from costmodel.machine.loading import DEFAULT_MACHINE, load_machine, shipped_machine_names
from costmodel.choices.moe_dispatch import check_machine_dispatch
from costmodel.machine.model import Machine
from costmodel.choices.precision import DEFAULT_PRECISION, get_precision
from costmodel.choices.training import TrainingChoices
from costmodel.compute.profile_links import links_from_table
from costmodel.compute.profile_table import table_precision
from costmodel.compute.profiled import ProfiledCompute
from costmodel.frameworks.framework import Framework
from costmodel.frameworks.kernels import framework_kernels
from costmodel.frameworks.loading import load_framework
from networks.errors import DnnplanError
from networks.ir import Network
from networks.default_batch import default_batch as family_batch, SAMPLES_PER_DEVICE
from networks.loader import load_network
from profiler.tables.compatibility import check_gpu, check_precision
from profiler.tables.store import load_table


@dataclass(frozen=True)
class Context:
    network: Network  # as the choices train it (costmodel.choices.training.TrainingChoices.marked)
    machine: Machine
    batch: int
    devices: int
    compute: ComputeModel
    choices: TrainingChoices = TrainingChoices()
    #: how the batch was chosen when none was given (networks.default_batch), "" when it was given
    batch_rule: str = ""
    #: the framework whose step is priced (``choices.framework`` loaded; ``compute`` prices its kernels)
    framework: Framework | None = None


def default_batch(devices: int, net: Network | None = None) -> int:
    """The batch when none is given (networks.default_batch): for a language model about 4M tokens
    (at most 16 sequences a device), else 32 samples a device."""
    if net is None:
        return SAMPLES_PER_DEVICE * devices
    return family_batch(net, devices)[0]


def resolve(network: str, devices: int, batch: int | None, machine: str | None,
            profile: str | None = None, refresh: bool = False, choices: TrainingChoices = TrainingChoices(),
            foreign_ok: bool = False, network_defaults: bool = False) -> Context:
    """Load the network (at the choices' ``seq`` tokens a sequence when given, stored and marked as
    the choices train it; with ``network_defaults``, the choices not given defaulting as the
    network's kind has them, TrainingChoices.for_network, and the precision a profile table was
    timed in: what `plan` and `predict` assume) and the
    machine named on the command line, and choose the compute model."""
    if devices < 1:
        raise DnnplanError(f"--devices must be a positive integer, got {devices}")
    if batch is not None and batch < 1:
        raise DnnplanError(f"--batch must be a positive integer, got {batch}")
    loaded = load_network(network, choices.seq)
    try:  # the flags name them: no field of a file (a machine file's own mistake keeps its file)
        mach = load_machine(machine or DEFAULT_MACHINE)
        check_machine_dispatch(choices.moe_dispatch, mach.device.kind, mach.name)
        mach.check_devices(devices)
    except DnnplanError as err:
        if err.file is not None:
            raise
        raise DnnplanError(err.bare, layer=err.layer, hint=err.hint) from None
    if network_defaults:
        if profile and "precision" not in choices.given:  # a profile table prices its own precision
            choices = choices.but(precision=table_precision(load_table(profile).fingerprint))
        datasheet = mach.device.kind == "gpu" and not (profile or mach.profile)
        choices = choices.for_network(loaded, mach.device.peak_flops if datasheet else None)
    net = choices.marked(loaded)
    framework = load_framework(choices.framework)
    compute = compute_model(mach, profile, devices, refresh, choices.precision, foreign_ok)
    rule = "" if batch else family_batch(net, devices)[1]
    return Context(net, profiled_links(mach, compute), batch or default_batch(devices, net), devices,
                   framework_kernels(compute, framework, mach), choices, rule, framework)


def compute_model(machine: Machine, profile: str | None = None, devices: int = 1,
                  refresh: bool = False, precision: str = DEFAULT_PRECISION, foreign_ok: bool = False) -> ComputeModel:
    """The profile table when one is given or the machine names one (timed in ``precision``, on
    the machine's GPU model unless ``foreign_ok``: profiler.tables.compatibility); for the ``local`` machine
    the per-user cache of this computer for ``devices`` ranks sharing it, profiled on demand (every
    call it is asked for timed again with ``refresh``); else the datasheet roofline. Without a
    table, a precision other than fp32 is priced from the datasheet (the CPU profiles fp32)."""
    path = profile or machine.profile
    if path:
        table = load_table(path)
        check_precision(table, precision)
        foreign = check_gpu(table, machine.device.name, foreign_ok, f"while machine '{machine.name}' has "
                            f"{machine.device.name}")
        compute = ProfiledCompute(table, _fallback(machine, precision))
        if foreign:
            compute.name += f" ({foreign})"
        return compute
    if precision != DEFAULT_PRECISION:
        return _datasheet_for(machine, path, precision)
    if machine.name == "local":
        # the on-demand profiler brings the kernels and their timing harness, which planning for any
        # other machine never runs
        from profiler.ondemand import local_compute_model  # noqa: PLC0415 - deferred: machine `local` only

        return local_compute_model(machine, threads=1, concurrency=min(devices, machine.devices_per_node),
                                   refresh=refresh)
    return Roofline(machine)


def _fallback(machine: Machine, precision: str) -> Roofline:
    """The roofline a table's misses fall back to, in the precision when the datasheet has it."""
    prec = get_precision(precision)
    if prec.matmul in machine.device.peak_flops:
        return Roofline(machine, tf32=prec.matmul == "tf32")
    return Roofline(machine)


def _datasheet_for(machine: Machine, profile: str | None, precision: str) -> Roofline:
    """The roofline for ``precision``, when the machine's datasheet has the peak it needs."""
    prec = get_precision(precision)
    if profile or machine.name == "local":
        raise DnnplanError(f"--precision {prec.name} is priced from a GPU datasheet, but machine "
                           f"'{machine.name}' is priced from float32 kernel profiles",
                           hint="name a datasheet machine (--machine dgx-a100, dgx-h100, dgx1-v100, summit), "
                                "or plan in fp32")
    if prec.matmul not in machine.device.peak_flops:
        shipped = machine.name in shipped_machine_names()
        having = [name for name in shipped_machine_names() if name != machine.name
                  and prec.matmul in load_machine(name).device.peak_flops]
        raise DnnplanError(f"machine '{machine.name}' ({machine.device.name}) has no {prec.matmul} peak, "
                           f"so it cannot train in {prec.name}", file=machine.source,
                           field=f"device.peak_tflops.{prec.matmul}",
                           hint=("" if shipped else "add the datasheet figure there, or ")
                           + f"name a machine whose GPU has it (--machine {', '.join(having)})"
                           + ", or another precision")
    return Roofline(machine, tf32=prec.matmul == "tf32")


def profiled_links(machine: Machine, compute: ComputeModel) -> Machine:
    """The machine with the links fitted by `dnnplan profile-comm` when the compute model's table has them."""
    if compute.table is None:
        return machine
    return links_from_table(machine, compute.table)
