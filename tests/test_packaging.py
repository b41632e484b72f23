"""keymem installs under one root package and ships its host files (the design card's layout)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata, resources
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
TOP_FOLDERS = ("deploy", "hooks", "protocol", "services", "store")
HOST_FILES = (
    "HOSTS.md",
    "claude-code/.mcp.json",
    "claude-code/.claude-plugin/plugin.json",
    "claude-code/hooks/hooks.json",
    "claude-code/skills/keymem/SKILL.md",
    "claude-desktop/claude_desktop_config.json",
    "codex/config.toml",
    "codex/hooks.json",
)


def _listed_packages() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return set(config["tool"]["setuptools"]["packages"])


def test_the_only_top_level_import_name_is_keymem() -> None:
    top_level = metadata.distribution("keymem").read_text("top_level.txt") or ""
    assert top_level.split() == ["keymem"]


def test_every_source_package_is_listed_for_the_wheel() -> None:
    """A subpackage left out of pyproject's list would be missing from an installed keymem."""
    on_disk = {
        "keymem." + ".".join(init.parent.relative_to(ROOT).parts)
        for folder in TOP_FOLDERS
        for init in (ROOT / folder).rglob("__init__.py")
    }
    assert _listed_packages() == on_disk


def test_an_installed_keymem_does_not_shadow_a_users_packages(tmp_path: Path) -> None:
    """From a folder of the user's own, ``services`` and ``hooks`` are theirs, not keymem's."""
    probe = (
        "import importlib.util, keymem.services.cli, keymem.hooks.prompt_submit\n"
        "print([n for n in ('services', 'hooks', 'protocol', 'store', 'deploy')"
        " if importlib.util.find_spec(n)])"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_host_files_ship_inside_the_package() -> None:
    hooks = resources.files("keymem.hooks")
    for name in HOST_FILES:
        assert hooks.joinpath(name).is_file(), name
    assert resources.files("keymem.deploy").joinpath("supervisord.conf.template").is_file()


@pytest.mark.slow
def test_a_wheel_built_from_the_tree_carries_the_host_files_and_the_license(
    tmp_path: Path,
) -> None:
    """What pipx, uv tool and uvx install: the tracked files built as a wheel (in a copy, so
    the build leaves nothing in the working tree)."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    source = tmp_path / "source"
    for name in filter(None, tracked.split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(source)],
        check=True,
        timeout=600,
    )
    (wheel,) = tmp_path.glob("keymem-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for host_file in HOST_FILES:
        assert f"keymem/hooks/{host_file}" in names, host_file
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    scripts = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "keymem = keymem.services.entry:keymem" in scripts
    assert "keymem-hook = keymem.services.entry:keymem_hook" in scripts
