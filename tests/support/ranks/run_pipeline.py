"""Run a pipelined plan on the ranks of COMM_WORLD with the check and print one JSON line (rank 0).

    mpiexec -n 4 python -m tests.support.ranks.run_pipeline PLAN [--no-tied-sum]

``--no-tied-sum`` leaves out the sum of the tied table's gradients between its two stages (a
broken run the check must catch)."""

from __future__ import annotations

import json
import sys

from mpi4py import MPI

from executor.runtime.pipeline_tied import TiedPair
from executor.runtime.run import run_plan
from planner.plan.plan_file import read_plan


def main(argv: list[str]) -> int:
    if "--no-tied-sum" in argv:
        TiedPair.sum_pair = lambda self, total: None
    plan, net = read_plan(argv[0])
    res = run_plan(plan, net, MPI.COMM_WORLD, steps=1, warmup=0, check=True, seed=3, measure_memory=False)
    if MPI.COMM_WORLD.Get_rank() == 0:
        c = res.check
        print(json.dumps({"passed": c.passed, "worst_rel_error": c.worst_rel_error, "worst_tensor": c.worst_tensor,
                          "losses": res.losses}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
