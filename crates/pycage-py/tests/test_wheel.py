"""The release wheel, as a user without Rust gets it.

scripts/build-wheels.sh builds it and .ci/python-package.sh names it in
PYCAGE_WHEEL. Each test installs it into a fresh venv and runs it on a PATH
without cargo or rustc: the `pycage` command (a program, not a Python
wrapper: no Python starts per call), `import pycage` from the venv, and
sandboxed runs through both. The README's wheel commands run as written
and print what the README says.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"


def python_dir() -> str:
    """The directory of the interpreter this suite's venv was made from,
    the `python3` a user's `python3 -m venv` runs (its real path: a venv
    made through a symlink in /tmp names an interpreter the sandbox does
    not show)."""
    return os.path.dirname(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))


def wheel() -> Path:
    name = os.environ.get("PYCAGE_WHEEL")
    if not name:
        message = "PYCAGE_WHEEL is not set: .ci/python-package.sh builds the wheel (scripts/build-wheels.sh), sets it"
        if os.environ.get("PYCAGE_REQUIRE_ALL_TESTS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    path = Path(name).resolve()
    assert path.is_file(), f"PYCAGE_WHEEL={name}: no such file"
    return path


def distribution() -> str:
    project = (ROOT / "pyproject.toml").read_text().split("\n[project]\n", 1)[1]
    return re.search(r'^name = "([^"]+)"$', project, re.M).group(1)


def bare_env(home: Path, venv: Path | None = None) -> dict[str, str]:
    # No Rust toolchain: rustup's cargo and rustc live in ~/.cargo/bin.
    bare = f"{python_dir()}:/usr/bin:/bin"
    path = f"{venv / 'bin'}:{bare}" if venv else bare
    for tool in ("cargo", "rustc"):
        assert shutil.which(tool, path=path) is None, f"{tool} is on {path}"
    return {"PATH": path, "HOME": str(home), "LANG": "C.UTF-8", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh venv with the wheel installed, and the seconds pip took."""
    whl = wheel()
    home = tmp_path_factory.mktemp("wheel-home")
    venv = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=bare_env(home))
    start = time.monotonic()
    subprocess.run(
        [str(venv / "bin/python"), "-m", "pip", "install", "-q", "--no-index", str(whl)],
        check=True,
        env=bare_env(home),
    )
    seconds = time.monotonic() - start
    print(f"\n{whl.name} ({whl.stat().st_size / 2**20:.1f} MiB) installed in {seconds:.1f} s")
    return home, venv


def run(installed, *argv: str, **kw) -> subprocess.CompletedProcess:
    home, venv = installed
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=home, env=bare_env(home, venv), **kw)


def test_the_command_is_a_program_on_path(installed):
    home, venv = installed
    found = shutil.which("pycage", path=bare_env(home, venv)["PATH"])
    assert found == str(venv / "bin/pycage")
    # The binary itself, as ruff's and uv's wheels install theirs: no
    # Python start per command.
    assert Path(found).read_bytes()[:4] == b"\x7fELF"
    out = run(installed, "pycage", "--version")
    assert out.returncode == 0, out.stderr
    version = run(installed, "python", "-c", f"import importlib.metadata as m; print(m.version({distribution()!r}))")
    assert out.stdout == f"{distribution()} {version.stdout.strip()}\n"


def test_the_command_runs_programs_sandboxed_and_not(installed):
    out = run(installed, "pycage", "run", "-c", "return 1")
    assert (out.returncode, out.stdout) == (0, "1\n"), out.stderr
    # The sandbox: its own hostname and uid, no network.
    program = "import os, socket\nreturn [socket.gethostname(), os.getuid(), os.path.exists('/home')]"
    out = run(installed, "pycage", "run", "--isolation", "sandbox", "-c", program)
    assert (out.returncode, out.stdout) == (0, '["pycage",1000,false]\n'), out.stderr
    out = run(installed, "pycage", "run", "--isolation", "process", "--json", "-c", "print('hi'); return 2**70")
    assert (out.returncode, out.stdout) == (0, '{"value":1180591620717411303424,"logs":["hi"]}\n'), out.stderr


def test_the_package_imports_from_the_venv_and_runs_sandboxed(installed):
    home, venv = installed
    program = """
import json, pycage
def stock(sku):
    return {"A-1": 4}[sku]
with pycage.Runtime() as rt:
    r = rt.run(
        "import socket\\nreturn [await tools.stock('A-1'), socket.gethostname()]",
        bindings={"tools": {"stock": stock}},
    )
print(json.dumps([pycage.__file__, r.value, r.error]))
"""
    out = run(installed, "python", "-c", program)
    assert out.returncode == 0, out.stderr
    file, value, error = json.loads(out.stdout)
    assert file.startswith(str(venv / "lib")), file
    assert (value, error) == ([4, "pycage"], None)


def wheel_block() -> str:
    text = README.read_text()
    start = text.index("\n### Install the wheel\n")
    section = text[start : text.index("\n### ", start + 1)]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1)


def test_readme_wheel_commands_run_as_written(tmp_path):
    """Each line of the README's wheel block, in order, in one fresh HOME;
    a line with a `# comment` prints that comment."""
    whl = wheel()
    home = tmp_path
    # The README installs the wheel by its file name from where it lies.
    lines = [line for line in wheel_block().splitlines() if line.strip()]
    assert any(whl.name in line for line in lines), f"the README's wheel block does not install {whl.name}"
    activate = "if [ -f ~/.venvs/pycage/bin/activate ]; then . ~/.venvs/pycage/bin/activate; fi"
    for line in lines:
        command, _, expected = line.partition("  # ")
        out = subprocess.run(
            ["bash", "-c", f"set -e; {activate}; {command}"],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=whl.parent,
            env=bare_env(home),
        )
        assert out.returncode == 0, f"{command}\n{out.stderr}"
        if expected:
            assert out.stdout.strip() == expected.strip(), f"{shlex.quote(command)} printed {out.stdout!r}"
