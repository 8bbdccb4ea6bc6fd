"""One layer under one strategy: its cost and memory, the edges between layers, the candidates weighed (pure)."""
