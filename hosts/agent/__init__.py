"""The Starverse node agent: enrolls a compute host, long-polls the platform, runs training ranks.

Runs on compute hosts, so it imports no Django (and torch only to look for CUDA GPUs). It shares
nothing with the platform but the wire shapes in `kernel/protocol.py`.
"""

AGENT_VERSION = "0.1.0"
