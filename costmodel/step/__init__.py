"""A whole training step: the prediction, pipelines, the breakdown into terms, the step's collectives (pure)."""
