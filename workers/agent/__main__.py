"""`python -m workers.agent`: see workers/agent/cli.py."""

import sys

from workers.agent.cli import main

sys.exit(main())
