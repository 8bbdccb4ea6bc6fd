"""The pipeline search's pieces computed in worker processes (``dnnplan plan --jobs N``): the pairs'
bounds side by side, their searches ahead of their turn, and the next ZeRO stages' bounds ahead of
their search (pure)."""
