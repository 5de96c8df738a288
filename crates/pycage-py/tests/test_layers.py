"""The package's modules keep the layers its docstrings declare, as the
Rust crates' do (``pycage-layers``): ``pycage/__init__.py`` (and each
subpackage's ``__init__.py``) lists its modules, lowest first, in double
backticks under a ``Layers`` heading. A module may import only modules
listed before it in the list of their nearest common package, never its
own package (whose ``__init__`` comes after all of its modules); so the
imports have no circles, and the list is the map a reader needs. Every
import statement counts (inside functions, under ``TYPE_CHECKING``), and
every module must be listed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Optional

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "pycage"
ROOT = "pycage"


def layer_list(init: Path) -> Optional[list[str]]:
    """The names in double backticks under the docstring's ``Layers``
    heading (a line ``Layers`` over a line of dashes), in order."""
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    lines = doc.splitlines()
    for i, line in enumerate(lines[:-1]):
        if line.strip() == "Layers" and set(lines[i + 1].strip()) == {"-"}:
            names: list[str] = []
            for name in re.findall(r"``([A-Za-z_][A-Za-z0-9_]*)``", "\n".join(lines[i + 2 :])):
                if name not in names:
                    names.append(name)
            return names
    return None


def modules(package: Path) -> dict[tuple[str, ...], Path]:
    """Every module of the package tree by its path below the root
    (``()`` the root package, ``("ray", "_node")``): source files, stubs of
    compiled modules, and packages (their ``__init__.py``)."""
    found: dict[tuple[str, ...], Path] = {}
    for path in sorted(package.rglob("*.py*")):
        if path.suffix not in (".py", ".pyi") or "__pycache__" in path.parts:
            continue
        rel = path.relative_to(package).with_suffix("").parts
        if rel[-1] == "__init__":
            rel = rel[:-1]
        elif path.suffix == ".pyi" and path.with_suffix(".py").exists():
            continue
        found.setdefault(rel, path)
    return found


def imports(path: Path, me: tuple[str, ...], known: set[tuple[str, ...]]) -> list[tuple[int, tuple[str, ...]]]:
    """The package's modules that ``path`` (the module ``me``) imports,
    with their lines."""
    package = me if path.name == "__init__.py" else me[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[tuple[str, ...]] = []
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = tuple(alias.name.split("."))
                if parts[0] == ROOT:
                    targets.append(parts[1:])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                base = base + (tuple(node.module.split(".")) if node.module else ())
            elif node.module and node.module.split(".")[0] == ROOT:
                base = tuple(node.module.split("."))[1:]
            else:
                continue
            for alias in node.names:
                targets.append(base + (alias.name,) if base + (alias.name,) in known else base)
        out.extend((node.lineno, t) for t in dict.fromkeys(targets))
    return out


def name(parts: tuple[str, ...]) -> str:
    return ".".join((ROOT,) + parts)


def check(package: Path) -> list[str]:
    """Every broken rule, one line each, naming both modules."""
    found = modules(package)
    lists: dict[tuple[str, ...], list[str]] = {}
    problems: list[str] = []
    for mod, path in found.items():
        if path.name != "__init__.py":
            continue
        children = {m[-1] for m in found if len(m) == len(mod) + 1 and m[: len(mod)] == mod}
        listed = layer_list(path)
        where = path.relative_to(package.parent)
        if listed is None:
            problems.append(f"{where}: no Layers heading in the docstring of {name(mod)}")
            continue
        lists[mod] = listed
        for child in sorted(children - set(listed)):
            problems.append(f"{where}: {name(mod + (child,))} is missing from the Layers list of {name(mod)}")
        for ghost in [n for n in listed if n not in children]:
            problems.append(f"{where}: the Layers list of {name(mod)} names {ghost!r}, which is no module of it")
    for me, path in found.items():
        for line, target in imports(path, me, set(found)):
            if target == me or target[: len(me)] == me and path.name == "__init__.py":
                continue  # itself, or a package's __init__ importing its own modules
            at = f"{path.relative_to(package.parent)}:{line}"
            if me[: len(target)] == target:
                problems.append(
                    f"{at}: {name(me)} imports {name(target)}, its own package, whose __init__ comes after all "
                    "of its modules: import the module that holds the name"
                )
                continue
            k = next(i for i in range(min(len(me), len(target)) + 1) if me[i : i + 1] != target[i : i + 1])
            parent, mine, theirs = me[:k], me[k], target[k]
            order = lists.get(parent, [])
            if mine in order and theirs in order and order.index(theirs) < order.index(mine):
                continue
            problems.append(
                f"{at}: {name(me)} imports {name(target)}, but the Layers list of {name(parent)} "
                f"({found[parent].relative_to(package.parent)}) puts {theirs!r} after {mine!r}: an upward import"
                if mine in order and theirs in order
                else f"{at}: {name(me)} imports {name(target)}, which the Layers list of {name(parent)} does not order"
            )
    return problems


def test_the_package_keeps_its_layers():
    problems = check(PACKAGE)
    assert not problems, "\n".join(problems)


def test_the_check_finds_upward_imports_and_names_both_modules(tmp_path):
    pkg = tmp_path / "pycage"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""Layers\n------\n\n``low``, ``high``, ``sub``.\n"""\nfrom .sub import b\n')
    (pkg / "low.py").write_text("from .high import X\n")
    (pkg / "high.py").write_text("from . import low\nX = 1\n")
    (pkg / "sub" / "__init__.py").write_text('"""Layers\n------\n\n``b``, ``a``\n"""\n')
    (pkg / "sub" / "a.py").write_text("from pycage.sub import b\nY = 1\n")
    (pkg / "sub" / "b.py").write_text(
        "from ..low import *\nfrom pycage import high\n\ndef f():\n    from .a import Y\n    from .. import sub\n"
    )
    (pkg / "stray.py").write_text("")
    assert sorted(check(pkg)) == [
        "pycage/__init__.py: pycage.stray is missing from the Layers list of pycage",
        "pycage/low.py:1: pycage.low imports pycage.high, but the Layers list of pycage (pycage/__init__.py) "
        "puts 'high' after 'low': an upward import",
        "pycage/sub/b.py:5: pycage.sub.b imports pycage.sub.a, but the Layers list of pycage.sub "
        "(pycage/sub/__init__.py) puts 'a' after 'b': an upward import",
        "pycage/sub/b.py:6: pycage.sub.b imports pycage.sub, its own package, whose __init__ comes after all "
        "of its modules: import the module that holds the name",
    ]
