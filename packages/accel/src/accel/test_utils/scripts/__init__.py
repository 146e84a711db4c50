"""Scripts `accel test` launches (run as files, not imported)."""
