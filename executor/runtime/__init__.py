"""A rank's training steps: building its stage of the plan, the step loop, weight sync (allreduce or
ZeRO), pipelines, synthetic data and the timers every piece of work runs under."""
