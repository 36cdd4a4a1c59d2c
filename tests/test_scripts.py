"""Every entry script starts with a usage docstring that ``--help`` prints as written."""

import ast
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
ENTRY_SCRIPTS = sorted(
    path.relative_to(REPO_ROOT).as_posix()
    for folder in ("tools", "bench", "nemo_recipes", "slm")
    for path in (REPO_ROOT / folder).glob("*.py")
    if 'if __name__ == "__main__"' in path.read_text()
)


def test_the_entry_scripts_are_found():
    assert {"tools/pipeline.py", "tools/demo.py", "slm/finetune.py", "bench/pipeline_latency.py"} <= set(ENTRY_SCRIPTS)


@pytest.mark.parametrize("script", ENTRY_SCRIPTS)
def test_usage_docstring_reads_as_written(script):
    source = (REPO_ROOT / script).read_text()
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant), f"{script}: no module docstring"
    doc = node.value.value
    assert f"python {script}" in doc, f"{script}: its docstring shows no example command"
    # A backslash at a line's end inside a non-raw docstring joins the example's two lines in --help.
    written = ast.get_source_segment(source, node.value)
    body = written[written.index('"""') + 3: written.rindex('"""')]
    assert doc == body, f"{script}: the docstring has escapes (make it r\"\"\"...\"\"\")"


# Folders git tracks the files of: a path under one of them in a usage block names a file of this repository.
# (experiments/, data/, tokenizers/ and manifests/*.json are what the commands write, so they may not exist yet.)
COMMITTED_FOLDERS = ("samples", "configs", "tools", "bench", "nemo_recipes", "slm", "duet", "tests")
REPO_PATH = re.compile(rf"(?<![\w./~-])((?:{'|'.join(COMMITTED_FOLDERS)})/[\w./-]*)")
# Named in a usage block before the file is bundled, with what will put it there.
NOT_BUNDLED_YET: dict[str, str] = {}


def usage_blocks() -> dict[str, str]:
    """Each entry script's usage docstring and each config's comments, by path."""
    blocks = {script: ast.get_docstring(ast.parse((REPO_ROOT / script).read_text())) or "" for script in ENTRY_SCRIPTS}
    for config in sorted((REPO_ROOT / "configs").rglob("*.yaml")):
        blocks[config.relative_to(REPO_ROOT).as_posix()] = "\n".join(
            line.split("#", 1)[1] for line in config.read_text().splitlines() if "#" in line)
    return blocks


def test_usage_blocks_name_only_paths_that_exist():
    """A command copied from a usage block finds every repository file it names (samples/checkpoints/base.nemo
    was named in five of them, the file being fastconformer_tiny_base.nemo)."""
    blocks = usage_blocks()
    assert "nemo_recipes/finetune_ctc.py" in blocks and "configs/ctc_base.yaml" in blocks
    missing = {f"{source}: {path}" for source, text in blocks.items() for path in REPO_PATH.findall(text)
               if not (REPO_ROOT / path.rstrip(".")).exists() and path.rstrip(".") not in NOT_BUNDLED_YET}
    assert not missing, "\n".join(sorted(missing))
