"""The import graph: imports run one way (slm <- duet <- entry scripts), synthesis stays out of training and
inference, and entry scripts neither edit sys.path nor import one another. Read from the source, nothing runs."""

import ast
import importlib.metadata
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SCRIPT_FOLDERS = ("tools", "bench", "nemo_recipes", "slm")
# The glue: modules that chain synthesis, recognition and the language model for the demo and the pipeline.
GLUE = {"duet.demo", "duet.pipeline"}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports, at its top or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


LIBRARY = {module_name(p): p for package in ("duet", "slm") for p in (REPO_ROOT / package).rglob("*.py")}
GRAPH = {name: {m for m in imported(path) if m in LIBRARY and m != name} for name, path in LIBRARY.items()}
ENTRY_SCRIPTS = [path for folder in SCRIPT_FOLDERS for path in (REPO_ROOT / folder).glob("*.py")
                 if 'if __name__ == "__main__"' in path.read_text()]


def test_slm_never_imports_duet():
    offenders = {name: sorted(m for m in GRAPH[name] if m.split(".")[0] == "duet") for name in GRAPH
                 if name.split(".")[0] == "slm"}
    assert not {k: v for k, v in offenders.items() if v}


def test_no_import_cycle_between_library_modules():
    state: dict[str, str] = {}

    def visit(name: str, trail: list[str]) -> None:
        if state.get(name) == "done":
            return
        assert state.get(name) != "open", " -> ".join(trail[trail.index(name):] + [name])
        state[name] = "open"
        for dependency in sorted(GRAPH[name]):
            visit(dependency, trail + [name])
        state[name] = "done"

    for name in sorted(GRAPH):
        visit(name, [])


def test_synthesis_is_imported_only_by_itself_and_the_glue():
    users = {name for name, deps in GRAPH.items() if any(d.startswith("duet.synth") for d in deps)}
    assert {u for u in users if not u.startswith("duet.synth")} <= GLUE


def test_entry_scripts_neither_edit_sys_path_nor_import_each_other():
    """slm/generate.py is a library module with a command line (the pipeline answers with it); the other
    scripts in slm/ are commands only, and so are tools/, bench/ and nemo_recipes/."""
    library_used = {m for deps in GRAPH.values() for m in deps}
    commands = {module_name(p) for p in ENTRY_SCRIPTS} - library_used
    stems = {name.split(".")[-1] for name in commands} | {"tools", "bench", "nemo_recipes"}
    for path in ENTRY_SCRIPTS:
        assert "sys.path" not in path.read_text(), f"{path.relative_to(REPO_ROOT)} edits sys.path"
        others = {m for m in imported(path) if m in commands or m.split(".")[0] in stems}
        assert not others, f"{path.relative_to(REPO_ROOT)} imports entry scripts {sorted(others)}"


def test_slm_modules_shadow_no_installed_module():
    """``python slm/finetune.py`` puts slm/ first on sys.path: a module there named like a standard or
    installed one (io.py, numbers.py, config) would replace it for everything the script imports."""
    installed = set(sys.stdlib_module_names) | set(importlib.metadata.packages_distributions())
    clashes = {path.stem for path in (REPO_ROOT / "slm").glob("*.py")} & installed
    assert not clashes
