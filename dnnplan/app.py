"""The typer application object and its error boundary.

Every command runs inside :class:`Group.invoke`, which turns a :class:`DnnplanError` into one red
line on stderr and exit code 2, a failure of the system around the tool (a full disk, a read-only
folder, a lock held too long: :class:`networks.writing.SystemFailure` or an OSError) into one line
and :data:`EXIT_SYSTEM`, a stop signal into 128 + the signal (profiler.stops), and any other
exception into a one-line internal-error report (exit 1; ``DNNPLAN_DEBUG=1`` shows the
traceback). A traceback reaching a user is a bug.
"""

from __future__ import annotations

import os
import sys

import typer
from typer._click import ClickException, Context  # typer >= 0.29 (pyproject) carries its own click
from typer.core import TyperGroup

from dnnplan.render.messages import fail_line
from networks.errors import DnnplanError
from networks.writing import EXIT_SYSTEM, SystemFailure, reason
from profiler import stops


class Group(TyperGroup):
    def invoke(self, ctx: Context):
        try:
            return super().invoke(ctx)
        except DnnplanError as err:
            fail_line(str(err))
            raise typer.Exit(2) from None
        except SystemFailure as err:
            fail_line(str(err))
            raise typer.Exit(EXIT_SYSTEM) from None
        except KeyboardInterrupt:
            fail_line(f"interrupted by {stops.name()}")
            raise typer.Exit(stops.exit_code()) from None
        except (typer.Exit, typer.Abort, ClickException):
            raise
        except MemoryError:
            fail_line("out of memory: what was asked needs more memory than this computer has "
                      "(try a smaller --batch, --sizes or network)")
            raise typer.Exit(2) from None
        except BrokenPipeError:  # `dnnplan ... | head`: the reader left; not an error
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush cannot fail again
            raise typer.Exit(0) from None
        except OSError as err:  # the system failed under a library call (a temporary folder on a full disk)
            if os.environ.get("DNNPLAN_DEBUG"):
                raise
            where = f"{err.filename}: " if err.filename else ""
            fail_line(f"{where}the system refused: {reason(err)}")
            raise typer.Exit(EXIT_SYSTEM) from None
        except Exception as err:  # noqa: BLE001 - the boundary that keeps tracebacks from users
            if os.environ.get("DNNPLAN_DEBUG"):
                raise
            fail_line(f"internal error: {type(err).__name__}: {err} "
                      "(this is a dnnplan bug; rerun with DNNPLAN_DEBUG=1 for the traceback)")
            raise typer.Exit(1) from None

    def list_commands(self, ctx):
        return list(self.commands)  # in the order they were registered (dnnplan.cli), not alphabetical


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
