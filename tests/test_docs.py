"""The documents a newcomer reads: README.md stays a page (<= 15 KB) that keeps its first screen, every relative link
in README.md, docs/*.md, RESULTS.md and RESULTS-history.md reaches a file and, with a #fragment, an anchor there, and
every command they show names an entry script that exists and options that script defines. Read from the text and
the scripts' source; nothing runs."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "RESULTS.md", REPO / "RESULTS-history.md"]
README_LIMIT = 15 * 1024
FIRST_SCREEN = ("bash tools/setup.sh && .venv/bin/python tools/demo.py", "bash tools/setup.sh && .venv/bin/python -m pytest")
SCRIPT = re.compile(r"\bpython ((?:tools|bench|nemo_recipes|slm)/\w+\.py)([^|&;#`\n]*)")


def anchors(path: Path) -> set[str]:
    """The fragments a link may name in ``path``: explicit ``<a id>`` and GitHub's slugs of the headings."""
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    found = set(re.findall(r'<a id="([^"]+)"', text))
    for heading in re.findall(r"^#+ (.+)$", text, flags=re.M):
        found.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return found


def test_readme_is_a_page_and_keeps_its_first_screen():
    readme = (REPO / "README.md").read_bytes()
    assert len(readme) <= README_LIMIT, f"README.md is {len(readme)} bytes, over {README_LIMIT}: move depth to docs/"
    first_block = readme.decode().split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in first_block.strip().splitlines()]
    assert commands == list(FIRST_SCREEN)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_reach_a_file_and_an_anchor(doc):
    text = re.sub(r"^```.*?^```", "", doc.read_text(), flags=re.S | re.M)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        file_part, _, fragment = target.partition("#")
        path = (doc.parent / file_part).resolve() if file_part else doc
        if not path.exists():
            broken.append(target)
        elif fragment and path.suffix == ".md" and fragment not in anchors(path):
            broken.append(target)
    assert not broken, f"{doc.name}: {broken}"


LIBRARY = [*(REPO / "duet").rglob("*.py"), *(REPO / "slm").glob("*.py")]


@pytest.mark.parametrize("doc", DOCS[:-2], ids=lambda p: p.relative_to(REPO).as_posix())
def test_commands_name_existing_scripts_and_options(doc):
    """Each ``--option`` of a shown command is defined by its script or the library under it: as a quoted string, or
    as the settings field a flag is derived from (``--top-p`` from ``top_p``)."""
    library = "\n".join(path.read_text() for path in LIBRARY)
    wrong = []
    for script, arguments in SCRIPT.findall(re.sub(r"\\\n\s*", " ", doc.read_text())):
        if not (REPO / script).is_file():
            wrong.append(script)
            continue
        options = set(re.findall(r"(?<![\w=.-])(--[a-z][a-z0-9-]*)", arguments.split(" -- ", 1)[0]))
        source = (REPO / script).read_text() + library
        wrong += [f"{script} {option}" for option in sorted(options - {"--help", "--config-name"})
                  if f'"{option}"' not in source and not re.search(rf"\b{option[2:].replace('-', '_')}\b", source)]
    assert not wrong, f"{doc.name}: {wrong}"
