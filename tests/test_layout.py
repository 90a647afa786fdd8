"""docs/guide.md's layout table against the tree: every file or folder a row names exists in that row's folder, and
every module of `modeling_vanilla/` and `vanilla_training/` is named in the row of the deepest folder holding it."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("modeling_vanilla", "vanilla_training")


def layout_rows(guide: str) -> dict[str, set[str]]:
    """The layout table's rows: each folder with the file and folder names in backticks of its description."""
    section = guide.split("## The code's layout", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for folder, text in re.findall(r"^\| `([^`]+/)` \| (.*) \|$", section, flags=re.MULTILINE):
        rows[folder] = {name for name in re.findall(r"`([^`\s]+)`", text) if re.search(r"(\.py|\.md|/)$", name)}
    return rows


def named_in(rows: dict[str, set[str]], path: str) -> bool:
    """Whether `path` is named in the row of the deepest folder that holds it."""
    folder = max((row for row in rows if path.startswith(row)), key=len)
    return path.removeprefix(folder) in rows[folder]


def test_every_name_in_the_layout_table_exists():
    rows = layout_rows((ROOT / "docs" / "guide.md").read_text(encoding="utf-8"))
    assert {f"{package}/" for package in PACKAGES} <= rows.keys()
    missing = [folder + name for folder, names in rows.items() for name in names if not (ROOT / folder / name).exists()]
    assert not missing, f"docs/guide.md's layout table names what is not there: {missing}"


def test_every_module_is_in_the_layout_table():
    rows = layout_rows((ROOT / "docs" / "guide.md").read_text(encoding="utf-8"))
    modules = [
        path.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.name != "__init__.py"
    ]
    assert len(modules) > 40
    left_out = [module for module in modules if not named_in(rows, module)]
    assert not left_out, f"docs/guide.md's layout table leaves out: {left_out}"
