"""Serving engines on a compute host (issue #32, docs/SERVING.md "Engines on a host").

A replica of a deployment is one engine serving one model over an OpenAI-compatible API: vLLM on CUDA
hosts, transformers' own server (`transformers serve`) on CPU and simulated hosts. `EngineProcess`
(process.py) stages and prepares the model (prepare.py), starts the engine's command line (engines.py)
in a process group of its own, health-checks and stops it. The contract is kernel/serving.py.
"""
