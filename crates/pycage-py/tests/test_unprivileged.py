"""The package as a user who is not root: process isolation and the sandbox
both work (the sandbox needs no privilege: unprivileged user namespaces)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import textwrap

import pytest

import pycage
from conftest import unavailable

SYSTEM_PYTHON = "/usr/bin/python3"

SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import pycage
    out = {}
    with pycage.Runtime(isolation="process", python=sys.executable) as rt:
        r = rt.run("import os\\nreturn [os.getuid(), await ns.f(2)]", {"ns": {"f": lambda x: x * 21}})
        out["process"] = [r.value, r.error and r.error.message]
    try:
        with pycage.Runtime(python=sys.executable) as rt:
            r = rt.run("return 7")
            out["sandbox"] = r.value if r.error is None else r.error.kind + ": " + r.error.message
    except pycage.SandboxUnavailableError as e:
        out["sandbox"] = str(e)
    print(json.dumps(out))
    """
)


def test_runs_as_an_unprivileged_user():
    if os.geteuid() != 0:
        pytest.skip("already unprivileged: every other test runs as this user")
    if not os.access(SYSTEM_PYTHON, os.X_OK) or shutil.which("setpriv") is None:
        unavailable(f"needs {SYSTEM_PYTHON} and setpriv to run as uid 65534")
    # A copy of the installed package where uid 65534 can read it.
    root = tempfile.mkdtemp(prefix="pycage-unprivileged-")
    try:
        os.chmod(root, 0o755)
        shutil.copytree(os.path.dirname(pycage.__file__), os.path.join(root, "pycage"))
        subprocess.run(["chmod", "-R", "a+rX", root], check=True)
        out = subprocess.run(
            [
                "setpriv",
                "--reuid",
                "65534",
                "--regid",
                "65534",
                "--clear-groups",
                SYSTEM_PYTHON,
                "-I",
                "-c",
                SCRIPT,
                root,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd="/",
        )
    finally:
        shutil.rmtree(root)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["process"] == [[65534, 42], None]
    assert result["sandbox"] == 7, result["sandbox"]
