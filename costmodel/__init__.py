"""dnnplan cost model: machines, compute, communication, layouts, memory (pure)."""
