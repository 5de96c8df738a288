"""The program's namespaces: one object per ``boot`` namespace entry, whose
members send ``call`` frames, and one exception class per error class.

``boot_namespaces`` checks what the wire checker cannot (identifiers, names
no global may take, a global injected twice) and ``build_globals`` makes the
objects. A member is an async callable: keyword arguments cross as an
object, one positional argument as it is, none as ``{}``. Its call goes out
on fd 3 from whichever loop awaits it, or blocks without one
(``pycage.channel``). ``<member>.sync`` makes the same call without
``await``: it blocks the calling thread until the reply is in, with or
without a running loop, so a host can give a program plain functions (what
smolagents' prompts teach: ``result = web_search(query="x")``). It is an
attribute of the member, not of the namespace, so every member name stays
free. A name that is not a member raises ``AttributeError`` listing the
namespace's functions, the closest matches first.
"""

from warnings import warn

from pycage import _wire
from pycage._private import BUILTINS, EXIT_BAD_HOST_FRAME, die, is_ident, utf8_str
from pycage.channel import (
    Future,
    call_blocking,
    call_inline,
    get_running_loop,
    idle_wait,
    ids,
    pending,
    send,
    unwatch,
    watch,
)
from pycage.encoder import NotJsonError, encode_json
from pycage.memberdoc import document, stub_line

__builtins__ = BUILTINS

#: Module globals every program starts with, besides its namespaces and
#: error classes: those of a script read from stdin (``python3 -``), with
#: ``__file__`` set to ``<program>``.
SEEDED_GLOBALS = (
    "__annotations__",
    "__builtins__",
    "__cached__",
    "__doc__",
    "__file__",
    "__loader__",
    "__name__",
    "__package__",
    "__spec__",
)
#: Names no namespace global or error class may take: the seeded globals,
#: ``__debug__`` (a constant the compiler owns), the builtins the child adds
#: (``display``), and the globals other
#: pycage runtimes own (``console``, ``__dsh_main__``), so one binding list
#: stays valid for every runtime. The host lists the same names
#: (``RUNTIME_GLOBALS`` in crates/pycage-runtime/src/names.rs; a test
#: compares them).
RESERVED_GLOBALS = frozenset(SEEDED_GLOBALS + ("__debug__", "__dsh_main__", "console", "display"))
#: Functions an unknown-member error lists at most.
_LISTED_MEMBERS = 40
#: Close matches an unknown-member error puts first.
_CLOSE_MATCHES = 3
#: The longest signature line a refused call quotes.
_USAGE_CHARS = 400

_encode_call = _wire.encode_call
_object_getattribute = object.__getattribute__


def _bad_boot(what):
    die(EXIT_BAD_HOST_FRAME, f"malformed boot frame: {what}")


def boot_namespaces(boot):
    """``[(global, names, error_class, (doc, docs))]`` of a checked ``boot``
    frame; exits when an entry cannot be injected."""
    seen = set()
    namespaces = []
    for entry in boot["namespaces"]:
        glob = entry["global"]
        names = entry["names"]
        error_class = entry.get("errorClass")
        if not is_ident(glob) or glob in RESERVED_GLOBALS:
            _bad_boot(f"namespace global {glob!r} is not a usable identifier")
        if not all(utf8_str(name) for name in names):
            _bad_boot(f"names of {glob} must be UTF-8 strings")
        injected = [glob]
        if error_class is not None:
            class_name = error_class["name"]
            prop = error_class["memberNameProperty"]
            if not is_ident(class_name) or class_name in RESERVED_GLOBALS:
                _bad_boot(f"errorClass name {class_name!r} is not a usable identifier")
            if not utf8_str(prop) or not prop:
                _bad_boot(f"memberNameProperty of {class_name} must be a non-empty string")
            error_class = (class_name, prop)
            injected.append(class_name)
        for name in injected:
            if name in seen:
                _bad_boot(f"global {name} is injected twice")
            seen.add(name)
        doc = entry.get("doc")
        docs = entry.get("docs", {})
        if doc is not None and not utf8_str(doc):
            _bad_boot(f"doc of {glob} must be UTF-8")
        if not all(utf8_str(d) for d in docs.values()):
            _bad_boot(f"docs of {glob} must be UTF-8")
        namespaces.append((glob, names, error_class, (doc, docs)))
    return namespaces


