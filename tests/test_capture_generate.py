"""Capture through transformers' generate: beam search's cache reorders and assisted decoding's verification
chunks and crops, as the logical trace records them; bad decoding options."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from archsim.cli import main
from archsim.trace.logical import KIND_K, OP_READ, OP_WRITE, PHASE_PREFILL, LogicalTrace

pytestmark = [pytest.mark.component, pytest.mark.slow]  # builds and runs real torch models


def _capture(tmp_path: Path, name: str, *args: str) -> LogicalTrace:
    out = tmp_path / name
    result = CliRunner().invoke(main, ["capture", "--model", "tiny-llama", "-o", str(out), "--prompt-tokens", "16",
                                       *args])
    assert result.exit_code == 0, result.output
    return LogicalTrace(out)


def _k(columns: dict[str, np.ndarray], step: int, op: int) -> dict[str, np.ndarray]:
    """Layer 0's K records of one step and op."""
    m = (columns["kind"] == KIND_K) & (columns["layer"] == 0) & (columns["step"] == step) & (columns["op"] == op)
    return {name: values[m] for name, values in columns.items()}


def test_beam_search_records_every_beam_and_the_copies_of_its_reorders(tmp_path):
    trace = _capture(tmp_path, "beam.npz", "--decoding", "beam", "--beams", "3", "--decode-steps", "6")
    c = trace.read()
    assert trace.header["options"]["decoding"] == "beam" and trace.steps == 6
    assert sorted(np.unique(c["request"][c["request"] >= 0]).tolist()) == [0, 1, 2]
    copies = 0
    for step in range(1, trace.steps):
        writes, reads = _k(c, step, OP_WRITE), _k(c, step, OP_READ)
        cached = 16 + step - 1
        appended = writes["token_count"] == 1
        assert sorted(writes["request"][appended].tolist()) == [0, 1, 2]  # one new token per beam
        assert (writes["token_start"][appended] == cached).all()
        # a beam continuing another copies its whole cache: read from the source, written to the beam
        copied = ~appended
        assert (writes["token_start"][copied] == 0).all() and (writes["token_count"][copied] == cached).all()
        assert np.count_nonzero(reads["token_count"] == cached) == np.count_nonzero(copied)
        copies += int(np.count_nonzero(copied))
    assert copies > 0  # the beams did diverge and merge


def test_assisted_decoding_records_verification_chunks_and_the_rejected_tokens_cropped(tmp_path):
    trace = _capture(tmp_path, "assisted.npz", "--decoding", "assisted", "--assistant", "tiny-llama",
                     "--draft-tokens", "3", "--decode-steps", "12", "--seed", "2")
    c = trace.read()
    assert trace.header["options"]["decoding"] == "assisted"
    assert trace.header["options"]["assistant"] == "tiny-llama" and trace.header["options"]["draft_tokens"] == 3
    end = 0
    chunks = []
    for step in range(trace.steps):
        writes = _k(c, step, OP_WRITE)
        assert len(writes["token_start"]) == 1
        start, count = int(writes["token_start"][0]), int(writes["token_count"][0])
        assert start <= end  # what was rejected was cropped: a step writes over it again
        reads = _k(c, step, OP_READ)
        assert int(reads["token_start"][0]) == 0 and int(reads["token_count"][0]) == start + count
        end = start + count
        if c["phase"][c["step"] == step][0] != PHASE_PREFILL:
            chunks.append(count)
    assert max(chunks) == 4  # the last token and the 3 drafted ones, verified in one pass


@pytest.mark.parametrize(("args", "words"), [
    (["--decoding", "beam", "--beams", "1"], "--beams: must be >= 2"),
    (["--decoding", "assisted"], "--assistant: assisted decoding needs a draft model"),
    (["--decoding", "assisted", "--assistant", "tiny-llama", "--draft-tokens", "0"], "--draft-tokens: must be >= 1"),
    (["--decoding", "beam", "--turns", "2"], "--turns: must be 1 with decoding beam"),
    (["--decoding", "beam", "--device", "meta"], "--device: must be cpu with decoding beam"),
    (["--decoding", "beam", "--decode-steps", "0"], "--decode-steps: must be >= 1"),
])
def test_bad_decoding_options_are_one_line_and_leave_no_file(tmp_path, args, words):
    out = tmp_path / "bad.npz"
    result = CliRunner().invoke(main, ["capture", "--model", "tiny-llama", "-o", str(out), *args])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], lines
    assert not out.exists()
