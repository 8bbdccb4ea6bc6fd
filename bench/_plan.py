import time, sys
from networks.loader import load_network
from costmodel.files import load_machine, DEFAULT_MACHINE
from costmodel.compute import Roofline
from planner.optimize import make_plan, Settings
m = load_machine(DEFAULT_MACHINE); c = Roofline(m)
name, p = sys.argv[1], int(sys.argv[2])
meth = sys.argv[3] if len(sys.argv) > 3 else "auto"
net = load_network(name)
t=time.perf_counter()
plan = make_plan(net, name, 32*p, p, m, c, settings=Settings(method=meth))
print(time.perf_counter()-t, plan.step_s, plan.memory_peak_bytes/2**30, [(b.name, b.step_s) for b in plan.baselines])
print({k:v for k,v in plan.solver.items() if k!="detail"})
print(plan.solver["detail"])