def _call_label(glob, name):
    return f"{glob}.{name}" if is_ident(name) else f"getattr({glob}, {name!r})"


def _usage(member):
    """``; call it as: <signature>``, or nothing: what a model needs to fix a
    call the convention refused."""
    line = stub_line(member)
    if line is None or len(line) >= _USAGE_CHARS:
        return ""
    return f"; call it as: {line}"


def _call_payload(label, args, kwargs, member):
    """The JSON text a call sends: keyword arguments as an object, one
    positional argument as it is, no argument as ``{}``. ``member``'s stub
    line is quoted when the arguments are refused."""
    if kwargs:
        if args:
            raise TypeError(
                f"{label}() takes keyword arguments or one positional argument, not both "
                f"(got {len(args)} positional and {len(kwargs)} keyword){_usage(member)}"
            )
        value = kwargs
    elif len(args) == 1:
        value = args[0]
    elif not args:
        value = {}
    else:
        raise TypeError(
            f"{label}() takes keyword arguments or one positional argument ({len(args)} positional given)"
            + _usage(member)
        )
    try:
        return encode_json(value)
    except NotJsonError as e:
        raise TypeError(f"argument of {label}() is not JSON: {e}") from None


def _settle(ok, result, name, error_class, prop):
    """A call's value, or its failure raised as the program sees it."""
    if ok:
        return result
    if error_class is None:
        raise RuntimeError(result)
    error = error_class(result)
    setattr(error, prop, name)
    raise error


def _make_member(glob, name, error_class, prop):
    """The async callable behind ``<glob>.<name>``, with its blocking form
    as ``.sync``."""
    label = _call_label(glob, name)

    async def member(*args, **kwargs):
        payload = _call_payload(label, args, kwargs, member)
        call_id = next(ids)
        frame = _encode_call(call_id, glob, name, payload)
        loop = get_running_loop()
        timeout = idle_wait(loop) if loop is not None else None
        if timeout is not None:
            # Nothing else to run: answer it here, without a loop iteration
            # (the sequential-await fast path), unless the loop must take over.
            try:
                answered, reply = call_inline(loop, call_id, frame, timeout)
                if answered:
                    ok, result = reply
                else:
                    try:
                        ok, result = await reply
                    finally:
                        unwatch(loop)
            finally:
                pending.pop(call_id, None)
        elif loop is not None and watch(loop):
            try:
                future = Future(loop=loop)
                pending[call_id] = future
                send(frame)
                ok, result = await future
            finally:
                pending.pop(call_id, None)
                unwatch(loop)
        else:
            ok, result = call_blocking(call_id, frame)
        return _settle(ok, result, name, error_class, prop)

    def sync(*args, **kwargs):
        # Blocks this thread even when a loop runs on it: the caller asked
        # for a plain function. Replies of the loop's own calls that arrive
        # meanwhile settle their futures (``call_blocking`` dispatches every
        # reply it reads), so those calls go on once this one returns.
        payload = _call_payload(label + ".sync", args, kwargs, member)
        call_id = next(ids)
        ok, result = call_blocking(call_id, _encode_call(call_id, glob, name, payload))
        return _settle(ok, result, name, error_class, prop)

    member.__name__ = sync.__name__ = name
    member.__qualname__ = f"{glob}.{name}"
    sync.__qualname__ = f"{glob}.{name}.sync"
    sync.__doc__ = f"{label}(...) without await: blocks until the host replies, and returns its value."
    member.sync = sync
    return member


def _close_matches(attr, members):
    """Up to ``_CLOSE_MATCHES`` member names like ``attr``, best first."""
    try:
        # Imported on first use: only a failing program pays for it.
        from difflib import get_close_matches
    except ImportError:  # the program broke the import system
        return []
    try:
        return get_close_matches(attr, list(members), _CLOSE_MATCHES)
    except Exception:  # the program broke difflib's dependencies
        return []


