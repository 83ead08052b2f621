"""The side that runs as a home's owner: everything that reads or changes a profile.

Policy, the store, the pure task selectors (`tasks/`), the deletion engine
(`engine/`), the plugin bus (`hooks/`), repair and the profile's report. When
hermes-admin runs as root over another user's home, this code runs only in a
worker that has irrevocably become that user (`worker.py`).
"""
