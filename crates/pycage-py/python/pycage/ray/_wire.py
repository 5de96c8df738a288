"""What crosses between the driver and a node, besides Ray's own calls:
bindings without their callables (:func:`wire`), and file trees as values
(:func:`pack_inputs`, :func:`pack_dir`, :func:`unpack`): a run's
``inputs`` are the caller's files, read on the driver and written on the
node; what the program leaves in ``out/`` comes back the other way, into
the caller's ``output_dir``. Nodes and the driver need share no
filesystem.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import Any, Optional

from ..errors import PycageError

__all__ = ["NoLiveNodeError", "WireSpec", "Tree", "wire", "pack_inputs", "pack_dir", "unpack"]

# Per namespace: its global, (member name, what help() shows for it)
# pairs, and its error class; the callables stay in the driver.
WireSpec = list[tuple[str, list[tuple[str, str]], Optional[tuple[str, str]]]]

#: A file tree: ``(kind, path, data, mode)`` in walk order (a directory
#: before what it holds). ``kind``: ``"d"`` a directory, ``"f"`` a regular
#: file (``data`` its bytes), ``"l"`` a symlink (``data`` its target, as
#: bytes). ``path`` is relative, ``/``-separated; ``mode`` the permission
#: bits.
Tree = list[tuple[str, str, Optional[bytes], int]]

CLOSED = "it was closed, or the runtime was shut down"
"""Why a closed session ended (the local runtime's words)."""

#: Directory levels below an input, as a local process-isolated run copies it.
MAX_DEPTH = 256
#: Entries of all of a run's inputs together.
MAX_INPUT_ENTRIES = 100_000


class NoLiveNodeError(PycageError):
    """No node of the Ray cluster can take the run: every :class:`CageNode`
    died (or none matched the ``resource`` filter)."""


def wire(specs: list[Any]) -> WireSpec:
    """Bindings' namespace specs without their callables."""
    return [(glob, [(name, help) for name, _, _, help in funcs], error_class) for glob, funcs, error_class, _ in specs]


def first_line(text: str, limit: int = 200) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _os_error(e: OSError) -> str:
    """An OS error as the native runtime words it (Rust's ``io::Error``)."""
    code = e.errno if e.errno is not None else 0
    return f"{os.strerror(code)} (os error {code})"


def _absolute(given: str) -> str:
    """``std::path::absolute``: joined to the working directory, ``.``
    components and repeated or trailing slashes dropped, ``..`` kept."""
    path = given if given.startswith("/") else os.path.join(os.getcwd(), given)
    parts = [p for p in path.split("/") if p not in ("", ".")]
    return "/" + "/".join(parts)


def _invalid(message: str) -> PycageError:
    return PycageError(f"invalid input: {message}")


def pack_inputs(inputs: list[str], max_bytes: int) -> list[tuple[str, Tree]]:
    """The caller's inputs as ``(base name, tree)`` pairs, checked as the
    native runtime checks them (the same messages), within ``max_bytes`` of
    file content and :data:`MAX_INPUT_ENTRIES` entries."""
    out: list[tuple[str, Tree]] = []
    budget = [max_bytes, MAX_INPUT_ENTRIES]
    names: set[str] = set()
    for given in inputs:
        host = _absolute(given)
        try:
            os.lstat(host)
        except OSError as e:
            raise _invalid(f"input {given}: {_os_error(e)}") from None
        name = host.rsplit("/", 1)[-1]
        if not name or name == "..":
            raise _invalid(f"input {given} has no base name")
        if name == "out":
            raise _invalid(f"input {given}: the name `out` is the output directory")
        if name in names:
            raise _invalid(f'two inputs are named "{name}"; each appears under its base name')
        names.add(name)
        tree: Tree = []
        _walk(host, name, 0, tree, budget, lambda what, given=given: _invalid(f"input {given}: {what}"))
        out.append((name, tree))
    return out


def pack_dir(path: str, max_bytes: int) -> Tree:
    """The tree under the directory ``path`` (a node's copy of ``out/``:
    only directories and regular files, within ``max_bytes``)."""
    tree: Tree = []
    budget = [max_bytes, MAX_INPUT_ENTRIES]
    for entry in sorted(os.listdir(path)):
        _walk(os.path.join(path, entry), entry, 1, tree, budget, lambda what: PycageError(f"out/ on the node: {what}"))
    return tree


def _walk(host: str, rel: str, depth: int, tree: Tree, budget: list[int], fail: Callable[[str], Exception]) -> None:
    """Appends ``host`` (as ``rel``) and what it holds to ``tree``,
    without following a symlink; ``budget``: the bytes and entries left
    (``fail(what)`` is raised past them)."""
    stack = [(host, rel, depth)]
    while stack:
        host, rel, depth = stack.pop()
        budget[1] -= 1
        if budget[1] < 0:
            raise fail(
                f"more than {MAX_INPUT_ENTRIES} entries in the files of one run, which a RayRuntime carries "
                "between the driver and a node; put large data on the nodes (allow_read)"
            )
        st = os.lstat(host)
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            tree.append(("l", rel, os.fsencode(os.readlink(host)), 0o777))
        elif stat.S_ISREG(st.st_mode):
            budget[0] -= st.st_size
            if budget[0] < 0:
                raise fail(
                    "the inputs of one run hold more than the max_input_bytes of this RayRuntime, which "
                    "carries them to a node; raise it (RayRuntime(max_input_bytes=...)) or put large data "
                    "on the nodes (allow_read)"
                )
            with open(host, "rb") as f:
                data = f.read(st.st_size + 1)
            if len(data) > st.st_size:  # grew while read: cut, as the native copy does
                data = data[: st.st_size]
            tree.append(("f", rel, data, mode))
        elif stat.S_ISDIR(st.st_mode):
            if depth >= MAX_DEPTH:
                raise fail(f"deeper than {MAX_DEPTH} levels ({rel})")
            tree.append(("d", rel, None, mode))
            for entry in sorted(os.listdir(host), reverse=True):
                stack.append((os.path.join(host, entry), f"{rel}/{entry}", depth + 1))
        else:
            raise fail(f"{rel} is a special file (a device, FIFO or socket), which cannot be carried to a Ray node")


def _safe(rel: str) -> bool:
    parts = rel.split("/")
    return bool(rel) and "\0" not in rel and all(p not in ("", ".", "..") for p in parts)


def unpack(tree: Tree, dest: str) -> None:
    """Writes ``tree`` under the directory ``dest`` (created; nothing in it
    may exist yet). Refuses a path that would leave ``dest``; never follows
    a symlink it made."""
    os.makedirs(dest, exist_ok=True)
    for kind, rel, data, mode in tree:
        if not _safe(rel):
            raise PycageError(f"a file tree from the other end names an unsafe path: {rel!r}")
        target = os.path.join(dest, rel)
        if kind == "d":
            os.mkdir(target, 0o755)
        elif kind == "f":
            exec_bits = 0o111 if mode & 0o100 else 0
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644 | exec_bits)
            with os.fdopen(fd, "wb") as f:
                f.write(data or b"")
        elif kind == "l":
            os.symlink(os.fsdecode(data or b""), target)
        else:
            raise PycageError(f"a file tree from the other end has an entry of unknown kind {kind!r}")
