"""docs/isa.md is generated from isa/opcodes.yaml and must be up to date."""

from __future__ import annotations

import subprocess
import sys

import pytest

from archsim.isa import load_table
from archsim.isa.doc import render_isa_markdown
from tests.conftest import REPO

pytestmark = pytest.mark.unit


def test_isa_doc_is_up_to_date() -> None:
    expected = render_isa_markdown()
    actual = (REPO / "docs" / "isa.md").read_text()
    assert actual == expected, "docs/isa.md is stale: run `python scripts/gen_isa_doc.py`"


def test_doc_lists_every_opcode_with_unit_and_latency() -> None:
    text = render_isa_markdown()
    for op in load_table().opcodes:
        assert f"| `{op.mnemonic}` | 0x{op.code:02X} | {op.group} | {op.unit} | {op.latency} |" in text


def test_generator_check_mode() -> None:
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_isa_doc.py"), "--check"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
