"""Suite-wide settings: property tests judge behaviour, never the speed of a shared machine."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("society", deadline=None)
settings.load_profile("society")

# No test installs the local model or OpenClaw: a `society run` whose roster needs a missing one
# fails at once, naming the install command (scripts/test.sh installs both beforehand).
os.environ.setdefault("SOCIETY_NO_INSTALL", "1")