def missing_member_message(glob, attr, members):
    """What ``<glob>.<attr>`` raises when ``attr`` is not a member: the
    functions it has, the closest matches first, so a model can correct
    itself. Bounded: at most ``_LISTED_MEMBERS`` names."""
    if not members:
        return f"namespace {glob!r} has no function {attr!r}; it has no functions"
    close = _close_matches(attr, members) if type(attr) is str else []
    listed = close + sorted(name for name in members if name not in close)
    shown = ", ".join(repr(name) for name in listed[:_LISTED_MEMBERS])
    if len(listed) > _LISTED_MEMBERS:
        shown += f", ... ({len(listed) - _LISTED_MEMBERS} more)"
    hint = f"; did you mean {close[0]!r}?" if close else "."
    return f"namespace {glob!r} has no function {attr!r}{hint} Its functions: {shown}."


def _summary(glob, name, member):
    """One line of ``help(<glob>)`` for a member: its signature, else how to
    call it."""
    line = stub_line(member)
    return f"{_call_label(glob, name)}(...)" if line is None else line


def namespace_help(glob, members, doc):
    """What ``help(<glob>)`` shows: the host's text, then one line per
    function. Made when asked for, so a run that never asks pays nothing."""
    lines = [f"  {_summary(glob, name, member)}" for name, member in members.items()]
    listing = "Functions:\n" + "\n".join(lines) if lines else "It has no functions."
    return f"{doc}\n\n{listing}" if doc else listing


def _make_namespace(glob, members, doc=None):
    """The program's ``<glob>`` object: every member name, dunders included,
    is an attribute; other dunders fall back to ``object``. ``help(<glob>)``
    shows ``doc`` and the functions (``namespace_help``): the object has
    its own ``__doc__``, so pydoc documents it, not its class's methods."""

    def __getattribute__(self, attr):
        try:
            return members[attr]
        except KeyError:
            pass
        if attr[:2] == "__" and attr[-2:] == "__":
            return _object_getattribute(self, attr)
        raise AttributeError(missing_member_message(glob, attr, members), name=attr)

    def __setattr__(self, attr, value):
        raise AttributeError(f"namespace {glob!r} is read-only")

    def __repr__(self):
        return f"<pycage namespace {glob} ({len(members)} members)>"

    def __dir__(self):
        return list(members)

    cls = type(
        "Namespace",
        (),
        {
            "__slots__": (),
            "__getattribute__": __getattribute__,
            "__setattr__": __setattr__,
            "__delattr__": __setattr__,
            "__repr__": __repr__,
            "__dir__": __dir__,
            "__module__": "pycage",
            "__doc__": property(lambda self: namespace_help(glob, members, doc)),
        },
    )
    return cls()


def _deprecated_member(prop):
    """``.member``, the Python package's old name for the failed member
    (before every interface settled on ``.tool``): it still reads, with a
    ``DeprecationWarning`` naming the attribute to use, for one release."""

    def member(self):
        warn(
            f"{type(self).__name__}.member is deprecated; use .{prop}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(self, prop, None)

    return property(member)


def build_globals(namespaces):
    """The globals a program gets from ``boot``: namespace objects and error
    classes by name."""
    injected = {}
    for glob, names, error_class, (ns_doc, docs) in namespaces:
        cls = prop = None
        if error_class is not None:
            class_name, prop = error_class
            doc = f"Raised when a call on {glob} fails; attribute {prop!r} names the member."
            body = {"__module__": "__main__", "__qualname__": class_name, "__doc__": doc}
            if prop != "member":
                body["member"] = _deprecated_member(prop)
            cls = type(class_name, (Exception,), body)
            injected[class_name] = cls
        members = {name: _make_member(glob, name, cls, prop) for name in names}
        for name, text in docs.items():
            if name in members:
                document(members[name], text)
        injected[glob] = _make_namespace(glob, members, ns_doc)
    return injected
