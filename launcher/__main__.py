"""`python -m launcher run|stores` (see launcher.py)."""

from __future__ import annotations

import sys

from launcher.platform import main

if __name__ == "__main__":
    sys.exit(main())
