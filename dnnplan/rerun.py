"""A command as the shell line that runs it again: what the message of a stopped command prints
as the command that resumes it (profile, validate) or repeats it (execute)."""

from __future__ import annotations

import shlex

import typer


def command_line(cli: typer.Context) -> str:
    """This command as a shell line: ``dnnplan``, the command, its arguments and the options that
    differ from their defaults (run again, a profile or a validate resumes)."""
    words = ["dnnplan", cli.info_name or "dnnplan"]
    for param in cli.command.params:
        value = cli.params.get(param.name)
        if param.param_type_name == "argument":
            if value is not None:  # a network left out (--quick)
                words.append(str(value))
        elif value is None or value == param.default:
            continue
        elif getattr(param, "is_flag", False):
            words.append(param.opts[0] if value else (param.secondary_opts or param.opts)[0])
        else:
            words += [param.opts[0], str(value)]
    return shlex.join(words)
