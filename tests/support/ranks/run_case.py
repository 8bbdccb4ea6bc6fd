"""Run executor test cases on the ranks of COMM_WORLD and print one JSON line per case (rank 0).

    mpiexec -n 4 python -m tests.support.ranks.run_case lenet5:8:data tinyres:4:mixed:winograd
"""

from __future__ import annotations

import json
import sys
import traceback

from mpi4py import MPI

from executor.launch.abort import abort
from executor.runtime.run import run_plan

from tests.support.cases import load, make_plan, parse_case


def main(argv: list[str]) -> int:
    comm = MPI.COMM_WORLD
    status = 0
    for text in argv:
        net_name, batch, family, algo = parse_case(text)
        out = {"case": text, "ranks": comm.Get_size()}
        try:
            net = load(net_name)
            plan = make_plan(net, batch, comm.Get_size(), family, algo)
            out["strategies"] = {lp.name: lp.strategy.label for lp in plan.layers}
            res = run_plan(plan, net, comm, steps=2, warmup=0, check=True, seed=3)
            c = res.check
            out.update(passed=c.passed, worst_rel_error=c.worst_rel_error, worst_tensor=c.worst_tensor,
                       loss_rel_error=c.loss_rel_error, tolerance=c.tolerance, losses=res.losses)
        except Exception:  # report and abort: a failed collective would hang the others
            sys.stderr.write(f"rank {comm.Get_rank()} case {text}: {traceback.format_exc()}\n")
            sys.stderr.flush()
            abort(comm, 3)
            return 3  # not reached
        if comm.Get_rank() == 0:
            print(json.dumps(out), flush=True)
        status |= 0 if out["passed"] else 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
