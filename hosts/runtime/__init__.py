"""The training runtime: one process per rank, started by a node agent.

`python -m hosts.runtime --config launch.json` with the torch.distributed environment
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT). See `kernel/protocol.py` for the
launch file and the JSON-lines events a rank prints.

This package imports no Django, and nothing heavy here. `datasets` (the platform validates
uploads with it), `control`, `pacing`, `events` and `local` need no torch; the rest need torch,
and DeepSpeed is imported only when an engine is built or a checkpoint converted.

Modules: `train` (the loop), `engine` (process group, DeepSpeed config), `model` (the Llama
decoder), `data`/`datasets` (corpora), `checkpoint`/`universal` (save, resume anywhere),
`control` (control.json), `pacing` (simulated chips), `events` (stdout JSON lines), `local`
(start a job's ranks on this host, for tests and benchmarks).
"""
