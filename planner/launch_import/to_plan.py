"""A launch configuration as the plan it runs (pure): :func:`launch_plan`.

The plan is what `dnnplan predict PLAN.yaml` prices (executor.session.predict.predict_plan): every
layer's strategy is Megatron-Core's under the configuration's tensor, context and expert degrees
over one pipeline stage's ranks at one micro-batch
(:func:`costmodel.frameworks.megatron.megatron_strategies`, what :mod:`planner.export.megatron_layout`
checks a plan against before it exports it), the stages cut between whole transformer layers as
the configuration cuts them, recomputation and the attention kernel as the layers' algorithms
(:mod:`costmodel.calls.algorithms`). A plan exported and read back is therefore the plan itself.
A DeepSpeed file of a network without transformer layers (a CNN) is data parallelism on every
layer instead (:func:`_data_parallel`): DeepSpeed's JSON sets data parallelism and ZeRO alone.
"""

from __future__ import annotations

from costmodel.calls.algorithms import attention_default, default_algorithms, with_recompute
from costmodel.frameworks.megatron import megatron_strategies
from costmodel.frameworks.uniform import data_strategy
from costmodel.machine.model import Machine
from networks.analysis import block_of
from networks.errors import DnnplanError
from networks.ir import Network
from planner.export.megatron_layout import MEGATRON, blocks_of, check_sequence, gpt_layers
from planner.export.torchtitan import TORCHTITAN, check_fp8_experts
from planner.launch_import.launch_config import LaunchConfig
from planner.plan.plan import LayerPlan, PipelineSpec, Plan


def launch_plan(config: LaunchConfig, net: Network, network_ref: str, devices: int, machine: Machine,
                machine_ref: str | None = None) -> Plan:
    """``config`` run on ``devices`` devices of ``machine`` as a plan of ``net`` (the network the
    configuration trains, stored and marked as its choices train it; ``network_ref`` its zoo name or
    path; ``machine_ref``, the machine as named, a shipped name or a machine YAML's path, which the
    plan keeps: None, its name); one line naming the file for a layout that does not fit the
    devices, batch or network."""
    try:
        return _plan(config, net, network_ref, devices, machine, machine_ref or machine.name)
    except DnnplanError as err:
        raise err.located(file=config.path) from None


#: the setting of no experts' split, by the reader's format
EXPERT_OPTION = {"megatron": "--expert-model-parallel-size 1", "torchtitan": "expert_parallel_degree = 1 in [parallelism]"}


