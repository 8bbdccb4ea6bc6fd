"""Compute time of a kernel call or a layer's pass: the datasheet roofline, profile tables, calibration (pure)."""
