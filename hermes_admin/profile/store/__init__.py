"""Access to a profile's `state.db`: connections, schema introspection, reads."""

from hermes_admin.profile.store.errors import StoreError
from hermes_admin.profile.store.open import Store

__all__ = ["Store", "StoreError"]
