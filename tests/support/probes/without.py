"""Run a script as if some distributions were not installed: `python without.py DIST[,DIST...] SCRIPT [ARGS...]`.

A finder put in place of the path finder on sys.meta_path hides the distributions' top-level
modules and their metadata: `import torch` raises ModuleNotFoundError, importlib.util.find_spec
answers None and importlib.metadata finds no version, which is how a host without them looks to
the code and to libraries that check for optional packages (transformers checks for torch so).
The script then runs as __main__; at exit, one stderr line `HIDDEN-IMPORTS: [...]` names the
hidden modules something asked for.
"""

from __future__ import annotations

import atexit
import importlib.machinery
import importlib.metadata
import json
import re
import runpy
import sys


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def modules_of(distributions: set[str]) -> set[str]:
    """The top-level modules that only these installed distributions provide."""
    return {
        module
        for module, providers in importlib.metadata.packages_distributions().items()
        if providers and {normalized(provider) for provider in providers} <= distributions
    }


class Hiding:
    """The path finder, minus some distributions: their modules and their metadata."""

    def __init__(self, inner, distributions: set[str]):
        self.inner, self.distributions = inner, distributions
        self.modules, self.asked = modules_of(distributions), set()

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.modules:
            self.asked.add(name)
            return None
        return self.inner.find_spec(name, path, target)

    def find_distributions(self, *args, **kwargs):
        for distribution in self.inner.find_distributions(*args, **kwargs):
            if normalized(distribution.metadata["Name"] or "") not in self.distributions:
                yield distribution

    def invalidate_caches(self):
        self.inner.invalidate_caches()


def main() -> None:
    distributions = {normalized(name) for name in sys.argv[1].split(",") if name}
    hiding = Hiding(importlib.machinery.PathFinder, distributions)
    sys.meta_path[:] = [hiding if finder is importlib.machinery.PathFinder else finder for finder in sys.meta_path]
    atexit.register(lambda: print("HIDDEN-IMPORTS:", json.dumps(sorted(hiding.asked)), file=sys.stderr))
    script = sys.argv[2]
    sys.argv = sys.argv[2:]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
