"""dnnplan's command line: one module per command, each option defined once, rendering.

The commands call library functions (networks, costmodel, profiler, planner, executor) that return
results and never print; everything a user sees is drawn here (docs/architecture.md).
"""
