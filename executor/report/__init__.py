"""Predicted against measured: gathering the ranks' timers, comparing them with the prediction per
layer, phase and stage, traces, and the numbers a validate is judged by."""
