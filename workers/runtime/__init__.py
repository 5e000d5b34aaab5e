"""The training runtime: one process per rank, started by a node agent.

`python -m workers.runtime --config launch.json` with the torch.distributed environment
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT). See `workers/protocol.py` for the
launch file and the JSON-lines events a rank prints.

This package imports no Django. Only `datasets` is safe to import without torch (the platform
validates uploads with it); every other module needs torch, and `engine`/`train`/`checkpoint`
need DeepSpeed, so nothing heavy is imported here.
"""
