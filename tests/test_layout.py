"""The import graph: imports run one way (duet.foundation <- slm <- duet <- entry scripts), duet's packages import
one another in one direction, synthesis and the demo's stages stay out of training and inference (directly or
through another module), and entry scripts neither edit sys.path nor import one another. Read from the source,
nothing runs."""

import ast
import functools
import importlib.metadata
import io
import sys
import tokenize
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SCRIPT_FOLDERS = ("tools", "bench", "nemo_recipes", "slm")
# The demo's stages: the one library module outside duet.synth that may use synthesis (it builds the sample).
DEMO = "duet.demo.stages"
# Commands that answer or train: what they load, directly or through other modules, holds neither synthesis nor
# the demo's stages (both of which pull in ~2,000 lines these never run).
INFERENCE_AND_TRAINING = ("tools/pipeline.py", "tools/serve.py", "slm/generate.py", "nemo_recipes/evaluate_ctc.py",
                          "nemo_recipes/finetune_ctc.py", "slm/finetune.py")


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


PACKAGES = ("slm", "duet")
# Layers, lowest first: each imports only its own and lower ones. duet.foundation sits under both packages.
LAYERS = ("duet.foundation", "slm", "duet")
LIBRARY = {module_name(p): p for package in PACKAGES for p in (REPO_ROOT / package).rglob("*.py")}
GRAPH = {name: {m for m in imported(path) if m in LIBRARY and m != name} for name, path in LIBRARY.items()}
ENTRY_SCRIPTS = [path for folder in SCRIPT_FOLDERS for path in (REPO_ROOT / folder).glob("*.py")
                 if 'if __name__ == "__main__"' in path.read_text()]


def reached(modules: set[str]) -> set[str]:
    """``modules`` and every project module they import, directly or through one another (imports inside
    functions included: running the code loads them)."""
    seen, todo = set(), list(modules)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += GRAPH.get(name, ())
    return seen


def is_synthesis(name: str) -> bool:
    return name == "duet.synth" or name.startswith("duet.synth.")


def layer(name: str) -> int:
    if name == "duet.foundation" or name.startswith("duet.foundation."):
        return 0
    return LAYERS.index(name.split(".")[0])


def test_packages_import_only_lower_ones():
    """duet.foundation imports nothing else of the project, and slm nothing of duet but duet.foundation."""
    offenders = {name: sorted(m for m in deps if layer(m) > layer(name)) for name, deps in GRAPH.items()}
    assert not {k: v for k, v in offenders.items() if v}


def test_importing_the_foundation_loads_nothing_else_of_duet():
    """slm imports duet.foundation, which runs duet/__init__.py first: that must stay as light."""
    assert GRAPH["duet"] <= {m for m in LIBRARY if layer(m) == 0}


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


# The package-level drawing: duet's subpackages, duet's other top-level modules (errors, io, text, vad, ...: the base
# every subpackage stands on) as one node "duet", and duet.pipeline, the voice -> response chain that stands on asr,
# data and the demo's model paths, as a node of its own above them.
SUBPACKAGES = ("duet.asr", "duet.cli", "duet.data", "duet.demo", "duet.foundation", "duet.serving", "duet.synth")
PIPELINE = "duet.pipeline"


def package_of(name: str) -> str | None:
    """``name``'s node in the package drawing (None outside duet)."""
    if name != "duet" and not name.startswith("duet."):
        return None
    if name == PIPELINE:
        return PIPELINE
    return next((p for p in SUBPACKAGES if name == p or name.startswith(p + ".")), "duet")


def package_cycles(leave_out: tuple[str, ...] = ()) -> list[str]:
    """Each group of packages that import one another round in a circle, with the module imports that close it;
    imports from or to a module under ``leave_out`` are not counted."""
    def left_out(name: str) -> bool:
        return any(name == m or name.startswith(m + ".") for m in leave_out)

    edges: dict[tuple[str, str], list[str]] = {}
    for name, dependencies in GRAPH.items():
        for dependency in dependencies:
            a, b = package_of(name), package_of(dependency)
            if a and b and a != b and not left_out(name) and not left_out(dependency):
                edges.setdefault((a, b), []).append(f"{name} -> {dependency}")

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            node = todo.pop()
            for (a, b) in edges:
                if a == node and b not in seen:
                    seen.add(b)
                    todo.append(b)
        return seen

    nodes = sorted({n for edge in edges for n in edge})
    reached_from = {n: reach(n) for n in nodes}
    groups = {frozenset(m for m in nodes if m == n or (m in reached_from[n] and n in reached_from[m])) for n in nodes}
    return [", ".join(sorted(group)) + ": " + "; ".join(sorted(why[0] for (a, b), why in edges.items()
                                                                if a in group and b in group))
            for group in sorted(groups, key=sorted) if len(group) > 1]


