"""How frameworks lay out a network: uniform strategies, Megatron-LM's splits, DeepSpeed's ZeRO-3 step (pure)."""
