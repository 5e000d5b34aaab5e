"""The transition tables and diagrams of docs/ARCHITECTURE.md, read as (function, source, target) sets,
so that the lifecycle walks (test_job_lifecycle_walk, test_node_lifecycle_walk) and the document can't
drift apart."""

from __future__ import annotations

import re
from pathlib import Path

ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "ARCHITECTURE.md"
NEW = "[*]"  # a row that doesn't exist yet, as the diagrams write it
UNCHANGED = "unchanged"  # a table's target: each source status stays itself

Transition = tuple[str, str, str]  # (lifecycle function, source status, target status)


def section(heading: str, path: Path = ARCHITECTURE) -> str:
    """From a heading line (`## 3. A job's life`, `### A node's life`) to the next heading of any level."""
    text = path.read_text()
    start = text.index(f"\n{heading}\n")
    following = re.compile(r"\n#+ ").search(text, start + 1)
    return text[start : following.start() if following else len(text)]


def table_transitions(text: str) -> set[Transition]:
    """The rows of the first `| transition | function | called by |` table, each `sources → targets |
    function` row spelled out: every source to every target, by the row's first named function."""
    lines = text.splitlines()
    header = lines.index("| transition | function | called by |")
    transitions = set()
    for line in lines[header + 2 :]:
        if not line.startswith("|"):
            break
        arrow, function_cell = (cell.strip() for cell in line.strip("|").split("|")[:2])
        sources, targets = arrow.split("→")
        function = re.match(r"`(\w+)`", function_cell).group(1)
        transitions |= {
            (function, source, source if target == UNCHANGED else target)
            for source in _statuses(sources)
            for target in _statuses(targets)
        }
    return transitions


def diagram_transitions(text: str) -> set[Transition]:
    """The labelled arrows of the first state diagram (`a --> b: f / g (why)`), each function its own."""
    diagram = text[text.index("```mermaid") : text.index("```", text.index("```mermaid") + 3)]
    transitions = set()
    for source, target, label in re.findall(r"^\s*(\S+) --> (\S+): (.+)$", diagram, re.MULTILINE):
        for function in re.sub(r"\([^)]*\)", "", label).split("/"):
            transitions.add((function.strip(), source, target))
    return transitions


def _statuses(cell: str) -> list[str]:
    return [status.strip() for status in cell.split(",")] if cell.strip() else [NEW]
