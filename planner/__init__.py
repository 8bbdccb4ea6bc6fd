"""dnnplan planner: strategy space, graph reduction, ILP, plan files and the CLI."""
