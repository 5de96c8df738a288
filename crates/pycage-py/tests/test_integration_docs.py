"""docs/integrations/*.md: every Python example runs as written (each in a
fresh interpreter, in an empty directory) and prints what the page says it
prints. A block the page marks ``<!-- not run: why -->`` on the line before
it is skipped; every page must have one example that runs. Also: importing
pycage imports no framework, and each framework module imports only its own."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import unavailable

DOCS = Path(__file__).resolve().parents[3] / "docs" / "integrations"
#: The module each page's examples need, and the pyproject extra that brings it.
NEEDS = {
    "smolagents.md": ("smolagents", "smolagents"),
    "pydantic-ai.md": ("pydantic_ai", "pydantic-ai"),
    "langchain.md": ("langchain", "langchain"),
    "openai-agents.md": ("agents", "openai-agents"),
    "mcp-hosts.md": ("claude_agent_sdk", None),
}
_BLOCK = re.compile(
    r"(?P<before>[^\n]*)\n```python\n(?P<code>.*?)```(?P<after>\n\nIt prints:\n\n```\n(?P<out>.*?)```)?", re.S
)


def examples(page: Path) -> list[tuple[str, str | None]]:
    """``(code, expected stdout or None)`` of every example the page runs."""
    out = []
    for m in _BLOCK.finditer(page.read_text()):
        if m.group("before").startswith("<!-- not run"):
            continue
        out.append((m.group("code"), m.group("out")))
    return out


def test_every_page_is_known_and_has_an_example_that_runs():
    pages = sorted(p.name for p in DOCS.glob("*.md"))
    assert pages == sorted(NEEDS)
    for name in pages:
        assert examples(DOCS / name), f"{name} has no example that runs"


@pytest.mark.parametrize("page", sorted(NEEDS))
def test_page_examples_run_as_written(page, request, tmp_path):
    request.getfixturevalue("sandbox_rt")  # the examples use the default isolation
    module, _ = NEEDS[page]
    if importlib.util.find_spec(module) is None:
        unavailable(f"{module} is not installed (the CI venv installs the pinned version)")
    for i, (code, expected) in enumerate(examples(DOCS / page)):
        script = tmp_path / f"example{i}.py"
        script.write_text(code)
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert out.returncode == 0, f"{page} example {i}:\n{out.stderr}"
        if expected is not None:
            assert out.stdout == expected, f"{page} example {i}"


PROBE = """
import sys
import pycage
{imports}
frameworks = ("smolagents", "pydantic_ai", "langchain_core", "langchain", "langgraph", "agents", "claude_agent_sdk")
print(sorted(m for m in frameworks if m in sys.modules))
"""


@pytest.mark.parametrize(
    ("imports", "loaded"),
    [
        ("", []),
        ("import pycage.smolagents", ["smolagents"]),
        ("import pycage.pydantic_ai", ["pydantic_ai"]),
        ("import pycage.langchain", ["langchain_core"]),
        ("import pycage.openai_agents", ["agents"]),
    ],
)
def test_each_module_imports_only_its_framework(imports, loaded):
    if imports and importlib.util.find_spec(loaded[0]) is None:
        unavailable(f"{loaded[0]} is not installed (the CI venv installs the pinned version)")
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(imports=imports)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == repr(loaded)
