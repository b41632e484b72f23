"""The README's two set-up commands are the ones CI runs and the ones users copy."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _shell_blocks(text: str) -> list[str]:
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", text, re.S)]


def test_the_first_screen_has_the_run_and_test_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    first_screen = "\n".join(readme.splitlines()[:25])
    run, test = _shell_blocks(first_screen)[:2]
    assert "keymem demo" in run and "pip install ." in run
    assert test.endswith(".venv/bin/pytest") and "'.[dev]'" in test


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    readme = (ROOT / "README.md").read_text()
    test_command = _shell_blocks(readme)[1]
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in ci_lines
    assert "set -euo pipefail" in ci_lines
