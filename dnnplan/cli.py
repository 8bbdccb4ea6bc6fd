"""The ``dnnplan`` command: the application, its error boundary, and every command on it.

Each command lives in its own module under :mod:`dnnplan.commands`; options are defined once in
:mod:`dnnplan.options`; what is drawn lives in :mod:`dnnplan.render`. The commands are named in
:data:`COMMANDS`, in the order `--help` lists them, and a command's module is imported only when
the command is run or a help lists it (:class:`Commands`): `dnnplan plan` loads the planner, not
the executor behind `execute` (a command's start-up counts against `dnnplan plan --time-limit`).
Each command's help is its docstring reflowed into paragraphs (:func:`reflow`:
typer's rich markup keeps a docstring's source line breaks after its first paragraph; this makes
each paragraph one line that rich wraps to the terminal; a paragraph starting with ``\\b``, click's
"do not rewrap" mark, is kept as written, and anything after a ``\\f`` line is dropped).

Every command runs inside :class:`Group.invoke`, which turns a :class:`DnnplanError`, and a mistake
on the command line itself (an unknown option: :mod:`dnnplan.usage_errors`), into one red line on
stderr and exit code 2, a failure of the system around the tool (a full disk, a read-only
folder, a lock held too long: :class:`networks.writing.SystemFailure` or an OSError) into one line
and :data:`EXIT_SYSTEM`, a stop signal into 128 + the signal (lifecycle.stops), and any other
exception into a one-line internal-error report (exit 1; ``DNNPLAN_DEBUG=1`` shows the
traceback). A traceback reaching a user is a bug.
"""

from __future__ import annotations

import errno
import functools
import importlib
import inspect
import os
import re
import stat
import sys
from collections.abc import Mapping

import typer
import typer.main
from typer._click import ClickException, Context  # typer >= 0.29 (pyproject) carries its own click
from typer.core import TyperGroup

from dnnplan.render.terminal.console import Console
from dnnplan.render.terminal.messages import fail_line
from dnnplan.search_bound import count_from_the_start
from dnnplan.usage_errors import one_line, usage_line
from lifecycle import stops
from networks.errors import DnnplanError
from networks.writing import EXIT_SYSTEM, SystemFailure, reason

_BLANK_LINES = re.compile(r"\n\s*\n")
#: The exit of a command whose reader left (`dnnplan ... | head`): a shell's 128 + SIGPIPE, as a
#: writer the signal ends reports it
EXIT_PIPE = 128 + 13

#: every command, in the order `--help` lists them: its name and the module and function behind it
COMMANDS: dict[str, tuple[str, str]] = {
    "info": ("dnnplan.commands.info", "info"),
    "networks": ("dnnplan.commands.networks", "networks"),
    "machines": ("dnnplan.commands.machines", "machines"),
    "predict": ("dnnplan.commands.predict", "predict"),
    "plan": ("dnnplan.commands.plan", "plan"),
    "export": ("dnnplan.commands.export", "export"),
    "profile": ("dnnplan.commands.profile", "profile"),
    "profile-comm": ("dnnplan.commands.profile_comm", "profile_comm"),
    "execute": ("dnnplan.commands.execute", "execute"),
    "validate": ("dnnplan.commands.validate", "validate"),
    "import": ("dnnplan.commands.import_", "import_"),  # `import` is a Python keyword
}


def reflow(doc: str | None) -> str:
    """``doc`` dedented, each paragraph joined onto one line, paragraphs separated by one blank line."""
    text = inspect.cleandoc(doc or "").partition("\f")[0]
    paragraphs = [p.strip("\n") for p in _BLANK_LINES.split(text) if p.strip()]
    return "\n\n".join(p if p.startswith("\b") else " ".join(line.strip() for line in p.splitlines())
                       for p in paragraphs)


def command_help(command) -> str:
    """A command's --help: its docstring, then its module's ``EXAMPLES`` where it has them (worked
    examples too long for the function itself), reflowed."""
    examples = getattr(sys.modules.get(command.__module__), "EXAMPLES", "")
    return reflow((command.__doc__ or "") + ("\n\n" + examples if examples else ""))


