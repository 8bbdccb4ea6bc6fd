"""dnnplan's command line: one module per command, each option defined once, rendering.

The commands call library functions (networks, costmodel, profiler, planner, executor) that return
results and never print; everything a user sees is drawn here (docs/architecture.md).
"""

import time as _time

#: when the command line began loading (its first import): `dnnplan plan --time-limit` counts from
#: here, so the time Python takes to import the planner counts too (dnnplan.search_bound)
STARTED = _time.perf_counter()
