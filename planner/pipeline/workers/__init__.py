"""The pipeline search's pieces computed in worker processes (``dnnplan plan --jobs N``): the pairs'
bounds side by side, and their searches ahead of their turn (pure)."""
