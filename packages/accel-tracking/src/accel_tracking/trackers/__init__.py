"""The built-in trackers, one module per backend; each imports its SDK only in ``start``."""
