"""Suite-wide settings: property tests judge behaviour, never the speed of a shared machine."""

from __future__ import annotations

from hypothesis import settings

settings.register_profile("society", deadline=None)
settings.load_profile("society")
