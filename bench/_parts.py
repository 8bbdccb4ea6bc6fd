import time, sys
from networks.loader import load_network
from costmodel.files import load_machine, DEFAULT_MACHINE
from costmodel.compute import Roofline
import planner.build as pb
m = load_machine(DEFAULT_MACHINE); c = Roofline(m)
name, p = sys.argv[1], int(sys.argv[2])
net = load_network(name)
T={}
def wrap(obj, attr, key):
    orig = getattr(obj, attr)
    def f(*a, **k):
        t=time.perf_counter(); r=orig(*a, **k); T[key]=T.get(key,0)+time.perf_counter()-t; return r
    setattr(obj, attr, f)
wrap(pb._Builder, "estimates", "est"); wrap(pb, "_times", "times"); wrap(pb._Builder, "strategies", "cand")
t=time.perf_counter()
b = pb.build_problem(net, 32*p, p, m, c, None)
print("build", time.perf_counter()-t, T, b.reshard_pairs, sum(b.problem.sizes))
from planner.solvers import solve, prune_dominated
t=time.perf_counter(); pr, kept = prune_dominated(b.restrict(b.fastest)); print("prune", time.perf_counter()-t, sum(pr.sizes))
t=time.perf_counter(); a = solve(pr); print("solve", time.perf_counter()-t, a.objective, a.detail[:200])
