"""Accelerate's ``accelerate.commands`` path: re-export modules of the `accel` CLI's verbs."""
