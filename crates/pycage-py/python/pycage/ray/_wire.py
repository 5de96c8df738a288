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

# Per namespace: its global, (member name, what help() shows for it,
# whether it needs approval) triples, and its error class; the callables
# stay in the driver.
WireSpec = list[tuple[str, list[tuple[str, str, bool]], Optional[tuple[str, str]]]]

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
    """Bindings' namespace specs without their callables (a member marked
    with :func:`pycage.approval` says so: its stand-in on the node is
    marked too, so that a call to it suspends the node's run)."""

    def approval(func: Any) -> bool:
        return getattr(func, "__pycage_approval__", False) is True

    return [
        (glob, [(name, help, approval(func)) for name, func, _, help in funcs], error_class)
        for glob, funcs, error_class, _ in specs
    ]


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
    packer = _Packer(max_bytes, _TOO_BIG)
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
        out.append((name, packer.walk(host, name, 0, lambda what, given=given: _invalid(f"input {given}: {what}"))))
    return out


def pack_dir(path: str, max_bytes: int) -> Tree:
    """The tree under the directory ``path`` (a node's copy of ``out/``:
    only directories and regular files, within ``max_bytes``)."""
    packer = _Packer(max_bytes, f"more than {max_bytes} bytes")
    tree: Tree = []
    for entry in sorted(os.listdir(path)):
        tree += packer.walk(os.path.join(path, entry), entry, 1, lambda what: PycageError(f"out/ on the node: {what}"))
    return tree


_TOO_BIG = (
    "the inputs of one run hold more than the max_input_bytes of this RayRuntime, which carries them to a node; "
    "raise it (RayRuntime(max_input_bytes=...)) or put large data on the nodes (allow_read)"
)


class _Packer:
    """Walks trees into :data:`Tree` values without following a symlink,
    within one budget of bytes and entries for all of them."""

    def __init__(self, max_bytes: int, too_big: str) -> None:
        self.bytes_left = max_bytes
        self.entries_left = MAX_INPUT_ENTRIES
        self.too_big = too_big

    def walk(self, host: str, rel: str, depth: int, fail: Callable[[str], Exception]) -> Tree:
        """``host`` (named ``rel``) and what it holds; ``fail(what)`` is
        raised past the budget, for a special file, or when an entry cannot
        be read."""
        tree: Tree = []
        stack = [(host, rel, depth)]
        while stack:
            host, rel, depth = stack.pop()
            try:
                stack += self._entry(host, rel, depth, tree, fail)
            except OSError as e:
                raise fail(f"{rel}: {_os_error(e)}") from None
        return tree

    def _entry(
        self, host: str, rel: str, depth: int, tree: Tree, fail: Callable[[str], Exception]
    ) -> list[tuple[str, str, int]]:
        """Appends one entry to ``tree``; a directory's entries, to walk."""
        self.entries_left -= 1
        if self.entries_left < 0:
            raise fail(
                f"more than {MAX_INPUT_ENTRIES} entries in the files of one run, which a RayRuntime carries "
                "between the driver and a node; put large data on the nodes (allow_read)"
            )
        st = os.lstat(host)
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            tree.append(("l", rel, os.fsencode(os.readlink(host)), 0o777))
        elif stat.S_ISREG(st.st_mode):
            self.bytes_left -= st.st_size
            if self.bytes_left < 0:
                raise fail(self.too_big)
            with open(host, "rb") as f:
                data = f.read(st.st_size + 1)
            tree.append(("f", rel, data[: st.st_size], mode))  # one that grew is cut, as the native copy does
        elif stat.S_ISDIR(st.st_mode):
            if depth >= MAX_DEPTH:
                raise fail(f"deeper than {MAX_DEPTH} levels ({rel})")
            tree.append(("d", rel, None, mode))
            return [(os.path.join(host, e), f"{rel}/{e}", depth + 1) for e in sorted(os.listdir(host), reverse=True)]
        else:
            raise fail(f"{rel} is a special file (a device, FIFO or socket), which cannot be carried to a Ray node")
        return []


def _safe(rel: str) -> bool:
    parts = rel.split("/")
    return bool(rel) and "\0" not in rel and all(p not in ("", ".", "..") for p in parts)


def unpack(tree: Tree, dest: str) -> None:
    """Writes ``tree`` under the directory ``dest`` (created; nothing in it
    may exist yet). Refuses a path that would leave ``dest``, or lead
    through a symlink it made."""
    os.makedirs(dest, exist_ok=True)
    links: set[str] = set()
    for kind, rel, data, mode in tree:
        parents = rel.split("/")[:-1]
        if not _safe(rel) or any("/".join(parents[: i + 1]) in links for i in range(len(parents))):
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
            links.add(rel)
        else:
            raise PycageError(f"a file tree from the other end has an entry of unknown kind {kind!r}")
