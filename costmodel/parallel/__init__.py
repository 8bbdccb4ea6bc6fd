"""How a layer is split: the parallel axes, strategies on the rank grid, layouts and a layer's shard (pure)."""
