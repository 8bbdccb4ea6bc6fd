"""One planning problem: built from the cost model, solved exactly by the solvers, mapped back to a plan beside its baselines (pure)."""
