"""``python -m dnnplan``: the same as the ``dnnplan`` command."""

from dnnplan.entry import main

main()