def test_duet_packages_import_one_another_in_one_direction():
    """No import cycle between duet's packages (the package drawing above)."""
    assert not package_cycles()


def test_the_wheel_lists_every_package_folder():
    """pyproject.toml names the wheel's packages one by one (samples/ and configs/ come in as package data through
    the links duet/samples and duet/configs, whose data folders a search of the folders cannot tell from packages):
    every folder of duet/ and slm/ is listed, the links included, and every listed one exists. No package-dir entry
    but "": with one the editable install is an import hook that prints a warning box (issue #56)."""
    tomllib = pytest.importorskip("tomllib")
    setuptools = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert set(setuptools["package-dir"]) == {""}
    listed = set(setuptools["packages"])
    links = {"duet.samples", "duet.configs"}
    assert all(REPO_ROOT.joinpath(*name.split(".")).is_symlink() for name in links)
    # rglob yields a link to a folder but does not search below it
    folders = {".".join(p.relative_to(REPO_ROOT).parts) for package in PACKAGES for p in [REPO_ROOT / package,
               *(REPO_ROOT / package).rglob("*")] if p.is_dir() and p.name != "__pycache__"}
    assert {name for name in listed if not name.startswith(tuple(f"{link}." for link in links))} == folders
    assert all(REPO_ROOT.joinpath(*name.split(".")).is_dir() for name in listed)


def test_synthesis_and_the_demo_are_reached_only_by_themselves():
    """No library module but the demo's stages reaches duet.synth, and none reaches the demo's stages, even
    through another module."""
    problems = {}
    for name in GRAPH:
        if is_synthesis(name) or name == DEMO:
            continue
        found = sorted(m for m in reached(GRAPH[name]) if is_synthesis(m) or m == DEMO)
        if found:
            problems[name] = found
    assert not problems


@pytest.mark.parametrize("script", INFERENCE_AND_TRAINING)
def test_inference_and_training_commands_reach_neither_synthesis_nor_the_demo(script):
    found = reached({m for m in imported(REPO_ROOT / script) if m in LIBRARY})
    assert not sorted(m for m in found if is_synthesis(m) or m == DEMO)


def test_entry_scripts_neither_edit_sys_path_nor_import_each_other():
    """The scripts in slm/, tools/, bench/ and nemo_recipes/ are commands only (see the test below)."""
    library_used = {m for deps in GRAPH.values() for m in deps}
    commands = {module_name(p) for p in ENTRY_SCRIPTS} - library_used
    stems = {name.split(".")[-1] for name in commands} | {"tools", "bench", "nemo_recipes"}
    for path in ENTRY_SCRIPTS:
        assert "sys.path" not in path.read_text(), f"{path.relative_to(REPO_ROOT)} edits sys.path"
        others = {m for m in imported(path) if m in commands or m.split(".")[0] in stems}
        assert not others, f"{path.relative_to(REPO_ROOT)} imports entry scripts {sorted(others)}"


def test_no_module_is_both_a_command_and_a_library_module():
    """A command reads its options and calls the library (slm/generate.py calls slm.generation, slm/ablate.py
    slm.ablation, slm/evaluate_slm.py slm.evaluation); no library module imports a command."""
    library_used = {m for deps in GRAPH.values() for m in deps}
    assert {module_name(p) for p in ENTRY_SCRIPTS} & library_used == set()


def test_slm_modules_shadow_no_installed_module():
    """``python slm/finetune.py`` puts slm/ first on sys.path: a module there named like a standard or
    installed one (io.py, numbers.py, config) would replace it for everything the script imports."""
    installed = set(sys.stdlib_module_names) | set(importlib.metadata.packages_distributions())
    clashes = {path.stem for path in (REPO_ROOT / "slm").glob("*.py")} & installed
    assert not clashes


# Lazy imports. A module imported inside a function must cost enough to start that deferring it buys something
# (--help, a config error, or a light subcommand answering before it loads). Seconds for ``python -c "import X"``
# measured on the 2-core CPU machine, cold-ish cache; everything not listed (numpy 0.5, soundfile 0.7,
# omegaconf 0.7, hydra 0.2, sentencepiece 0.3, jiwer 0.3, sacrebleu 0.4, matplotlib without pyplot 0.4, the
# standard library ~0) loads at the module top.
HEAVY_SECONDS = {
    "lightning": 30.2,
    "nemo": 21.0,  # nemo.collections.asr
    "torch": 8.9,
    "pytorch_lightning": 8.8,
    "bert_score": 6.2,
    "lhotse": 4.8,
    "matplotlib.pyplot": 3.5,
    "rouge_score.rouge_scorer": 3.1,  # it imports nltk; rouge_score alone takes 0.06 s
    "datasets": 2.9,
    "transformers": 2.6,
}
LAZY_FOLDERS = ("duet", "slm", "tools", "nemo_recipes", "bench")
# Files another branch is rewriting right now; checked once that branch is merged.
PENDING: set[str] = set()


