"""Actions: one module per command family; each selects, then hands units to the engine."""
