"""A mistake on the command line itself (an unknown option, a value of the wrong type, a missing
network) as one line, like every other user mistake (:class:`dnnplan.cli.Group`): what was wrong,
the fix where it is known, and the command's ``-h``.

An option another tool names differently is answered with dnnplan's name for it, where the command
has that option: Megatron-LM's ``--tensor-model-parallel-size`` (``--tp`` in NeMo and most
launchers) is ``--tensor`` here, ``--pipeline-model-parallel-size`` ``--pipeline``, DeepSpeed's ZeRO
stage ``--zero``, a launcher's GPU count ``--devices`` (``--ranks`` where a command runs MPI ranks).
"""

from __future__ import annotations

import sys

from typer._click.exceptions import NoArgsIsHelpError, NoSuchOption, UsageError

#: other tools' options (Megatron-LM's arguments, NeMo's and torchtitan's short names, launchers'),
#: each with dnnplan's option for it and what it means here
OTHER_NAMES: dict[str, tuple[str, str]] = {
    **dict.fromkeys(("--tp", "--tensor-model-parallel-size", "--tensor-parallel-size", "--tensor-parallel"),
                    ("--tensor", "the tensor-parallel group's size")),
    **dict.fromkeys(("--pp", "--pipeline-model-parallel-size", "--pipeline-parallel-size", "--pipeline-parallel"),
                    ("--pipeline", "the pipeline's stages")),
    **dict.fromkeys(("--vpp", "--virtual-pipeline-model-parallel-size", "--num-layers-per-virtual-pipeline-stage"),
                    ("--chunks", "the model chunks a device holds, with --schedule interleaved")),
    **dict.fromkeys(("--cp", "--context-parallel-size", "--context-parallel"),
                    ("--context", "the context-parallel group's size")),
    **dict.fromkeys(("--ep", "--expert-model-parallel-size", "--expert-parallel-size", "--expert-parallel"),
                    ("--expert", "the expert-parallel group's size")),
    **dict.fromkeys(("--sp",), ("--sequence-parallel", "sequence parallelism inside the tensor groups")),
    **dict.fromkeys(("--zero-stage", "--zero_stage", "--fsdp"), ("--zero", "the ZeRO stage (3: FSDP)")),
    **dict.fromkeys(("--global-batch-size", "--gbs", "--global-batch"), ("--batch", "the samples a step")),
    **dict.fromkeys(("--micro-batch-size", "--mbs", "--local-batch-size"),
                    ("--micro-batches", "how many micro-batches a step takes, not their size")),
    **dict.fromkeys(("--seq-length", "--seq-len", "--seq_len", "--sequence-length", "--max-seq-len"),
                    ("--seq", "the tokens a sample")),
    **dict.fromkeys(("--num-gpus", "--gpus", "--ngpus", "--nproc-per-node", "--world-size", "--num-devices",
                     "--np", "-np", "--nproc"),
                    ("--devices", "the devices in all")),
    **dict.fromkeys(("--recompute-granularity", "--activation-checkpointing", "--ac"),
                    ("--recompute", "which activations are recomputed")),
    **dict.fromkeys(("--bf16", "--fp16", "--fp8", "--fp32", "--dtype", "--mixed-precision"),
                    ("--precision", "the number format the step computes in")),
}


#: `dnnplan predict`'s layout flags, which `dnnplan plan` chooses itself, layer by layer
PLAN_CHOOSES = ("--tensor", "--context", "--expert", "--sequence-parallel", "--strategy")
#: `dnnplan predict --recompute`'s modes; `dnnplan plan --recompute` is a switch
RECOMPUTE_MODES = ("none", "selective", "full")


def one_line(err: Exception) -> bool:
    """Whether ``err`` is a usage mistake said in one line (a command given no arguments that asks
    for some shows its help instead)."""
    return isinstance(err, UsageError) and not isinstance(err, NoArgsIsHelpError)


def usage_line(err: UsageError, argv: list[str] | None = None, commands: tuple[str, ...] = ()) -> str:
    """``err`` as the one line a user reads (without the ``error:`` the caller prints before it);
    ``argv``: the command line's words after the program (sys.argv[1:] where not given), whose first of
    ``commands`` (dnnplan's) names the command a mistake found with no command's context belongs to
    (an option's missing value)."""
    argv = sys.argv[1:] if argv is None else argv
    command = err.ctx.command_path if err.ctx is not None else "dnnplan"
    group = err.ctx is None or hasattr(err.ctx.command, "list_commands")
    if group and not isinstance(err, NoSuchOption):
        named = next((w for w in argv if w in commands), None)
        if named is not None:  # the command's own option, its words parsed before its context was made
            command, group = f"dnnplan {named}", False
    what = "every option" if isinstance(err, NoSuchOption) else "the commands" if group else "its usage"
    help_ = f"`{command} -h` lists {what}"
    if not isinstance(err, NoSuchOption) and "-np" in argv and "'--ranks' / '-n'" in err.format_message():
        return f"{command}: -np is read as -n p: mpiexec's -np is --ranks (-n) here, e.g. -n 2; {help_}"
    mode = next((argv[i + 1] for i, w in enumerate(argv[:-1]) if w == "--recompute" and argv[i + 1] in RECOMPUTE_MODES),
                None)
    if command.endswith(" plan") and mode is not None and "unexpected extra argument" in err.format_message():
        return (f"{command}: --recompute is a switch here (--recompute, --no-recompute: whether layers may "
                f"recompute); `dnnplan predict NETWORK --recompute {mode}` prices that mode; {help_}")
    if command.endswith(" predict") and isinstance(err, NoSuchOption) and err.option_name == "--no-recompute":
        return f"{command}: no such option --no-recompute: use --recompute none (predict's modes: none, selective, " \
               f"full); {help_}"
    if command.endswith(" plan") and isinstance(err, NoSuchOption) and err.option_name in PLAN_CHOOSES:
        return (f"{command}: no such option {err.option_name}: plan chooses each layer's split itself; `dnnplan "
                f"predict NETWORK {err.option_name} ...` prices a layout you give; {help_}")
    if isinstance(err, NoSuchOption):
        known = {o for p in err.ctx.command.params for o in p.opts} if err.ctx is not None else set()
        name = err.option_name
        other = OTHER_NAMES.get(name)
        if (name == "--devices" or other is not None and other[0] == "--devices") and "--devices" not in known \
                and "--ranks" in known:
            other = ("--ranks", "the MPI ranks it runs on")  # execute and validate: the devices are ranks
        if other is not None and other[0] in known:
            return f"{command}: no such option {name}: use {other[0]} ({other[1]}); {help_}"
        near = [p for p in (err.possibilities or []) if p != "--help"]
        if near:
            return f"{command}: no such option {name}: did you mean {' or '.join(near)}? {help_}"
        return f"{command}: no such option {name}; {help_}"
    message = " ".join(err.format_message().split()).rstrip(".")
    return f"{command}: {message}{' ' if message.endswith('?') else '; '}{help_}"
