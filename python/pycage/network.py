"""Saying so when a run has no network.

A sandboxed run without an allow-list has no network: names do not resolve
(no resolver is reachable) and internet sockets cannot even be made
(seccomp refuses them). Python reports that as ``[Errno -2] Name or
service not known`` or ``[Errno 1] Operation not permitted``, which reads
like a typo or a broken machine. ``install`` (at the child's import, so a
zygote's children inherit it) wraps the socket module's name lookups and
its socket constructor: when one of them fails and the run cannot make an
internet socket at all, the error's message says that the run has no
network and how to allow a host. The exception is the same one, of the same
type and errno, raised from the same place; only its text grows. A run with
network (process isolation, or an allow-list) sees every error unchanged,
and nothing is checked before a call fails.
"""

import _socket
import socket

from pycage._private import BUILTINS

__builtins__ = BUILTINS

HINT = (
    "this run has no network: allow a host with --allow-net HOST[:PORT] for pycage run, repl and mcp, "
    "or allow_net=[...] for pycage.Runtime"
)

_INET = (_socket.AF_INET, getattr(_socket, "AF_INET6", _socket.AF_INET))
_probe = _socket.socket
_no_network = []


def has_no_network():
    """Whether this process cannot make an internet socket (seccomp refuses
    it in a sandbox without an allow-list). Asked once, when a call failed."""
    if not _no_network:
        try:
            _probe(_socket.AF_INET, _socket.SOCK_STREAM).close()
        except PermissionError:
            _no_network.append(True)
        except OSError:
            _no_network.append(False)
        else:
            _no_network.append(False)
    return _no_network[0]


def _explain(e):
    """Add the hint to ``e``'s message, when the run has no network."""
    try:
        if has_no_network() and HINT not in str(e.strerror):
            e.strerror = f"{e.strerror} ({HINT})"
            e.args = (e.errno, e.strerror)
    except Exception:
        pass


def _wrap(lookup):
    def wrapper(*args, **kwargs):
        try:
            return lookup(*args, **kwargs)
        except OSError as e:
            _explain(e)
            raise

    wrapper.__name__ = lookup.__name__
    wrapper.__qualname__ = getattr(lookup, "__qualname__", lookup.__name__)
    wrapper.__doc__ = lookup.__doc__
    wrapper.__module__ = "socket"
    wrapper.__wrapped__ = lookup
    return wrapper


def _wrap_init(init):
    def __init__(self, family=-1, type=-1, proto=-1, fileno=None):
        try:
            init(self, family, type, proto, fileno)
        except PermissionError as e:
            if fileno is None and (family == -1 or family in _INET):
                _explain(e)
            raise

    __init__.__doc__ = init.__doc__
    __init__.__qualname__ = init.__qualname__
    __init__.__module__ = init.__module__
    __init__.__wrapped__ = init
    return __init__


def install():
    """Wrap the socket module's name lookups and ``socket.socket`` (once)."""
    if getattr(socket.getaddrinfo, "__wrapped__", None) is not None:
        return
    for name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr"):
        setattr(socket, name, _wrap(getattr(socket, name)))
    socket.socket.__init__ = _wrap_init(socket.socket.__init__)
