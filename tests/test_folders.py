"""tokengen/ reads by role: no folder holds more than MAX_MODULES modules (__init__.py aside), so a
reader finds a thing by the folder that does it rather than by learning a flat list by heart."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULES = 10


def crowded(package: Path, limit: int = MAX_MODULES) -> dict[str, int]:
    """Folders under `package` with more than `limit` modules, and how many each holds."""
    counts = {}
    for folder in [package, *(p for p in package.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
        modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        if len(modules) > limit:
            counts[folder.relative_to(package.parent).as_posix()] = len(modules)
    return counts


def test_no_folder_of_tokengen_holds_more_than_ten_modules():
    assert crowded(ROOT / "tokengen") == {}


def test_the_rule_finds_a_crowded_subfolder(tmp_path):
    folder = tmp_path / "tokengen" / "measure"
    folder.mkdir(parents=True)
    for name in ["__init__", *(f"m{i}" for i in range(MAX_MODULES + 1))]:
        (folder / f"{name}.py").write_text("")
    assert crowded(tmp_path / "tokengen") == {"tokengen/measure": MAX_MODULES + 1}
