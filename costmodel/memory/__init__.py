"""What a device holds at its busiest: held inputs, recomputation, a pipeline's activations in flight (pure)."""
