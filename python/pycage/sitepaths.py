"""What `site` puts on `sys.path`, read as data: no code of the interpreter's
or a venv's runs.

The zygote (and the interpreter probe) start with `-I -S`: a `.pth` file's
`import` lines and `sitecustomize` would otherwise run in the zygote, on
the host, with its privileges over every run (uid 0 of pycage's user
namespace, or root on a root host), and in the probe with the host's
environment. So only what is data is applied: the site-packages
directories of the interpreter (and of its base, for a venv made with
`--system-site-packages`), and the directories the `.pth` files there
name on their other lines, as `site.addpackage` adds them. The builtins
`site` adds (`exit`, `quit`, `help`, `copyright`, `credits`, `license`)
are added too. Code lines are counted, not run: a sandboxed run started by
exec runs them itself, inside its sandbox.

Stdlib only; the probe runs this file's text before its own, so nothing
here may need the rest of the package."""

import os
import sys


def _site_dirs():
    """The site-packages directories `site.main()` would add, and, for a
    venv, `sys.prefix` and `sys.exec_prefix` set to it as `site.venv()`
    sets them (which would also run the venv's `.pth` files)."""
    import site

    prefixes = [sys.prefix, sys.exec_prefix]
    exe_dir = os.path.dirname(os.path.abspath(sys.executable))
    venv_prefix = os.path.dirname(exe_dir)
    for cfg in (os.path.join(exe_dir, "pyvenv.cfg"), os.path.join(venv_prefix, "pyvenv.cfg")):
        if not os.path.isfile(cfg):
            continue
        system_site = False
        with open(cfg, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, eq, value = line.partition("=")
                if not eq:
                    continue
                key, value = key.strip().lower(), value.strip()
                if key == "include-system-site-packages":
                    system_site = value.lower() == "true"
                elif key == "home":
                    sys._home = value
        sys.prefix = sys.exec_prefix = venv_prefix
        prefixes = [venv_prefix] + (prefixes if system_site else [])
        break
    return site.getsitepackages(list(dict.fromkeys(prefixes)))


def apply():
    """Adds the site directories and their `.pth` path lines to `sys.path`,
    and `site`'s builtins; returns how many `.pth` code lines were not
    run."""
    import site

    skipped = 0
    for sitedir in _site_dirs():
        if not os.path.isdir(sitedir):
            continue
        if sitedir not in sys.path:
            sys.path.append(sitedir)
        try:
            names = sorted(n for n in os.listdir(sitedir) if n.endswith(".pth") and not n.startswith("."))
        except OSError:
            continue
        for name in names:
            try:
                with open(os.path.join(sitedir, name), encoding="utf-8", errors="replace") as f:
                    lines = f.read().splitlines()
            except OSError:
                continue
            for line in lines:
                if not line.strip() or line.startswith("#"):
                    continue
                if line.startswith(("import ", "import\t")):
                    skipped += 1
                    continue
                path = os.path.abspath(os.path.join(sitedir, line.rstrip()))
                if os.path.exists(path) and path not in sys.path:
                    sys.path.append(path)
    site.setquit()
    site.setcopyright()
    site.sethelper()
    return skipped
