import time, sys
from networks.loader import load_network
from costmodel.files import load_machine, DEFAULT_MACHINE
from costmodel.compute import Roofline
from planner.build import build_problem
m = load_machine(DEFAULT_MACHINE); c = Roofline(m)
name, p = sys.argv[1], int(sys.argv[2])
net = load_network(name)
t=time.perf_counter()
b = build_problem(net, 32*p, p, m, c, m.device.mem_capacity_bytes)
print("build", time.perf_counter()-t, b.distinct_layers, b.distinct_edges, b.reshard_pairs, sum(b.problem.sizes))
