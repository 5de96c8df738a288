"""Issue 41: a sandboxed run from the package's warm pool shows none of
the host's paths in its command line (``/proc/self/cmdline``,
``sys.orig_argv``) or ``sys.executable``: not the interpreter under a home
directory (pyenv), not the bootstrap in the caller's cache."""

from __future__ import annotations

import os
import sys

PROGRAM = """import sys
cmd = open('/proc/self/cmdline', 'rb').read().decode('utf-8', 'replace')
return [cmd, ' '.join(sys.orig_argv), sys.executable]
"""


def test_sandboxed_runs_show_no_host_path(sandbox_rt):
    home = os.path.expanduser("~")
    shown = sandbox_rt.run(PROGRAM)
    assert shown.error is None, shown
    text = " ".join(shown.value)
    assert "/opt/pycage" in text, text
    host_python = os.path.realpath(sys.executable)
    if host_python.startswith(("/root/", "/home/")):
        assert host_python not in text, text
        assert home not in text, text
    assert ".cache/pycage" not in text, text
