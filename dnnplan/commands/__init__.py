"""One module per command; :mod:`dnnplan.cli` registers them on the app in the order of `--help`."""
