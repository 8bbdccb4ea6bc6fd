"""The ``dnnplan`` command: every command registered on the app, in the order `--help` lists them.

Each command lives in its own module under :mod:`dnnplan.commands`; options are defined once in
:mod:`dnnplan.options`; what is drawn lives in :mod:`dnnplan.render`. Each command's help is its
docstring reflowed into paragraphs (:func:`dnnplan.helptext.reflow`), so it wraps to the terminal.
"""

from __future__ import annotations

import sys

from dnnplan.app import app
from dnnplan.commands.execute import execute
from dnnplan.commands.import_ import import_
from dnnplan.commands.info import info
from dnnplan.commands.machines import machines
from dnnplan.commands.networks import networks
from dnnplan.commands.plan import plan
from dnnplan.commands.predict import predict
from dnnplan.commands.profile import profile
from dnnplan.commands.profile_comm import profile_comm
from dnnplan.commands.validate import validate
from dnnplan.helptext import command_help, reflow
from dnnplan.search_bound import count_from_the_start
from profiler import stops

for command in (info, networks, machines, predict, plan, profile, profile_comm, execute, validate):
    app.command(help=command_help(command))(command)  # named after the function: profile_comm -> profile-comm
app.command(name="import", help=reflow(import_.__doc__))(import_)  # `import` is a Python keyword


def main() -> None:
    """Console-script entry point: SIGTERM and SIGHUP stop a command as Ctrl-C does (profiler.stops)."""
    count_from_the_start()
    stops.install()
    app(prog_name="dnnplan")
    sys.exit(0)