def _plan(config: LaunchConfig, net: Network, network_ref: str, devices: int, machine: Machine,
          machine_ref: str) -> Plan:
    if config.framework == "deepspeed" and not any(layer.op == "attention" for layer in net.layers):
        return _data_parallel(config, net, network_ref, devices, machine_ref)
    gpt_layers(net)  # a network Megatron-Core's layout cannot hold: one line naming its layer
    if config.expert > 1 and not any(layer.op == "moe" for layer in net.layers):
        raise DnnplanError(f"the file splits experts {config.expert} ways, and {net.name} has no mixture of experts",
                           hint=f"set {EXPERT_OPTION.get(config.framework, 'the expert degree to 1')}, or give the "
                                "network with experts the file trains")
    if config.framework == "torchtitan":  # its float8 converter leaves the experts in bf16
        check_fp8_experts(net, config.choices.precision)
    # a sequence the framework cannot split under the file's degrees, as exporting refuses it
    try:
        check_sequence(net, TORCHTITAN if config.framework == "torchtitan" else MEGATRON, config.tensor,
                       config.context, config.sequence_parallel)
    except DnnplanError as err:
        raise DnnplanError(err.bare, layer=err.layer, hint="give the file tensor and context sizes that split the "
                                                           "sequence so, or a sequence length they divide") from None
    if devices % config.stages:
        raise DnnplanError(f"{config.stages} pipeline stages do not divide {devices} devices",
                           hint="give a device count (--devices, or the launcher's) that the stages divide")
    ranks = devices // config.stages
    if ranks % (config.tensor * config.context):
        raise DnnplanError(f"tensor {config.tensor} x context {config.context} does not divide the {ranks} "
                           "devices of a pipeline stage", hint="give a device count the model-parallel sizes divide")
    data = ranks // (config.tensor * config.context)
    micro = config.micro_batch * data
    batch, micro_batches = global_batch(config, data)
    check_expert_tensor(config, data)
    strategies, fallbacks = megatron_strategies(net, ranks, micro, config.tensor, config.sequence_parallel,
                                                context=config.context, expert=config.expert)
    if fallbacks:
        f = fallbacks[0]
        raise DnnplanError(f"cannot split {f.wanted} ({f.reason})", layer=f.layer,
                           hint="give tensor, context and expert sizes that divide the layer")
    if config.chunks > 1 and micro_batches % config.stages:
        raise DnnplanError(f"the global batch {batch} gives {micro_batches} micro-batches of {config.micro_batch} on "
                           f"each of {data} data-parallel ranks, and the interleaved schedule runs them in groups of "
                           f"the {config.stages} pipeline stages", hint=f"give a global batch of {micro} x a multiple "
                                                                      f"of {config.stages}, e.g. {micro * config.stages}")
    chunks = chunk_blocks(config, net)
    algorithms = layer_algorithms(config, net, chunks, machine)
    pipeline = None
    if config.stages > 1 or micro_batches > 1:
        pipeline = PipelineSpec(config.stages, micro_batches, config.schedule, first_layers(net, chunks),
                                config.chunks)
    layers = tuple(LayerPlan(layer.name, strategies[layer.name], algorithms.get(layer.name, ""))
                   for layer in net.layers)
    return Plan(network=network_ref, network_name=net.name, network_hash=net.content_hash(), batch=batch,
                devices=devices, machine=machine_ref, layers=layers, solver={"name": f"{config.framework} import"},
                choices=config.choices, pipeline=pipeline)


def _data_parallel(config: LaunchConfig, net: Network, network_ref: str, devices: int, machine_ref: str) -> Plan:
    """A DeepSpeed file that trains a network without transformer layers (a CNN): data parallelism on
    every layer over every device (:func:`costmodel.frameworks.uniform.data_strategy`, as
    :mod:`planner.export.nearest` writes such a plan), the batch in the file's micro-batches, no
    recomputation (DeepSpeed's activation checkpointing is the script's, of transformer layers)."""
    if config.recompute != "none":
        raise DnnplanError(f"the file recomputes ({config.recompute}), and {net.name} has no transformer layers "
                           "to recompute", hint="leave activation_checkpointing out of the file")
    micro = config.micro_batch * devices
    batch, micro_batches = global_batch(config, devices)
    pipeline = PipelineSpec(1, micro_batches, config.schedule, (net.layers[0].name,), 1) if micro_batches > 1 else None
    algorithms = default_algorithms(net)
    layers = tuple(LayerPlan(layer.name, data_strategy(layer, devices, micro), algorithms.get(layer.name, ""))
                   for layer in net.layers)
    return Plan(network=network_ref, network_name=net.name, network_hash=net.content_hash(), batch=batch,
                devices=devices, machine=machine_ref, layers=layers, solver={"name": f"{config.framework} import"},
                choices=config.choices, pipeline=pipeline)


def global_batch(config: LaunchConfig, data: int) -> tuple[int, int]:
    """The global batch (the file's, else its accumulation's micro-batches, one on each of ``data``
    data-parallel ranks, or one) and its micro-batches; one line where the batch is not a multiple of them."""
    micro = config.micro_batch * data
    batch = config.batch or micro * (config.accumulation or 1)
    if batch % micro:
        raise DnnplanError(f"the global batch {batch} is not a multiple of micro-batch {config.micro_batch} "
                           f"x {data} data-parallel ranks", hint="give a global batch that is")
    return batch, batch // micro


