"""What a failed run reports: the program's traceback, without pycage.

Tracebacks point at ``<program>`` lines (``linecache`` holds the source) and
show only the program's frames and those of the library code it called:
every frame of a file of this package is dropped, through the exception's
cause, context and group members. In a sandboxed child forked from the
zygote, file names are shown as the program sees them (``set_path_remaps``).
"""

import os
import traceback

from pycage._private import BUILTINS, clean

__builtins__ = BUILTINS

#: The directory of this package: its files' frames are never shown.
_OWN_DIR = os.path.dirname((lambda: None).__code__.co_filename) + os.sep
_type_name = type.__dict__["__name__"].__get__

#: Host path prefixes and where the program sees them: set by a zygote's
#: child that joined a sandbox (the zygote's modules were imported at host
#: paths), so tracebacks name files the program can see, with their lines.
_PATH_REMAPS = []


def set_path_remaps(remaps):
    """Use ``[(host_prefix, inside_prefix), ...]`` for traceback file names."""
    _PATH_REMAPS[:] = [(h, i) for h, i in remaps]


def inside_path(path):
    """``path`` as the program sees it."""
    for host, shown in _PATH_REMAPS:
        if path == host or path.startswith(host + "/"):
            return shown + path[len(host) :]
    return path


def _is_own(filename):
    return filename.startswith(_OWN_DIR) and os.sep not in filename[len(_OWN_DIR) :]


def _drop_own_frames(te):
    """Remove pycage's own frames from a TracebackException and its chain,
    and show the others' files as the program sees them."""
    seen = set()
    todo = [te]
    while todo:
        t = todo.pop()
        if t is None or id(t) in seen:
            continue
        seen.add(id(t))
        stack = t.stack
        kept = [f for f in stack if not _is_own(f.filename)]
        if len(kept) != len(stack):
            stack[:] = kept
        if _PATH_REMAPS:
            for f in stack:
                f.filename = inside_path(f.filename)
        todo.append(t.__cause__)
        todo.append(t.__context__)
        todo.extend(getattr(t, "exceptions", None) or ())


def format_exception(exc):
    """Traceback text pointing at ``<program>`` lines, without pycage's frames."""
    try:
        # Lines are looked up when formatted, after the file names moved.
        te = traceback.TracebackException(type(exc), exc, exc.__traceback__, lookup_lines=False)
        _drop_own_frames(te)
        text = "".join(te.format())
    except BaseException:
        try:
            text = f"{_type_name(type(exc))} (the exception could not be formatted)"
        except BaseException:
            text = "the program raised an exception that could not be formatted"
    return clean(text.rstrip("\n"))


def format_compile_error(exc, source):
    """A compile failure without a traceback: for a SyntaxError, its
    ``File "<program>", line N``, the line, a caret and the message."""
    try:
        if isinstance(exc, SyntaxError) and exc.text is None:
            lines = source.splitlines(True)
            lineno = exc.lineno
            if type(lineno) is int and 0 < lineno <= len(lines):
                exc.text = lines[lineno - 1]
        text = "".join(traceback.format_exception_only(type(exc), exc))
    except BaseException:
        text = f"{_type_name(type(exc))} (the error could not be formatted)"
    return clean(text.rstrip("\n"))
