"""Record what the planner answers on the identity instances into golden_plans.json.

    .venv/bin/python tests/support/planner/make_golden.py

Run it only when a change is *meant* to change plans (and say so in the change): the file pins the
plans the planner made before its per-offer work was reorganised for 100,000-chip fleets, so
test_plan_identity.py fails if any plan, node choice, price or estimate moves. Floats are pinned as
repr shows them, so a Python whose arithmetic differs (3.12's compensated `sum`) needs a new recording
from the commit before the change, not from a later one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from kernel.planner import plan  # noqa: E402
from tests.support.planner.identity_instances import SIZES, answer, instances  # noqa: E402

GOLDEN = HERE / "golden_plans.json"


def main() -> None:
    golden = {case.name: answer(plan, case) for size in SIZES for case in instances(size)}
    GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
    errors = sum("error" in answer_ for answer_ in golden.values())
    print(f"wrote {len(golden)} answers ({errors} planning errors) to {GOLDEN.name}")


if __name__ == "__main__":
    main()
