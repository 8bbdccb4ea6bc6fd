"""dnnplan networks: the spec format, graph IR, op catalogue and shipped zoo."""
