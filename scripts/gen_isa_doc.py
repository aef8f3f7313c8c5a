#!/usr/bin/env python3
"""Regenerate docs/isa.md from isa/opcodes.yaml.

    python scripts/gen_isa_doc.py          # write docs/isa.md
    python scripts/gen_isa_doc.py --check  # exit 1 if docs/isa.md is out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run from a checkout without installing the package
    sys.path.insert(0, str(REPO))

from archsim.isa.doc import render_isa_markdown  # noqa: E402
from archsim.isa.program import atomic_write_bytes  # noqa: E402

DOC_PATH = REPO / "docs" / "isa.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if out of date")
    args = parser.parse_args(argv)
    text = render_isa_markdown()
    current = DOC_PATH.read_text() if DOC_PATH.exists() else None
    if args.check:
        if current != text:
            print(f"{DOC_PATH} is out of date; run scripts/gen_isa_doc.py", file=sys.stderr)
            return 1
        return 0
    if current != text:
        atomic_write_bytes(DOC_PATH, text.encode())
        print(f"wrote {DOC_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