def command(name: str):
    """The click command ``name`` (of :data:`COMMANDS`), built from its function as the app would
    build it: its options from the function's signature, its help from :func:`command_help`."""
    module, function = COMMANDS[name]
    callback = getattr(importlib.import_module(module), function)
    one = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode="rich")
    one.command(name=name, help=command_help(callback))(callback)
    built = typer.main.get_command(one)
    built.format_help = help_to_a_reader_that_left(built.format_help)
    return built


def help_to_a_reader_that_left(format_help):
    """``format_help`` (a command's --help, printed as it is made) ending the command quietly with
    :data:`EXIT_PIPE` when the program reading it stops reading (`dnnplan --help | head -3`), as
    the commands' own output does (:class:`Group`), not with click's exit 1."""
    @functools.wraps(format_help)
    def printed(ctx, formatter):
        from typer import rich_utils  # noqa: PLC0415 - typer's help rendering: imported by --help alone
        rich_utils.Console = Console  # typer's help console: its broken pipe raised here, not exit 1
        try:
            return format_help(ctx, formatter)
        except BrokenPipeError:
            _stdout_to_devnull()
            raise typer.Exit(EXIT_PIPE) from None
    return printed


def _stdout_to_devnull() -> None:
    """Standard output to /dev/null, so that the interpreter's final flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


class Commands(Mapping):
    """The app's commands by name (:data:`COMMANDS`), each built (:func:`command`) the first time it
    is asked for: running one command imports its module alone."""

    def __init__(self) -> None:
        self._built: dict = {}

    def __getitem__(self, name: str):
        if name not in self._built:
            if name not in COMMANDS:
                raise KeyError(name)
            self._built[name] = command(name)
        return self._built[name]

    def __iter__(self):
        return iter(COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS)


#: the environment an MPI launcher gives each rank its number in (MPICH's Hydra and PMI, Open MPI,
#: PMIx; Slurm's srun inside a job step)
RANK_ENV = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")


def another_rank() -> bool:
    """Whether this process is a rank other than 0 of an MPI job (`mpiexec -n 2 dnnplan ...`): a
    mistake on the command line is the same on every rank, and rank 0 says it once."""
    ranks = [os.environ.get(v) for v in RANK_ENV]
    if os.environ.get("SLURM_STEP_ID") is not None:
        ranks.append(os.environ.get("SLURM_PROCID"))
    return any(r not in (None, "", "0") for r in ranks)


def user_mistake(line: str) -> None:
    """A user's mistake, on stderr once however many ranks run the command."""
    if not another_rank():
        fail_line(line)


