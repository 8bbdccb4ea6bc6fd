"""The kernel calls a layer's shard makes per pass, and the kernel algorithms a layer can run (pure)."""
