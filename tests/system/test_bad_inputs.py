"""Every bad input in tests/helpers/bad_inputs.py: one clear line, exit status 2, nothing the user had is changed.

The table in docs/reliability.md must show the line the program prints today.
"""

from __future__ import annotations

import pytest
from bad_inputs import CASES, messages, run_case, shown
from conftest import ROOT

DOC = ROOT / "docs" / "reliability.md"


def doc_row(name: str) -> str:
    rows = [line for line in DOC.read_text().splitlines() if line.startswith(f"| {name} |")]
    assert len(rows) == 1, f"docs/reliability.md has {len(rows)} rows for {name}"
    return rows[0]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_answered_in_one_line(tmp_path, case):
    directory = tmp_path.resolve()
    proc, before, after = run_case(case, directory)
    assert proc.returncode == case.exit_code, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in messages(proc.stderr) if ": error: " in line]
    assert len(errors) == 1, proc.stderr  # once, not once per rank
    assert case.expect in errors[0], errors[0]
    if case.warning:
        assert case.warning in proc.stderr
    assert after == before, "the failed command changed the user's files"
    assert shown(errors[0], directory) in doc_row(case.name), "docs/reliability.md shows another message"
