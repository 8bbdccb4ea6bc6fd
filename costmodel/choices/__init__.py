"""How to train, as chosen by the user or the planner: precision, optimiser, batch norm, MoE dispatch (pure)."""
