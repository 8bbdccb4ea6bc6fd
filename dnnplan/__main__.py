"""``python -m dnnplan``: the same as the ``dnnplan`` command."""

from dnnplan.cli import main

main()
