"""Every entry script starts with a usage docstring that ``--help`` prints as written."""

import ast
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
