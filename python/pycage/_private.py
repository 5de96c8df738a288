"""What every module of the child shares, kept out of the program's reach.

The program runs in the child's interpreter and may rebind anything it can
reach (``builtins.len = None``, ``print``, ``json.dumps``, ``sys.stdout``). So
the child keeps its own copies, taken at import, before any program runs:

* ``BUILTINS``, a private copy of the builtins dict. Each child module binds
  ``__builtins__ = BUILTINS`` right after its imports; a function takes its
  builtins from its module globals when it is created (CPython >= 3.10), so
  every function defined after that line resolves ``len``, ``type``,
  ``isinstance``... here, never in the shared, program-writable module.
  ``restore_builtins`` copies them back once the program finished, so the
  loop's own cleanup and traceback formatting work again (in a zygote's
  child, only when something changed them: see ``track_builtins``).
* C functions each module needs (``os.write``, the JSON pieces) are captured
  into module globals at import; the program rebinding ``sys.stdout``,
  ``json`` or ``asyncio`` attributes, or deleting ``sys.modules`` entries,
  does not reach them.
* ``private_class`` re-creates a class's Python methods over the private
  builtins: the event loop of a program that awaits at top level keeps
  working whatever the program does to ``builtins``.

Also here, because every module needs them: the exit statuses of a child
that stops without a ``done``, and the diagnostics written to fd 2.
"""

import builtins as _shared_builtins
import os
import sys
from types import FunctionType

#: Builtins as they were before any program ran.
BUILTINS = dict(_shared_builtins.__dict__)
__builtins__ = BUILTINS

#: Exit statuses without a ``done``: the host is gone (EOF or an error on
#: fd 3), the host sent a malformed frame, a bug in the child.
EXIT_HOST_GONE = 1
EXIT_BAD_HOST_FRAME = 2
EXIT_INTERNAL = 3


_os_write = os.write
# Absent before CPython 3.10.7, which had no int digit limit.
_set_int_max_str_digits = getattr(sys, "set_int_max_str_digits", None)
get_int_max_str_digits = getattr(sys, "get_int_max_str_digits", lambda: 0)
_os_exit = os._exit
_update_shared = _shared_builtins.__dict__.update


_shared_dict = _shared_builtins.__dict__

#: ``track_builtins``'s reader of a dict's modification tag, and the shared
#: builtins' tag after the last restore.
_tag_of = None
_restored_tag = None


def restore_builtins():
    """Put the shared builtins back as they were before the program ran."""
    global _restored_tag
    if _tag_of is not None and _restored_tag is not None and _tag_of(_shared_dict) == _restored_tag:
        return
    _update_shared(BUILTINS)
    if _tag_of is not None:
        _restored_tag = _tag_of(_shared_dict)


def track_builtins():
    """Let ``restore_builtins`` skip the copy when nothing changed the shared
    builtins since the last one, as a zygote's child finds them.

    The copy writes to the reference count of every builtin, and in a child
    forked from the zygote that copies about 90 shared pages (0.4-0.6 ms of
    CPU on a small VM, in every run). Whether the dict changed is read from its modification tag (PEP
    509's ``ma_version_tag``, which every change sets to a new value of a
    global counter: no program can set it back), through ``ctypes``, without
    touching a value. The zygote calls this once, before any program runs;
    the tag is used only where a probe shows the layout it is read from
    (CPython 3.10-3.13 with the GIL: the object header, ``ma_used``, the
    tag) and a tag that moves at every change; anywhere else the copy is
    made every time, as before.
    """
    global _tag_of
    _tag_of = _tag_reader()


def _tag_reader():
    if sys.implementation.name != "cpython" or not (3, 10) <= sys.version_info[:2] <= (3, 13):
        return None
    try:
        import ctypes
    except ImportError:
        return None
    word = ctypes.c_ssize_t.from_address
    tag = ctypes.c_uint64.from_address
    size = ctypes.sizeof(ctypes.c_void_p)

    def tag_of(d):
        return tag(id(d) + 3 * size).value

    probe = {"a": 1}
    # The header this reads through: ob_type, then ma_used, then the tag.
    if word(id(probe) + size).value != id(dict) or word(id(probe) + 2 * size).value != 1:
        return None
    seen = [tag_of(probe), tag_of(probe)]
    probe["a"] = 2
    seen.append(tag_of(probe))
    probe["b"] = 3
    seen.append(tag_of(probe))
    del probe["a"]
    seen.append(tag_of(probe))
    if seen[0] != seen[1] or len(set(seen[1:])) != 4:
        return None
    return tag_of


def diag(message):
    """Write a diagnostic of the child to the real stderr (fd 2)."""
    try:
        text = "pycage bootstrap: " + message + "\n"
        _os_write(2, text.encode("utf-8", "backslashreplace"))
    except OSError:
        pass


def die(status, message=None):
    """Exit at once with ``status``, saying why on fd 2 (never on fd 3)."""
    if message is not None:
        diag(message)
    _os_exit(status)


def clean(text):
    """``text`` made encodable as UTF-8 (lone surrogates become escapes)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def is_ident(s):
    """``s`` (a str) is an ASCII Python identifier, ``[A-Za-z_][A-Za-z0-9_]*``:
    namespace globals, error classes, members that read as attributes."""
    return s.isascii() and s.isidentifier()


def utf8_str(x):
    """``x`` is a ``str`` that encodes as UTF-8."""
    if type(x) is not str:
        return False
    try:
        x.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def unlimited_digits(func, arg):
    """``func(arg)`` with the interpreter's int digit limit lifted for the call."""
    limit = get_int_max_str_digits()
    if not limit:
        return func(arg)
    _set_int_max_str_digits(0)
    try:
        return func(arg)
    finally:
        _set_int_max_str_digits(limit)


def _private_function(func, globals_by_module):
    """``func`` re-created over a snapshot of its module globals whose
    ``__builtins__`` is the private copy (a function takes its builtins from
    its globals when it is created)."""
    source = func.__globals__
    private = globals_by_module.get(id(source))
    if private is None:
        private = dict(source)
        private["__builtins__"] = BUILTINS
        globals_by_module[id(source)] = private
    copy = FunctionType(func.__code__, private, func.__name__, func.__defaults__, func.__closure__)
    copy.__kwdefaults__ = func.__kwdefaults__
    copy.__qualname__ = func.__qualname__
    copy.__doc__ = func.__doc__
    copy.__module__ = func.__module__
    return copy


def private_class(cls):
    """A subclass of ``cls`` whose Python methods, through the MRO, are private
    re-creations: the loop's and selector's own code keeps working when the
    program rebinds ``builtins.len`` and the like. Calls made through
    ``super()`` still reach the originals; the per-iteration path
    (``_run_once``, ``select``, ``_process_events``, ``call_soon``) does not
    use ``super()``. The subclass keeps ``cls``'s name and module, so it
    reads as the class it copies (``channel`` recognizes asyncio's selector
    loops by their module)."""
    namespace = {}
    globals_by_module = {}
    for klass in reversed(cls.__mro__):
        for name, attr in vars(klass).items():
            kind = type(attr)
            if kind is FunctionType:
                namespace[name] = _private_function(attr, globals_by_module)
            elif kind is staticmethod or kind is classmethod:
                func = attr.__func__
                if type(func) is FunctionType:
                    func = _private_function(func, globals_by_module)
                namespace[name] = kind(func)
            else:  # a data attribute overriding a base method
                namespace.pop(name, None)
    namespace["__module__"] = cls.__module__
    namespace["__qualname__"] = cls.__qualname__
    return type(cls.__name__, (cls,), namespace)
