"""`python -m portal.local run|stores` (see launcher.py)."""

from __future__ import annotations

import sys

from portal.local.launcher import main

if __name__ == "__main__":
    sys.exit(main())