# What ``import nemo.collections.asr`` leaves in sys.modules: once a module imports NeMo at its top, a lazy
# import of these inside it defers nothing.
NEMO_LOADS = {"nemo", "lightning", "pytorch_lightning", "torch", "lhotse", "matplotlib.pyplot", "datasets",
              "transformers"}


@functools.cache
def heavy_loaded_by(target: str) -> frozenset[str]:
    """The HEAVY_SECONDS modules that importing ``target`` loads: itself if listed, else for a project module
    those its top-level imports reach; each project module is walked once and each file parsed once (parsing
    them again along every import path took this test 100-140 s)."""
    for heavy in HEAVY_SECONDS:
        if target == heavy or target.startswith(heavy + "."):
            return frozenset(NEMO_LOADS) if heavy == "nemo" else frozenset({heavy})
    loaded, visited, pending = set(), set(), [target]
    while pending:
        name = pending.pop()
        if name in visited or name not in LIBRARY:
            continue
        visited.add(name)
        for node in top_level_imports(LIBRARY[name]):
            for dependency in import_targets(node, LIBRARY[name]):
                if dependency in LIBRARY:
                    pending.append(dependency)
                else:
                    loaded |= heavy_loaded_by(dependency)
    return frozenset(loaded)


def import_targets(node: ast.Import | ast.ImportFrom, path: Path) -> list[str]:
    """The modules an import statement loads: ``from a import b`` names ``a.b`` when that is a project module."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module_name(path).split(".")
        package = package if path.name == "__init__.py" else package[:-1]
        base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
    submodules = [f"{base}.{alias.name}" for alias in node.names
                  if f"{base}.{alias.name}" in LIBRARY or heavy_loaded_by(f"{base}.{alias.name}")]
    return submodules or [base]


@functools.cache
def top_level_imports(path: Path) -> list[ast.Import | ast.ImportFrom]:
    """Imports that run when the module loads: outside every function (module-level if/try blocks included)."""
    found = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


def function_imports(tree: ast.Module) -> list[list[ast.Import | ast.ImportFrom]]:
    """Imports inside functions, as runs of consecutive import statements in one body."""
    runs: list[list] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for field in ("body", "orelse", "finalbody", "handlers"):
            run: list = []
            for child in getattr(node, field, []) or []:
                if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                    run.append(child)
                    continue
                if run:
                    runs.append(run)
                    run = []
                visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))
            if run:
                runs.append(run)
        for child in ast.iter_child_nodes(node):  # statements nested in expressions' siblings (match cases etc.)
            if isinstance(child, ast.match_case):
                visit(child, in_function)

    visit(tree, False)
    return runs


def comment_lines(source: str) -> set[int]:
    return {token.start[0] for token in tokenize.generate_tokens(io.StringIO(source).readline)
            if token.type == tokenize.COMMENT}


def test_imports_inside_functions_defer_a_measured_start_up_cost_and_say_why():
    """An import inside a function loads a module listed in HEAVY_SECONDS, or a project module whose top-level
    imports reach one, that the module's own top does not load already; a comment on its line or within the two lines above (one comment per run of consecutive
    imports) says why it waits."""
    problems = []
    for folder in LAZY_FOLDERS:
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            relative = path.relative_to(REPO_ROOT).as_posix()
            if relative in PENDING:
                continue
            source = path.read_text()
            comments = comment_lines(source)
            at_top = {heavy for node in top_level_imports(path) for target in import_targets(node, path)
                      for heavy in heavy_loaded_by(target)}
            for run in function_imports(ast.parse(source)):
                for node in run:
                    for target in import_targets(node, path):
                        deferred = heavy_loaded_by(target)
                        if not deferred:
                            problems.append(f"{relative}:{node.lineno} imports {target} inside a function: it"
                                            " starts fast, import it at the module top")
                        elif deferred <= at_top:
                            problems.append(f"{relative}:{node.lineno} imports {target} inside a function: the"
                                            " module top already loads what it costs, import it there")
                if not comments & set(range(run[0].lineno - 2, run[-1].end_lineno + 1)):
                    problems.append(f"{relative}:{run[0].lineno} lazy import without a comment saying why")
    assert not problems, "\n".join(problems)
