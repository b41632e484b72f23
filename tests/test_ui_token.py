"""The front ends' token file (services/token_file.py): private, stable, one token per file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from keymem.services.token_file import read_or_create_token
from keymem.services.ui.access import TOKEN_FILE, load_or_create_token

STARTERS = 6  # processes creating the same token file at once


def test_the_token_is_created_private_and_then_kept(tmp_path: Path) -> None:
    token = load_or_create_token(tmp_path)
    path = tmp_path / TOKEN_FILE
    assert path.stat().st_mode & 0o777 == 0o600
    assert len(token) >= 32
    assert load_or_create_token(tmp_path) == token
    assert path.read_text().strip() == token


def test_a_token_other_users_could_read_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "token"
    old = read_or_create_token(path)
    path.chmod(0o644)
    new = read_or_create_token(path)
    assert new != old
    assert path.stat().st_mode & 0o777 == 0o600


def test_an_empty_token_file_gets_a_token(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("\n")
    path.chmod(0o600)
    assert read_or_create_token(path).strip()


def test_processes_starting_at_once_agree_on_one_token(tmp_path: Path) -> None:
    path = tmp_path / "token"
    program = (
        "import sys; from pathlib import Path\n"
        "from keymem.services.token_file import read_or_create_token\n"
        "print(read_or_create_token(Path(sys.argv[1])))"
    )
    starters = [
        subprocess.Popen(
            [sys.executable, "-c", program, str(path)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(STARTERS)
    ]
    tokens = {p.communicate(timeout=60)[0].strip() for p in starters}
    assert tokens == {path.read_text().strip()}
    assert [p.name for p in tmp_path.iterdir()] == ["token"]  # no staging file left behind
