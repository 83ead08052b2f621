"""The deletion engine and what it stands on: transactions, pacing, durability, files, outbox, locks."""
