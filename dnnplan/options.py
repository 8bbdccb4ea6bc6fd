"""Every argument and option of the command line, each defined once.

A flag that means the same thing in several commands is one definition here, so its name, short
form and help cannot drift apart; flags that share a name but mean different things (``--devices``
as one count or as a list to profile for, ``--json`` as a switch or a file) are distinct
definitions with distinct names. Defaults that depend on other inputs are stated in the help as
``\\[default: ...]`` (the backslash keeps rich from reading them as markup). What typer's types
cannot check is checked as the flag is read (dnnplan.flag_values: every number within its plausible
range, finite, NaN never in range; a name among its choices; no blank name), and flags that do
nothing where they are given are said here.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from costmodel.compute.model import ComputeModel, OnDemand
from costmodel.machine.model import MAX_DEVICES
from costmodel.parallel.axes import CONTEXT, EXPERT, PIPELINE, TENSOR
from costmodel.step.train_time import parse_tokens
from dnnplan.flag_values import dash_is_standard_output, not_blank, one_of, one_price, within
from networks.errors import DnnplanError
from networks.ops.base import MAX_INT

def foreign_warning(foreign: bool, profile: str | None) -> str | None:
    """``--foreign-profile`` without ``--profile``: the line saying it changes nothing."""
    if foreign and profile is None:
        return "--foreign-profile changes nothing without --profile (it lets another GPU's table price this one)"
    return None


def refresh_warning(refresh: bool, compute: ComputeModel) -> str | None:
    """``--refresh-profile`` re-times this computer's on-demand cache only: the line saying so
    when the compute model is something else (a given table, the datasheet)."""
    if refresh and not (isinstance(compute, OnDemand) and compute.refresh):
        return ("--refresh-profile applies to machine `local` without --profile (this computer's profile "
                "cache); ignored")
    return None


def step_context_warning(given: bool, compute: ComputeModel) -> str | None:
    """``--step-context`` / ``--no-step-context`` times kernels on this computer only: the line
    saying so when given where the compute model is something else (a given table, the datasheet)."""
    if given and not isinstance(compute, OnDemand):
        return ("--step-context applies to machine `local` without --profile (kernels timed on this computer); "
                "ignored")
    return None


# --- what to work on -------------------------------------------------------------------------

NetworkArg = Annotated[str, typer.Argument(help="A zoo network name (see `dnnplan networks`), a path to a "
                                                "network spec YAML (docs/network-spec.md), or a model to import: a "
                                                "Hugging Face config.json (or its folder) or an ONNX file.")]
SeqOpt = Annotated[Optional[int], typer.Option("--seq", help="Tokens per sequence of a language model \\[default: "
                                               "the spec's; a Hugging Face config's longest "
                                               "(max_position_embeddings); an ONNX graph's].",
                                               callback=within("--seq", 1, MAX_INT))]
PlanArg = Annotated[str, typer.Argument(help="A plan file written by `dnnplan plan --out`.")]
PredictNetworkArg = Annotated[Optional[str], typer.Argument(
    help="A zoo network name (see `dnnplan networks`), a network spec YAML, a Hugging Face config.json (or its "
         "folder), an ONNX file, or a plan file (from `dnnplan plan --out`); none with --from.", show_default=False)]
FromOpt = Annotated[Optional[str], typer.Option(
    "--from", help="Predict a framework's launch configuration: Megatron-LM's arguments as a launch script passes "
                   "them (torchrun ... pretrain_gpt.py --flag value ...), or the arguments alone; a torchtitan job "
                   "TOML (.toml); a DeepSpeed JSON (.json) (docs/export.md).")]
FromNetworkOpt = Annotated[Optional[str], typer.Option(
    "--network", help="With --from: the network the configuration trains, a zoo name or a spec or Hugging Face "
                      "config path \\[default: the zoo network of the model shape the file states].")]
ExportToOpt = Annotated[str, typer.Option("--to", help="The framework to write the plan for: megatron "
                                         "(Megatron-LM's pretrain_gpt.py arguments), torchtitan (a job TOML as its "
                                         "0.2 releases read it) or deepspeed (ds_config.json and its launcher).")]
EmitOpt = Annotated[Optional[str], typer.Option("--emit", help="After the plan, print it as that framework's file: "
                                               "megatron, torchtitan or deepspeed (as `dnnplan export --to`).")]
NearestOpt = Annotated[bool, typer.Option("--nearest", help="Where the framework cannot run the plan as planned, "
                                          "write the fastest plan it runs within the devices' memory (one "
                                          "layout on every layer, of those the plan's layers take; its "
                                          "recomputation, schedule and ZeRO) and print both predictions.")]
EmitNearestOpt = Annotated[bool, typer.Option("--nearest", help="With --emit, where the framework cannot run the "
                                              "plan as planned: print the fastest plan it runs within the devices' "
                                              "memory instead, each change and both predictions on stderr (as "
                                              "`dnnplan export PLAN --to FRAMEWORK --nearest`; --out keeps the "
                                              "plan as planned).")]
ExportOutOpt = Annotated[Optional[str], typer.Option("--out", "-o", help="Write the file here instead of printing "
                                                     "it: Megatron-LM's launch command (a shell script), "
                                                     "torchtitan's TOML or DeepSpeed's JSON (- or "
                                                     "/dev/stdout: after what the command prints).",
                                                     callback=dash_is_standard_output)]
ProfileTargetArg = Annotated[Optional[str], typer.Argument(
    help="A network (zoo name or spec path), or a sweep: 'gemm' (GEMM grid over --sizes) or 'conv' (3x3 conv "
    "grid); none with --host.", show_default=False)]
HostOpt = Annotated[bool, typer.Option("--host", help="Time a framework's per-op dispatch cost on this computer "
                                       "(tight loops of tiny ops) and print the framework file's host: keys.")]
HostFrameworkOpt = Annotated[str, typer.Option(
    "--framework", help="With --host: the installed framework to time, numpy (always installed), torch "
    "(on its GPU where it has one) or cupy (on the GPU: what dnnplan's own executor issues through).")]
DevicesOpt = Annotated[int, typer.Option("--devices", "-p", help="Number of devices (ranks) to split over.",
                                         callback=within("--devices", 1, MAX_DEVICES))]
DeviceCountsOpt = Annotated[str, typer.Option("--devices", "-p", help="Device counts the planner will consider, "
                                                                      "e.g. 1,2,4.")]
BatchOpt = Annotated[Optional[int], typer.Option("--batch", "-b", help="Global batch per training step "
                                                 "\\[default: 32 samples a device; a language model: about 4M "
                                                 "tokens, at most 16 sequences a device].",
                                                 callback=within("--batch", 1, MAX_INT))]
SamplesOpt = Annotated[int, typer.Option("--batch", "-b", help="Samples per training step.",
                                         callback=within("--batch", 1, MAX_INT))]
MachineOpt = Annotated[Optional[str], typer.Option("--machine", "-m", help="A shipped machine (see `dnnplan "
                                                   "machines`) or a machine YAML path \\[default: dgx-a100].",
                                                   callback=not_blank("--machine", "machine", "dgx-h100"))]
LocalMachineOpt = Annotated[str, typer.Option("--machine", "-m", help="The machine to plan for: a shipped machine "
                                              "or a machine YAML path; `local` is this computer.")]
ProfileOpt = Annotated[Optional[str], typer.Option("--profile", help="A profile table (from `dnnplan profile`) to "
                                                   "time kernels with \\[default: the machine's; for `local` this "
                                                   "computer's cache; else the datasheet roofline].")]
DeviceOpt = Annotated[str, typer.Option(
    "--device", help="Where the ranks run: auto (where the profile was timed: a --backend cupy table runs on GPUs, "
    "one per local rank), host (numpy + MPI) or cuda (cupy + cuDNN/cuBLAS + NCCL; MPI staged through the host "
    "when ranks share a GPU).")]
ForeignProfileOpt = Annotated[bool, typer.Option(
    "--foreign-profile", help="Use a GPU profile table of another GPU model than the machine's (or than the GPU "
    "running the plan): its kernel times are that GPU's, and the output says so.")]
RefreshOpt = Annotated[bool, typer.Option("--refresh-profile", help="Machine `local`: time again, now, every "
                                          "kernel the planner weighs, side by side in interleaved rounds, "
                                          "and update this computer's profile cache (entries gathered "
                                          "over days, or timed minutes apart, drift apart on a shared "
                                          "machine and can mislead the choice between alternatives).")]

# --- output ----------------------------------------------------------------------------------

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]
ListJsonOpt = Annotated[bool, typer.Option("--json", help="Print the rows as one JSON array, an object a row, "
                                                           "instead of the table.")]
ExportJsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object (the arguments or the config, "
                                             "and what --nearest changed) instead of the file.")]
JsonFileOpt = Annotated[Optional[str], typer.Option("--json", help="Write the result as JSON to FILE (- or "
                                                   "/dev/stdout: standard output).",
                                                   callback=dash_is_standard_output)]
PlanOutOpt = Annotated[Optional[str], typer.Option("--out", "-o", help="Write the plan here (.yaml, or .json for "
                                                   "JSON; - or /dev/stdout: after what the command prints).",
                                                   callback=dash_is_standard_output)]
TraceOpt = Annotated[Optional[str], typer.Option("--trace", help="Write a Chrome/Perfetto trace of every rank's "
                                                 "timeline to FILE.", callback=dash_is_standard_output)]
DetailsOpt = Annotated[bool, typer.Option("--details", help="Also print each plan's per-layer table.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Replace an existing output file.")]

# --- predict and plan ------------------------------------------------------------------------

StrategyOpt = Annotated[str, typer.Option("--strategy", "-s", help="Uniform strategy for every layer: data, "
                                          "filter, channel, spatial, or degrees like N=4,F=2.")]
MemoryOpt = Annotated[Optional[float], typer.Option("--memory", help="Memory per device in GiB \\[default: the "
                                                    "machine's device memory].",
                                                    callback=within("--memory", 0.001, 1e6, " GiB"))]
PrecisionOpt = Annotated[str, typer.Option(
    "--precision", help="Number format of training: fp32; tf32 (float32 storage, TF32 tensor cores); fp16 or "
    "bf16 (mixed precision: 16-bit activations, weights and gradients, float32 master weights and optimiser "
    "state); fp8 (bf16 with the transformer blocks' GEMMs in FP8 as Transformer Engine runs them, at the "
    "device's FP8 peak; its FP8 weight copies and scaling state in memory; needs a machine with an FP8 peak). "
    "Priced from the GPU datasheet, or from a GPU profile table timed in it (--profile; "
    "docs/costmodel.md, Precision) \\[default: bf16 for a network with attention on a GPU priced from its "
    "datasheet (fp16 on a V100), as Megatron-LM, torchtitan and DeepSpeed train transformers; with --profile, "
    "the precision the table was timed in; else fp32].",
    show_default=False)]
BatchNormOpt = Annotated[Optional[str], typer.Option(
    "--batch-norm", help="How batch normalisation takes its statistics: sync (the default: over the whole batch, "
    "as SyncBatchNorm and `dnnplan execute` run it, two small allreduces a layer split over samples) or local "
    "(over each rank's own samples, as PyTorch DDP's BatchNorm2d: none over a sample split; a spatial split "
    "still all-reduces them). A plan file records it (docs/costmodel.md, Batch normalisation).")]
MoeDispatchOpt = Annotated[Optional[str], typer.Option(
    "--moe-dispatch", help="How an expert split moves the tokens of a mixture of experts: alltoall (the default: "
    "every (token, expert) row in capacity buffers by all-to-all, Megatron-Core's alltoall dispatcher and what "
    "`dnnplan execute` runs) or flex (each token once to each node and each rank holding any of its experts, "
    "across nodes to the same local rank, then on over NVLink: Megatron-Core's flex dispatcher with DeepEP or "
    "HybridEP; GPU machines). A plan file records it (docs/costmodel.md, Mixture of experts).")]
Fp8ParamsOpt = Annotated[Optional[bool], typer.Option(
    "--fp8-params/--no-fp8-params", help="Under --precision fp8, keep the transformer blocks' GEMM weights only "
    "in FP8 and gather them in FP8 (Megatron-Core's --fp8-param-gather, which Megatron-Bridge's FP8 "
    "current-scaling and MXFP8 recipes set): no 16-bit copy of those weights, half the bytes of their ZeRO "
    "gathers. A plan file records it "
    "(docs/costmodel.md, Precision) \\[default: off, a 16-bit weight beside its FP8 copy].", show_default=False)]
GradFp32Opt = Annotated[Optional[bool], typer.Option(
    "--grad-fp32/--no-grad-fp32", help="Under 16-bit weights, accumulate the gradients in a float32 buffer and "
    "reduce them in float32 (Megatron-LM's default under --bf16, which keeps a float32 main_grad: 2 more bytes "
    "a parameter and twice the gradient reduction's bytes) instead of in the weights' precision "
    "(--grad-reduce-in-bf16, as Megatron-Bridge's performance recipes run). A plan file records it "
    "(docs/costmodel.md, ZeRO) \\[default: off, the weights' precision].", show_default=False)]
OptimizerOpt = Annotated[str, typer.Option(
    "--optimizer", help="The optimiser whose state each parameter carries: sgd (none), momentum (one value, "
    "what the executor runs) or adam (two) \\[default: adam for a network with attention, else momentum].",
    show_default=False)]
ZeroOpt = Annotated[int, typer.Option(
    "--zero", help="ZeRO stage: 0 none; 1 shards optimiser state and master weights over each weight's "
    "data-parallel replicas; 2 also gradients; 3 also the weights, gathered per layer (docs/costmodel.md, ZeRO). "
    "Not given, `dnnplan plan` weighs the stages and answers with the fastest (its summary says which), and "
    "`predict` and a sweep's points (but with --pipeline auto) take 0.",
    callback=within("--zero", 0, 3), show_default=False)]
RecomputeOpt = Annotated[bool, typer.Option(
    "--recompute/--no-recompute", help="Let layers that keep internals for backward (attention, dropout, max "
    "pooling, the loss) run their forward again in backward instead, where memory needs it (docs/costmodel.md, "
    "Recomputation). The executor runs no recomputation: plan with --no-recompute to execute.")]
PipelineOpt = Annotated[int, typer.Option(
    PIPELINE.flag, help="Pipeline stages: the layers cut into this many contiguous stages, of equal numbers of "
    "whole blocks where the blocks divide evenly, else of about equal FLOPs, each on devices/stages devices with "
    "--strategy or --tensor inside (docs/costmodel.md, Pipelines).",
    callback=within(PIPELINE.flag, 1, 4096))]
MicroBatchesOpt = Annotated[int, typer.Option(
    "--micro-batches", help="Micro-batches per step (must divide the batch), each of batch/M samples: in a "
    "pipeline split over a stage's data-parallel ranks; without one (or with --pipeline 1) gradient "
    "accumulation: the micro-batches one after another, the activations of one held at a time, the gradients "
    "reduced and the weights updated once a step (docs/costmodel.md, Gradient accumulation).",
    callback=within("--micro-batches", 1, MAX_INT))]
OverlapOpt = Annotated[str, typer.Option(
    "--overlap", help="Which communication overlaps compute: none (every collective in the critical path: "
    "gradients all-reduced after the backward pass, as dnnplan's executor runs); data (the weights' gradient "
    "reduction in buckets under the backward pass, the last bucket exposed, and ZeRO's parameter gathers "
    "under forward and backward: PyTorch DDP's and FSDP's defaults, Megatron-Core's --overlap-grad-reduce "
    "--overlap-param-gather); all (data, and tensor-parallel collectives under their GEMMs: Megatron-Core's "
    "--tp-comm-overlap); any of them with +experts (all+experts: the expert all-to-alls of one micro-batch under "
    "another's opposite pass, Megatron-Core's --overlap-moe-expert-parallel-comm). \\[default: data on GPU "
    "machines, none on the CPU] (docs/costmodel.md, Overlap).")]
BucketOpt = Annotated[Optional[float], typer.Option(
    "--bucket-mb", help="Gradient bucket size in MiB with --overlap data or all (PyTorch DDP's bucket_cap_mb; "
    "Megatron-Core's default bucket of 40M parameters is 76 MiB in bf16): the last bucket's reduction is exposed. "
    "A plan file records it after the mode (overlap: data@76). \\[default: 25, DDP's]",
    callback=within("--bucket-mb", 0.001, 1e6))]
FrameworkOpt = Annotated[str, typer.Option(
    "--framework", help="Whose step to price, as a shipped framework's name or a framework YAML "
    "(costmodel/frameworks/*.yaml: per op, the kernels launched and their device time, the host's cost per op "
    "and launch, CUDA graphs, overlap efficiencies, memory added, what fp32 means): ideal (the cost model's "
    "fused kernels issued by a host that never holds the device back; the default, dnnplan's pricing before "
    "frameworks were files), megatron, pytorch (eager), pytorch-compile, dnnplan (what `dnnplan execute` runs "
    "eagerly), dnnplan-graphs (its steps replayed as one CUDA graph) "
    "or deepspeed (DeepSpeed's ZeRO-3 as published runs of it behave, with --zero 3 and no model "
    "parallelism: `dnnplan predict` only). On a CPU machine the measured kernels hold the host: only the overlap applies "
    "(docs/costmodel.md, Frameworks).")]
RuntimeOpt = Annotated[Optional[str], typer.Option("--runtime", help="The same as --framework (its earlier name).")]
ScheduleOpt = Annotated[str, typer.Option(
    "--schedule", help="Pipeline schedule: 1f1b (activations of at most as many micro-batches as stages "
    "remain), gpipe (of all of them), the same step, or interleaved (Megatron-LM's interleaved 1F1B, "
    "model chunks a device: the fill and drain shrink that many times, the sends grow as many; "
    "`dnnplan predict` takes --chunks). Not given, `dnnplan plan` searches every pipeline and "
    "micro-batch count under 1f1b, each that becomes the best interleaved with 2 to 8 chunks a device; auto "
    "weighs interleaving on every pair (slower); given, only that schedule.",
    callback=one_of("--schedule", ("1f1b", "gpipe", "interleaved", "auto")), show_default=False)]
PredictScheduleOpt = Annotated[str, typer.Option(
    "--schedule", help="Pipeline schedule: 1f1b (activations of at most as many micro-batches as stages "
    "remain), gpipe (of all of them), the same step, or interleaved (Megatron-LM's interleaved 1F1B with "
    "--chunks model chunks a device: the fill and drain shrink that many times, the sends grow as many).",
    callback=one_of("--schedule", ("1f1b", "gpipe", "interleaved")))]
ChunksOpt = Annotated[int, typer.Option(
    "--chunks", help="With --schedule interleaved: model chunks each device holds (Megatron-LM's virtual "
    "pipeline stages; the layers are cut into pipeline x chunks pieces).",
    callback=within("--chunks", 1, 4096))]
TensorOpt = Annotated[int, typer.Option(
    TENSOR.flag, "-t", help="Megatron tensor parallelism of this degree: column/row-parallel linear pairs, attention "
    "split by heads, vocabulary-parallel embedding, LM head and loss; the rest of the devices split the batch "
    "(docs/costmodel.md, Tensor parallelism). Inside each pipeline stage with --pipeline.",
    callback=within(TENSOR.flag, 1, MAX_DEVICES))]
ContextOpt = Annotated[int, typer.Option(
    CONTEXT.flag, help="With --tensor (or alone): context parallelism of this degree: every layer with a sequence "
    "splits it over groups of this many devices, attention exchanging keys and values by a ring or an all-gather "
    "(docs/costmodel.md, Context parallelism); the rest of the devices split the batch.",
    callback=within(CONTEXT.flag, 1, MAX_DEVICES))]
ExpertOpt = Annotated[int, typer.Option(
    EXPERT.flag, help="Expert parallelism of this degree: mixture-of-experts layers split their experts over groups "
    "of this many data-parallel devices, tokens dispatched and combined by all-to-alls; with --tensor and "
    "--sequence-parallel it may be data x tensor (Megatron-Core's MoE Parallel Folding: whole experts on every "
    "rank, each routing its sequence shard) (docs/costmodel.md, Mixture of experts).",
    callback=within(EXPERT.flag, 1, MAX_DEVICES))]
AttentionOpt = Annotated[str, typer.Option(
    "--attention", help="The attention algorithm: flash (FlashAttention-2) or materialized (the scores written "
    "to memory) \\[default: the machine's: flash on A100 and H100, materialized on V100 and CPUs].",
    show_default=False)]
SequenceParallelOpt = Annotated[bool, typer.Option(
    "--sequence-parallel", help="With --tensor: split layer norm, dropout and the residual adds over the sequence "
    "across the tensor group instead of repeating them on every device of it (Korthikanti et al. 2022); with "
    "--context, each context rank's share of the sequence, as Megatron-Core runs the two.")]
RecomputeModeOpt = Annotated[str, typer.Option(
    "--recompute", help="Activation recomputation: none; selective (each attention layer reruns its forward in "
    "backward, its projections and their collectives included: more time, and more memory saved, than Megatron's "
    "selective recomputation of the core alone); full (every layer of every block does, its forward collectives "
    "included, each block keeping only its input, as Megatron's full recomputation; convolutions are not "
    "recomputed and keep their inputs, so a CNN saves little or nothing: said when so).")]
SolverOpt = Annotated[str, typer.Option("--solver", help="auto (graph reduction + DP; under a binding memory limit "
                                        "a Lagrangian bound rules candidates out and Pareto fronts of (cost, memory), or an ILP, solve the rest, "
                                        "exactly), "
                                        "reduced (graph reduction; a binding limit sends the whole problem to the ILP), "
                                        "or ilp (the plain ILP). All three are exact.")]
TimeLimitOpt = Annotated[Optional[float], typer.Option("--time-limit", help="Seconds within which the plan is "
                                                       "answered, from the command's start: the search stops in time "
                                                       "to print the best plan it holds, with the gap proven to the "
                                                       "optimum (with --sweep: per point; machine `local` "
                                                       "times kernels on top) \\[default: 20; a sweep's points "
                                                       "share 30 s].",
                                                       callback=within("--time-limit", 0.001, 1e7, " s"))]
LayersOpt = Annotated[bool, typer.Option("--layers", help="Also print the per-layer tables (the plan of every "
                                         "layer, its convolution algorithms, the memory by part, the solver's "
                                         "detail); shown anyway for networks of at most 24 layers.")]
JobsOpt = Annotated[Optional[int], typer.Option("--jobs", "-j", help="Processes for one plan's search (the "
                                               "pipeline pairs' bounds and gap closings: this one and N-1 workers), "
                                               "same answer as one process; 1: all in this process; at most the "
                                               "cores this process may use; a sweep's points: --sweep-jobs "
                                               "\\[default: the cores this process may use].",
                                               callback=within("--jobs", 1, 1024))]
GapOpt = Annotated[Optional[float], typer.Option("--gap", help="Relative optimality gap at which an ILP may stop "
                                                 "\\[default: 0, prove optimality].", callback=within("--gap", 0, 1))]
SweepOpt = Annotated[Optional[str], typer.Option("--sweep", help="Plan at each of several device counts, e.g. "
                                                 "1,2,4,...,1024, at a fixed batch: strong scaling on one machine; "
                                                 "with several --machine or --tokens, the comparison of every machine "
                                                 "and count (step, throughput, time and cost to train, the fastest and "
                                                 "the cheapest marked). Each point is planned without pipelining; "
                                                 "with --pipeline auto as a single plan is, pipelined where nothing "
                                                 "fits whole.", callback=not_blank("--sweep", "device count", "8,16,...,1024"))]
PlotOpt = Annotated[Optional[str], typer.Option("--plot", help="With --sweep: write a figure, a PDF or SVG by the "
                                                "file's suffix, else a PNG (needs the plot extra, "
                                                "matplotlib); comparing machines, a line per machine of the time "
                                                "and cost to train over device counts.")]
SweepJobsOpt = Annotated[int, typer.Option("--sweep-jobs", help="With --sweep: plan this many of its points at "
                                           "once, in worker processes (each point's search itself is unchanged).",
                                           callback=within("--sweep-jobs", 1, 64))]
PlanMachineOpt = Annotated[Optional[str], typer.Option(
    "--machine", "-m", help="A shipped machine (see `dnnplan machines`) or a machine YAML path \\[default: dgx-a100]; "
    "several, comma-separated, are compared at --devices or each count of --sweep: "
    "-m dgx-a100,dgx-h100 --sweep 64,128,...,1024 --tokens 15T.")]
PlanPriceOpt = Annotated[Optional[str], typer.Option(
    "--gpu-hour-price", help="Price of one device for one hour (any currency), for --tokens's cost: one price for "
    "every machine (2.5), or one for each machine compared (dgx-h100=2.5,dgx-a100=1.6).", show_default=False)]

# --- running plans ---------------------------------------------------------------------------

RanksOpt = Annotated[int, typer.Option("--ranks", "-n", help="MPI ranks to run on; must equal the plan's devices.",
                                       callback=within("--ranks", 1, MAX_DEVICES))]
StepsOpt = Annotated[int, typer.Option("--steps", help="Timed training steps (after the warm-up).",
                                       callback=within("--steps", 1, 10**6))]
WarmupOpt = Annotated[int, typer.Option("--warmup", help="Untimed warm-up steps first.",
                                        callback=within("--warmup", 0, 10**6))]
TimeoutOpt = Annotated[float, typer.Option("--timeout", help="Seconds before the whole run is stopped.",
                                           callback=within("--timeout", 0.001, 1e7, " s"))]
ThreadsOpt = Annotated[Optional[int], typer.Option("--threads", help="BLAS/OpenMP threads per rank "
                                                   "\\[default: the profile's, else cores // ranks].",
                                                   callback=within("--threads", 1, 4096))]
FreshOpt = Annotated[bool, typer.Option("--fresh-profile", help="Machine `local`: time the prediction's "
                                        "kernels and collectives again inside the run, once per rank after "
                                        "each of as many untimed steps run after the timed ones, and predict "
                                        "from those timings (a check of the model's structure, not a prediction made before the run).")]
InRunOpt = Annotated[bool, typer.Option(
    "--in-run/--no-in-run", "--fresh-profile", help="Machine `local` without --profile: also time each plan's "
    "kernels and collectives again inside its run (every rank, after each of as many untimed "
    "steps run after the timed ones, which run back to back) and report, beside the ahead-of-time step error, "
    "the model's error given those in-run kernel times (a check of the model's structure, not a prediction). It "
    "lengthens each run by as many steps again, each followed by about four kernel runs per kernel; --no-in-run "
    "leaves it out. (--fresh-profile: its former name.)")]
StepContextOpt = Annotated[bool, typer.Option(
    "--step-context/--no-step-context", help="Machine `local` without --profile: before the run, time the plan's "
    "kernels again in its step's order (each after the calls that precede it in the step, as they meet them "
    "there), and on several ranks its collectives on as many ranks (each after the kernels before it), and the "
    "executor's own time between kernels (its probe, once), and predict from those timings; the prediction "
    "from the profile's kernels timed alone is shown beside. A few seconds a plan; --no-step-context predicts "
    "from the profile alone.")]
PredictStepContextOpt = Annotated[bool, typer.Option(
    "--step-context/--no-step-context", help="A plan file for machine `local`, without --profile: predict it as "
    "`dnnplan execute` does before its run, from its kernels (and, on several ranks, its collectives) timed again "
    "in its step's order and context, with the executor's time between kernels and the ranks' wait for the "
    "slowest (a few seconds); the prediction from the profile alone is shown beside. --no-step-context keeps the "
    "profile's kernels timed alone (and still adds the wait).")]
PlanStepContextOpt = Annotated[bool, typer.Option(
    "--step-context/--no-step-context", help="Machine `local` without --profile: once the plan is made, time its "
    "kernels and those of each uniform plan (data, filter, spatial) again in their step's order and context (and "
    "their collectives, on several ranks), and take the one predicted fastest there (a few seconds a plan); "
    "--no-step-context keeps the solver's plan.")]
GraphsOpt = Annotated[Optional[bool], typer.Option(
    "--graphs/--no-graphs", help="On GPUs, replay each timed step as one CUDA graph captured after the eager "
    "warm-up (per-layer times from one eager step after them); a plan that cannot be captured (collectives "
    "staged through the host, pipeline stages over MPI, dropout, MoE routing) runs eagerly and the report says "
    "why \\[default: graphs where the plan allows them].", show_default=False)]
CheckOpt = Annotated[bool, typer.Option("--check", help="Also run the step on one process on the whole batch and "
                                        "compare loss and every weight gradient.")]
ValidateNetworkArg = Annotated[Optional[str], typer.Argument(
    help="A zoo network name (see `dnnplan networks`) or a path to a network spec YAML (docs/network-spec.md); "
         "may be left out with --quick \\[default with --quick: lenet5].", show_default=False)]
ValidateRanksOpt = Annotated[Optional[int], typer.Option(
    "--ranks", "-n", help="MPI ranks to run on; required unless --quick \\[default with --quick: 2, or 1 on a "
    "one-core computer].", callback=within("--ranks", 1, MAX_DEVICES))]
QuickValidateOpt = Annotated[bool, typer.Option(
    "--quick", help="A small validate that takes well under a minute, to see the loop work end to end: lenet5, "
    "2 ranks, batch 8, 3 timed steps after 1 warm-up, each plan run twice (--repeats 2). The network and any "
    "option given on the command line win over the preset.")]
RepeatsOpt = Annotated[int, typer.Option(
    "--repeats", help="Run each plan this many times, interleaved (A B C, then C B A, ...) so a drift of the "
    "machine's speed falls on every plan alike; each plan reports its median step error and their range, and "
    "the summary's noise_floor says how far repeats of one plan differ: errors below it are noise.",
    callback=within("--repeats", 1, 1000))]
ReportDirOpt = Annotated[Optional[str], typer.Option(
    "--report", help="Write a report a person reads to this folder (created if missing; its parent must "
    "exist): report.md (settings, a table per plan of predicted against measured step, layers and memory, "
    "and how to read it), summary.json, and PNG figures of step, per-layer and memory error (needs the plot "
    "extra, matplotlib). An earlier report there is replaced only with --force.")]
CheckEachOpt = Annotated[bool, typer.Option("--check/--no-check", help="Check each plan's numerics against one "
                                            "process.")]

# --- profiling -------------------------------------------------------------------------------

BackendOpt = Annotated[str, typer.Option("--backend", help="numpy (CPU) or cupy (NVIDIA GPU: cuDNN engines, "
                                         "cuBLAS, fused passes; docs/profiler.md, GPU).",
                                         callback=one_of("--backend", ("numpy", "cupy")))]
ProfilePrecisionOpt = Annotated[str, typer.Option(
    "--precision", help="Number format the kernels run in: fp32, tf32, fp16 or bf16 (a GPU's; numpy times fp32). "
    "Recorded in the table: a plan in another precision refuses it.")]
ProfileThreadsOpt = Annotated[int, typer.Option("--threads", help="BLAS threads per process (a rank's share of "
                                                "the cores).", callback=within("--threads", 1, 4096))]
TableOutOpt = Annotated[Optional[str], typer.Option("--out", "-o", help="Table file to write and resume "
                                                   "\\[default: this device's per-user cache, used by --machine "
                                                   "local]; with --host, the framework file fragment to write.")]
MaxSecondsOpt = Annotated[Optional[float], typer.Option("--max-seconds", help="Stop after this long; rerun to "
                                                        "resume.", callback=within("--max-seconds", 0.001, 1e7, " s"))]
SizesOpt = Annotated[Optional[str], typer.Option("--sizes", help="gemm: M/K/N values; conv: spatial sizes.")]
ChannelsOpt = Annotated[Optional[str], typer.Option("--channels", help="conv sweep: channel counts (C = F).")]
AlgorithmsOpt = Annotated[Optional[str], typer.Option("--algorithms", help="Convolution algorithms to time "
                                                      "\\[default: every one that applies].")]
QuickOpt = Annotated[bool, typer.Option("--quick", help="Fewer repetitions (a rough table, fast).")]
CommRanksOpt = Annotated[int, typer.Option("--ranks", "-n", help="MPI ranks to launch (mpiexec -n).",
                                           callback=within("--ranks", 1, MAX_DEVICES))]
MessageSizesOpt = Annotated[Optional[str], typer.Option("--sizes", help="Message sizes in bytes \\[default: 8 B to "
                                                        "--max-bytes by powers of 2].")]
MaxBytesOpt = Annotated[int, typer.Option("--max-bytes", help="Largest default message.",
                                          callback=within("--max-bytes", 1, 2**40))]
CommOutOpt = Annotated[Optional[str], typer.Option("--out", "-o", help="Table file to add the fit to \\[default: "
                                                   "the per-user cache of this computer].")]
CapOpt = Annotated[float, typer.Option("--cap", help="Seconds per (collective, size, cache state).",
                                       callback=within("--cap", 0.001, 1e5, " s"))]
PlanPipelineOpt = Annotated[Optional[str], typer.Option(
    PIPELINE.flag, help="Search pipelined plans alone, at --zero (0 when not given): 'auto' tries every "
    "pipeline degree dividing the devices (at most one stage a block) and micro-batches of 1, 2, 4 or 8 "
    "samples, cuts the blocks into stages exactly and solves each stage's layers as the planner does (1F1B); "
    "a number fixes the degree; 'off' never pipelines. Only for networks that are stacks of identical blocks "
    "(transformers). Without the flag a stack's plan weighs the ZeRO stages, and the same pipeline search "
    "beside the whole batch at once where that fits (a pipeline only when faster), alone where it does not; "
    "with --sweep, 'auto' plans each point so. docs/planner.md, Pipelines.")]
PlanProveOpt = Annotated[float, typer.Option(
    "--prove", help="With --pipeline: seconds to spend proving the choice. Pairs are compared with their "
    "memory-bound stages solved by Lagrangian relaxation; each other (pipeline, micro-batch) pair whose lower "
    "bound is below the chosen step is then searched again with every stage solved exactly, most promising "
    "first, until none is left or the time is spent; a pair that could win by less than 1% (or --gap) is left. "
    "The output says how much faster a pair left open could still be (0: the choice is optimal). 0 skips it.",
    callback=within("--prove", 0, 1e7, " s"))]
PlanMicroBatchesOpt = Annotated[Optional[int], typer.Option(
    "--micro-batches", help="With --pipeline: micro-batches per step (must divide the batch) instead of "
    "searching them.", callback=within("--micro-batches", 1, MAX_INT))]


# --- time and cost to train ------------------------------------------------------------------

TokensOpt = Annotated[Optional[str], typer.Option(
    "--tokens", help="Tokens to train a language model on (15T, 300B, 2e12): the summary adds the steps, days, "
    "device-hours and, with --gpu-hour-price, the cost at the predicted step.", show_default=False)]
PriceOpt = Annotated[Optional[str], typer.Option(
    "--gpu-hour-price", help="Price of one device for one hour (any currency), for --tokens's cost: 2.5, or "
    "MACHINE=PRICE naming the machine predicted (as plan -m A,B takes them).",
    callback=one_price("--gpu-hour-price", 1e6), show_default=False)]


def token_budget(tokens: str | None, price: float | None) -> float | None:
    """``--tokens`` as a number (None: not given); a price without a budget is one line."""
    if price is not None and tokens is None:
        raise DnnplanError("--gpu-hour-price prices a token budget", hint="give --tokens too, e.g. --tokens 15T")
    return None if tokens is None else parse_tokens(tokens)
