"""hermes-admin: maintenance for Hermes Agent session stores, across every profile."""

__version__ = "0.1.0"
