"""The click CLI: wiring only; the work happens in the modules it calls."""
