"""The ``dnnplan`` command: every command registered on the app, in the order `--help` lists them.

Each command lives in its own module under :mod:`dnnplan.commands`; options are defined once in
:mod:`dnnplan.options`; what is drawn lives in :mod:`dnnplan.render`.
"""

from __future__ import annotations

import sys

from dnnplan.app import app
from dnnplan.commands.execute import execute
from dnnplan.commands.info import info
from dnnplan.commands.machines import machines
from dnnplan.commands.networks import networks
from dnnplan.commands.plan import plan
from dnnplan.commands.predict import predict
from dnnplan.commands.profile import profile
from dnnplan.commands.profile_comm import profile_comm
from dnnplan.commands.validate import validate

for command in (info, networks, machines, predict, plan, profile):
    app.command()(command)
app.command("profile-comm")(profile_comm)
app.command()(execute)
app.command()(validate)


def main() -> None:
    """Console-script entry point."""
    app(prog_name="dnnplan")
    sys.exit(0)
