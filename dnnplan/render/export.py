"""A plan exported for a framework, as the shell command that launches it (`dnnplan export`)."""

from __future__ import annotations

import json
import shlex

from dnnplan.render import fmt
from dnnplan.render.terminal.console import Console
from dnnplan.render.terminal.messages import err_console as err, warn
from costmodel.choices.training import DEFAULT_FRAMEWORK
from planner.export.exported_header import from_line, header_line
from planner.plan.plan import Plan
from networks.writing import standard_stream

console = Console(highlight=False, soft_wrap=True)

#: the launcher line: torchrun on every node, its nodes and devices a node the user's to set
LAUNCHER = 'torchrun --nnodes "$NNODES" --nproc-per-node "$GPUS_PER_NODE"'


def launch_script(plan: Plan, plan_path: str, script: str, args: list[str], source: str,
                  environment: tuple[str, ...] = ()) -> str:
    """The plan's prediction as a comment (when it carries one), what is left to set, the shell lines
    the launch needs first (``environment``), and the launcher with ``script`` and one flag (and its
    values, shell-quoted) a line, each line but the last continued by a backslash."""
    lines = prediction_lines(plan, plan_path, source, "option names")
    lines.append(f"# set NNODES x GPUS_PER_NODE = {plan.devices}, and add the data, tokenizer and checkpoint arguments")
    lines += environment
    flags: list[list[str]] = []
    for arg in args:
        if arg.startswith("--") or not flags:
            flags.append([arg])
        else:
            flags[-1].append(shlex.quote(arg))
    command = [f"{LAUNCHER} {script}"] + ["    " + " ".join(flag) for flag in flags]
    return "\n".join(lines + [" \\\n".join(command)]) + "\n"


def nearest_lines(near) -> None:
    """On stderr (the file goes to stdout): each change `--nearest` made, and both plans' predicted
    step and memory a device."""
    count = len(near.changes)
    err.print(f"nearest plan the framework runs ({count} change{'' if count == 1 else 's'}):", markup=False,
              emoji=False)
    for change in near.changes:
        err.print(f"  - {change}", markup=False, emoji=False)
    for name, pred in (("the plan", near.original), ("the nearest", near.nearest)):
        err.print(f"{name}: step {fmt.seconds(pred.step_s)}, memory {fmt.nbytes(pred.memory_peak_bytes)} a device",
                  markup=False, emoji=False)


def over_memory_line(plan: Plan, limit: float) -> None:
    """On stderr: the warning that the exported plan does not fit its machine's device memory."""
    warn(f"the plan's predicted memory, {fmt.nbytes(plan.memory_peak_bytes)} a device, is over the "
         f"{fmt.nbytes(limit)} of a {plan.machine} device: the framework would run out of memory (plan it "
         f"with `dnnplan plan`, which keeps every device within its memory)")


def show(text: str) -> None:
    console.print(text, markup=False, emoji=False, end="")


def wrote_line(out: str, framework: str, holds: str, launch: str | None = None) -> None:
    """``wrote FILE (framework: what it holds)`` (not after the output itself: ``--out /dev/stdout``),
    and the line that launches it when the file is not a script."""
    if not standard_stream(out):
        console.print(f"wrote {out} ({framework}: {holds})", markup=False, emoji=False)
    if launch:
        console.print(f"launch: {launch}", markup=False, emoji=False)


def prediction_lines(plan: Plan, plan_path: str, source: str, names: str) -> list[str]:
    """The comment lines every exported file starts with: the plan's prediction (when it carries
    one) and where its ``names`` (options, keys) were read."""
    lines = []
    if plan.step_s > 0:
        framework = plan.choices.framework
        lines.append(header_line(plan.step_s, plan.devices, plan.machine,
                                 None if framework == DEFAULT_FRAMEWORK else framework))
    lines.append(from_line(plan_path, plan.network_name, names, source))
    return lines


def toml_value(value) -> str:
    """A TOML value: a string (JSON's escapes are TOML's basic string's), a bool, a number, a list."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(str(value))


def torchtitan_toml(plan: Plan, plan_path: str, sections: dict, source: str, flavor_note: str | None) -> str:
    """torchtitan's job TOML: what it comes from, how to launch it, then a section a block."""
    lines = prediction_lines(plan, plan_path, source, "keys")
    lines.append(f"# launch on NNODES x GPUS_PER_NODE = {plan.devices} devices: torchrun --nnodes \"$NNODES\" "
                 "--nproc-per-node \"$GPUS_PER_NODE\" -m torchtitan.train --job.config_file THIS_FILE")
    lines.append("# add the dataset, the tokenizer ([model] hf_assets_path), the learning rate, steps and checkpoints")
    if flavor_note:
        lines.append(f"# {flavor_note}")
    for name, keys in sections.items():
        lines += ["", f"[{name}]"] + [f"{key} = {toml_value(value)}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"


def deepspeed_launcher(devices: int, per_node: int | None, config_path: str, script: str) -> str:
    """DeepSpeed's launcher line: the devices a node and the nodes when the machine says them, every
    node running as many (``--num_gpus`` is the launcher's devices on each node, deepspeed/launcher/
    runner.py): the most of a node's ``per_node`` that divide ``devices`` (12 on nodes of 8: 6 on
    each of 2 nodes), so they multiply to the plan's devices."""
    if per_node is None:
        gpus, nodes = '"$GPUS_PER_NODE"', '"$NNODES"'
    else:
        most = max(d for d in range(1, min(per_node, devices) + 1) if devices % d == 0)
        gpus, nodes = str(most), str(devices // most)
    return (f"deepspeed --num_gpus {gpus} --num_nodes {nodes} {script} --deepspeed "
            f"--deepspeed_config {shlex.quote(config_path)}")


def deepspeed_script(plan: Plan, plan_path: str, config: dict, source: str, launcher: str, config_path: str) -> str:
    """A shell script: the configuration written to ``config_path`` by a here-document, then the launcher."""
    lines = prediction_lines(plan, plan_path, source, "keys")
    lines.append("# train.py: your script (deepspeed.initialize with args.deepspeed_config); a multi-node run "
                 "also needs a hostfile")
    lines += [f"cat > {shlex.quote(config_path)} <<'EOF'", deepspeed_json(config).rstrip("\n"), "EOF", launcher]
    return "\n".join(lines) + "\n"


def deepspeed_json(config: dict) -> str:
    return json.dumps(config, indent=2) + "\n"


def batch_norm_line(batch_norm: str, out: str | None) -> None:
    """On stderr: how the script must take batch normalisation's statistics, which DeepSpeed's JSON
    cannot say, and how to predict the file back so (``predict --from`` takes ``sync`` unless told)."""
    file = out or "FILE"
    if batch_norm == "local":
        err.print(f"note: the plan's batch normalisation takes each rank's own statistics (nn.BatchNorm2d, unconverted "
                  f"in the script); read it back with `dnnplan predict --from {file} --batch-norm local`",
                  markup=False, emoji=False)
    else:
        err.print("note: the plan's batch normalisation syncs its statistics over the ranks: the script converts the "
                  "model with torch.nn.SyncBatchNorm.convert_sync_batchnorm", markup=False, emoji=False)


def framework_line(framework: str, out: str) -> None:
    """On stderr: the framework the plan was priced under, which a JSON file cannot name (a script's
    dnnplan line does), and how to read the file back under it."""
    err.print(
        f"note: the plan is priced under the {framework} framework, which the JSON cannot name; read it back with "
        f"`dnnplan predict --from {out} --framework {framework}`", markup=False, emoji=False)
