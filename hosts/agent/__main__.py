"""`python -m hosts.agent`: see hosts/agent/cli.py."""

import os
import sys

from hosts.agent.cli import main
from kernel.priority import carry_nice_to_session

# Checkpoints, rank folders and logs that this agent and its training ranks write are private to
# the user it runs as (files 0600, folders 0700): they hold the users' models and data.
os.umask(0o077)
carry_nice_to_session()  # a niced demo fleet yields the CPU to the web tier (kernel/priority.py)
sys.exit(main())