def check_expert_tensor(config: LaunchConfig, data: int) -> None:
    """The experts' tensor-parallel size the file states against the layout's: the experts split over
    data x tensor ranks (MoE parallel folding, expert tensor size 1) when the expert size exceeds the
    ``data`` ranks, else the experts split as the tensor size (Megatron-Core's default)."""
    stated, tensor = config.expert_tensor, config.tensor
    if stated is None or tensor == 1:
        return
    folded = config.expert > data
    if stated != (1 if folded else tensor):
        raise DnnplanError(f"expert tensor-parallel size {stated} with expert size {config.expert} over {data} "
                           f"data-parallel ranks and tensor size {tensor}: dnnplan prices the experts split "
                           + ("over data x tensor ranks (expert tensor size 1)" if folded
                              else f"as the tensor size ({tensor})"),
                           hint="give the expert tensor-parallel size 1 with an expert size of data x tensor, "
                                "else leave it out")


def chunk_blocks(config: LaunchConfig, net: Network) -> tuple[tuple[str, ...], ...]:
    """The transformer layers (blocks) of each of the configuration's ``stages x chunks`` chunks,
    in layer order: as it lists them, or as even as they split (one line when they do not split
    evenly or the lists do not add up to the network's)."""
    blocks = blocks_of(net.layers)
    n = config.stages * config.chunks
    counts = config.chunk_layers
    if counts is None:
        if len(blocks) % n:
            raise DnnplanError(f"{len(blocks)} transformer layers do not split evenly over {n} pipeline chunks",
                               hint="give a stage layout, or a pipeline size that divides the layers")
        counts = (len(blocks) // n,) * n
    if len(counts) != n or sum(counts) != len(blocks) or min(counts) < 0:
        raise DnnplanError(f"the pipeline layout holds {sum(counts)} transformer layers in {len(counts)} chunks, "
                           f"and {net.name} has {len(blocks)} in {n} ({config.stages} stages x {config.chunks} "
                           "chunks)", hint="give a layout of the network's layers, one chunk a stage and model chunk")
    out, start = [], 0
    for k in counts:
        out.append(blocks[start:start + k])
        start += k
    return tuple(out)


def first_layers(net: Network, chunks: tuple[tuple[str, ...], ...]) -> tuple[str, ...]:
    """Each chunk's first layer: the network's first for the first chunk, a chunk's first transformer
    layer's first layer for the others (a last chunk of none: the first layer after the
    transformer layers)."""
    first_of: dict[str, str] = {}
    for layer in net.layers:
        first_of.setdefault(block_of(layer) or "", layer.name)
    blocked = [i for i, layer in enumerate(net.layers) if block_of(layer) is not None]
    after = net.layers[blocked[-1] + 1].name if blocked and blocked[-1] + 1 < len(net.layers) else None
    out = [net.layers[0].name]
    for i, chunk in enumerate(chunks[1:], 1):
        if chunk:
            out.append(first_of[chunk[0]])
        elif i == len(chunks) - 1 and after is not None:
            out.append(after)
        else:
            raise DnnplanError(f"pipeline chunk {i + 1} holds no transformer layer", hint="give every chunk layers")
    return tuple(out)


def layer_algorithms(config: LaunchConfig, net: Network, chunks: tuple[tuple[str, ...], ...],
                     machine: Machine) -> dict[str, str]:
    """The layers' algorithms: the attention kernel the choices name (else the machine's), with
    recomputation on attention (selective) or on every layer of the transformer layers recomputed
    (full: all of them, or the first ``recompute_layers`` of each chunk)."""
    kernel = config.choices.attention or attention_default(machine)
    out = default_algorithms(net) | {layer.name: kernel for layer in net.layers if layer.op == "attention"}
    if config.recompute == "selective":
        return out | {layer.name: with_recompute(kernel) for layer in net.layers if layer.op == "attention"}
    if config.recompute != "full":
        return out
    k = config.recompute_layers
    recomputed = {b for chunk in chunks for b in (chunk if k is None else chunk[:k])}
    return out | {layer.name: with_recompute(out.get(layer.name, "")) for layer in net.layers
                  if block_of(layer) in recomputed}
