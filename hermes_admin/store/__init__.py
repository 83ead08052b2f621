"""Access to a profile's `state.db`: connections, schema introspection, reads."""

from hermes_admin.store.errors import StoreError
from hermes_admin.store.open import Store

__all__ = ["Store", "StoreError"]
