"""dnnplan planner: the planning problem built from the cost model (``build``), its exact solvers
(``solvers``: graph reduction, ILP), the optimal plan and its baselines (``optimize``), plans and
plan files (``plan``, ``plan_file``), device-count sweeps (``sweep``), re-timed weighing
(``refreshed``) and plans exported as a framework's launch arguments (``export``). Nothing here
prints or runs kernels; the command line lives in ``dnnplan``."""