class Group(TyperGroup):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.commands = Commands()

    def make_context(self, info_name, args, parent=None, **extra):  # `dnnplan --frobnicate`
        try:
            return super().make_context(info_name, args, parent, **extra)
        except ClickException as err:
            if not one_line(err):
                raise
            user_mistake(usage_line(err, list(args), tuple(COMMANDS)))
            raise typer.Exit(2) from None

    def invoke(self, ctx: Context):
        words = [*getattr(ctx, "_protected_args", ()), *ctx.args]  # the command's words, before click takes them
        try:
            return super().invoke(ctx)
        except ClickException as err:  # a command's unknown option, a value of the wrong type
            if not one_line(err):
                raise
            user_mistake(usage_line(err, words, tuple(COMMANDS)))
            raise typer.Exit(2) from None
        except DnnplanError as err:
            user_mistake(str(err))
            raise typer.Exit(2) from None
        except SystemFailure as err:
            fail_line(str(err))
            raise typer.Exit(EXIT_SYSTEM) from None
        except KeyboardInterrupt:
            fail_line(f"interrupted by {stops.name()}")
            raise typer.Exit(stops.exit_code()) from None
        except (typer.Exit, typer.Abort):
            raise
        except MemoryError:
            fail_line("out of memory: what was asked needs more memory than this computer has "
                      "(try a smaller --batch, --sizes or network)")
            raise typer.Exit(2) from None
        except BrokenPipeError:  # `dnnplan ... | head`: the reader left (dnnplan.render.terminal.console)
            _stdout_to_devnull()
            raise typer.Exit(EXIT_PIPE) from None
        except OSError as err:  # the system failed under a library call (a temporary folder on a full disk)
            if stops.stopped_by(err):  # a pipe a stop signal reset on the stop's way out (lifecycle.stops)
                fail_line(f"interrupted by {stops.name()}")
                raise typer.Exit(stops.exit_code()) from None
            if os.environ.get("DNNPLAN_DEBUG"):
                raise
            fail_line(refused_line(err))
            raise typer.Exit(EXIT_SYSTEM) from None
        except Exception as err:  # noqa: BLE001 - the boundary that keeps tracebacks from users
            if stops.stopped_by(err):  # a stop that landed inside an import (lifecycle.stops.stopped_by)
                fail_line(f"interrupted by {stops.name()}")
                raise typer.Exit(stops.exit_code()) from None
            if os.environ.get("DNNPLAN_DEBUG"):
                raise
            fail_line(f"internal error: {type(err).__name__}: {err} "
                      "(this is a dnnplan bug; rerun with DNNPLAN_DEBUG=1 for the traceback)")
            raise typer.Exit(1) from None

    def format_help(self, ctx, formatter):  # `dnnplan --help | head`, `dnnplan | head`
        return help_to_a_reader_that_left(super().format_help)(ctx, formatter)

    def list_commands(self, ctx):
        return list(self.commands)  # in the order of COMMANDS, not alphabetical


app = typer.Typer(
    cls=Group,
    name="dnnplan",
    help="Plan how to split each layer of a deep network across many devices, predict the training "
         "step time, and check the prediction by running the plan for real.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(shown: bool) -> None:
    """``dnnplan --version``: the installed package's version, then the command ends."""
    if shown:
        try:
            from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415 - only for --version
            number = version("dnnplan")
        except PackageNotFoundError:
            number = "unknown (not installed: run from a checkout)"
        print(f"dnnplan {number}")
        raise typer.Exit(0)


@app.callback()
def _group(shown: bool = typer.Option(False, "--version", help="Show the installed version and exit.",
                                      is_eager=True, callback=_version)) -> None:
    # the commands are Group's own (Commands); a callback makes typer build the app as a group
    pass


def _stdout_full(err: OSError) -> bool:
    """Whether a full disk without a file named (``dnnplan info NET > FILE`` on a full disk, or
    ``> /dev/full``) is this process's standard output's: a file on a file system with no block
    left, or the device /dev/full (major 1, minor 7 on Linux)."""
    if err.errno != errno.ENOSPC:
        return False
    try:
        out = os.fstat(sys.stdout.fileno())
        if stat.S_ISCHR(out.st_mode):
            return (os.major(out.st_rdev), os.minor(out.st_rdev)) == (1, 7)
        return stat.S_ISREG(out.st_mode) and os.fstatvfs(sys.stdout.fileno()).f_bavail == 0
    except (OSError, ValueError, AttributeError):
        return False


def refused_line(err: OSError) -> str:
    """The one line of a failure of the system under a call: the file it names, or standard output
    where that is the full one, and the system's reason."""
    where = f"{err.filename}: " if err.filename else "standard output: " if _stdout_full(err) else ""
    return f"{where}the system refused: {reason(err)}"


def main() -> None:
    """Console-script entry point: SIGTERM and SIGHUP stop a command as Ctrl-C does (lifecycle.stops)."""
    count_from_the_start()
    stops.install()
    try:
        app(prog_name="dnnplan")
    except OSError as err:  # the help or --version, printed before any command, to a full disk (> /dev/full)
        line = refused_line(err)  # before standard output is moved: it names the full one
        _stdout_to_devnull()
        fail_line(line)
        sys.exit(EXIT_SYSTEM)
    sys.exit(0)
