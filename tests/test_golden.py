"""The golden command-log cases (scripts/make_golden.py): every case replays to its committed digest.

The digest file's own hash is pinned here, so a change to it is a deliberate edit of this test too: regenerate
the digests only at a commit whose command logs are known right, in a commit that changes nothing else.
"""

import hashlib
import json

import pytest

from scripts.make_golden import DIGESTS, cases, digest, golden_text, replay_case

pytestmark = pytest.mark.component

GOLDEN_SHA256 = "b33fe95db3ad63fddfe4c35c4365cf16b096553ec2bf5079896622bd2a940179"

CASES = cases()


def test_the_golden_file_is_the_pinned_one():
    assert hashlib.sha256(DIGESTS.read_bytes()).hexdigest() == GOLDEN_SHA256


def test_the_golden_file_lists_exactly_the_cases():
    stored = json.loads(DIGESTS.read_text())
    assert stored["schema"] == "archsim.golden/1"
    assert sorted(stored["cases"]) == sorted(case.name for case in CASES)
    assert golden_text(stored["cases"]) == DIGESTS.read_text()  # canonical form, so the hash means the content
    assert len(CASES) == len({case.name for case in CASES})


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_case_replays_to_its_golden_digest(case):
    stored = json.loads(DIGESTS.read_text())["cases"][case.name]
    assert digest(replay_case(case)) == stored
