"""Compile the translation catalogs: every `locale/<lang>/LC_MESSAGES/*.po` of the project and its apps to `.mo`.

`python -m portal.translations` (run by `make run` and `make test`, and by the test suite's start) uses
Babel, so a machine without GNU gettext's msgfmt can compile them. A catalog compiles only when its
`.po` is newer than its `.mo`. A broken catalog stops it with the file and line.
"""

from __future__ import annotations

import sys
from pathlib import Path

from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po

ROOT = Path(__file__).resolve().parent.parent


def catalogs(root: Path = ROOT) -> list[Path]:
    """The project's catalogs (under locale/, see settings.LOCALE_PATHS) and any app's own (<app>/locale/)."""
    found = sorted((root / "locale").glob("**/LC_MESSAGES/*.po"))
    found += sorted(root.glob("*/locale/*/LC_MESSAGES/*.po"))
    return found


def compile_catalog(po: Path) -> bool:
    """Write the `.mo` beside `po` if it is missing or older; True when it wrote one."""
    mo = po.with_suffix(".mo")
    if mo.exists() and mo.stat().st_mtime >= po.stat().st_mtime:
        return False
    with po.open("rb") as source:
        catalog = read_po(source, locale=po.parent.parent.name, abort_invalid=True)
    temporary = mo.with_suffix(".mo.tmp")
    with temporary.open("wb") as target:
        write_mo(target, catalog, use_fuzzy=False)
    temporary.replace(mo)
    return True


def compile_all(root: Path = ROOT) -> list[Path]:
    return [po for po in catalogs(root) if compile_catalog(po)]


def main() -> int:
    written = compile_all()
    print(f"translations: {len(written)} catalog(s) compiled, {len(catalogs()) - len(written)} up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
