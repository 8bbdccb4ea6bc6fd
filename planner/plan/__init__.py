"""A plan: per layer a strategy and an algorithm with its prediction, the plan file that holds it, and its layout by parallel axis (pure)."""
