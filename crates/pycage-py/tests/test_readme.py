"""The README's Python example runs as written and prints what it shows."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[3] / "README.md"


def python_section() -> str:
    text = README.read_text()
    start = text.index("\n## Python\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def test_readme_python_example(request, tmp_path):
    request.getfixturevalue("sandbox_rt")  # the example uses the default isolation
    section = python_section()
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    expected = re.search(r"It prints:\n\n```\n(.*?)```", section, re.S).group(1)
    script = tmp_path / "example.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout == expected
