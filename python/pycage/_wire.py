"""The fd-3 wire's frames, generated from the Rust table: do not edit.

Written by ``cargo run -p pycage-protocol --example gen-wire`` from ``FRAME_FIELDS`` in
``crates/pycage-protocol/src/table.rs``; ``crates/pycage-protocol/tests/mirror.rs`` fails when
this file differs from what the generator writes, and runs it against the host's encoders
and validator (docs/protocol.md).

``encode_<shape>`` builds what the child sends: a top-level frame as one line of bytes
(newline included), a nested shape as JSON text. ``str`` arguments must be encodable as
UTF-8; a JSON-typed argument is canonical JSON text from the codec. ``check_<shape>``
takes a decoded host frame and returns None when it has exactly its fields, each of its
type, else a message naming what is wrong; ``check_<type>`` picks the variant of a
frame type that has several.

Shapes (``?``: optional):

* ``boot`` (host): First host frame: limits (0 = unset) and namespaces; session: keep serving
  runs. Fields: type: "boot", cpuSeconds: uint, addressSpaceBytes: uint, maxLogBytes: uint,
  maxValueBytes: uint, maxDisplayBytes: uint, namespaces: [namespace], session?: bool, output?:
  bool.
* ``namespace`` (host): One entry of boot.namespaces: a global, its member names, their docs.
  Fields: global: str, names: [str], errorClass?: errorClass, doc?: str, docs?: {str: str}.
* ``errorClass`` (host): namespace.errorClass: the class failed calls raise, and its member-name
  attribute. Fields: name: str, memberNameProperty: str.
* ``run`` (host): The program; in a session, the run's own budgets; sysPath: the run's package
  directories; seed: random's seed (a durable run's). Fields: type: "run", program: str,
  cpuSeconds?: uint, maxLogBytes?: uint, maxValueBytes?: uint, maxDisplayBytes?: uint, sysPath?:
  [str], seed?: uint.
* ``reply-ok`` (host): A binding call that succeeded. Fields: type: "reply", id: uint, ok: true,
  value: JSON.
* ``reply-error`` (host): A binding call that failed; the program sees an exception. Fields:
  type: "reply", id: uint, ok: false, message: str.
* ``boot-ack`` (child): Limits are applied; ready for run. Fields: type: "boot-ack".
* ``call`` (child): A binding call; args is present even when null. Fields: type: "call", id:
  uint, global: str, name: str, args: JSON.
* ``log`` (child): Captured program output; truncated only on the ledger's marker. Fields: type:
  "log", text: str, truncated?: true.
* ``display`` (child): Rich output: MIME type to text (base64 if binary); truncated: the
  ledger's marker. Fields: type: "display", data: {str: str}, metadata?: {str: JSON}, truncated?:
  true.
* ``done`` (child): The run settled: a value, no value, or an error (never both). Fields: type:
  "done", value?: JSON, error?: done-error.
* ``done-error`` (child): done.error: what failed and the message. Fields: kind:
  exception|invalid-output|output-limit, message: str.
"""

from json.encoder import encode_basestring as _quote

from pycage._private import BUILTINS

# Functions here resolve builtins in the private copy (see _private).
__builtins__ = BUILTINS

_int_repr = int.__repr__

#: The child's end of the duplex channel (a Unix socketpair).
PROTOCOL_FD = 3
#: The values ``done-error.kind`` may take.
DONE_ERROR_KIND_VALUES = ("exception", "invalid-output", "output-limit")


def log_truncation_marker(max_bytes):
    """The log line that marks where a ``max_bytes`` log ledger ran out."""
    return "[pycage] log capture truncated at " + _int_repr(max_bytes) + " bytes"


def display_truncation_marker(max_bytes):
    """The text of the display that marks where a ``max_bytes`` display ledger ran out."""
    return "[pycage] display output truncated at " + _int_repr(max_bytes) + " bytes"


def encode_boot_ack():
    """``boot-ack`` as one line: Limits are applied; ready for run."""
    return ('{"type":"boot-ack"}\n').encode("utf-8")


def encode_call(id, global_, name, args):
    """``call`` as one line: A binding call; args is present even when null."""
    return (
        f'{{"type":"call","id":{_int_repr(id)},"global":{_quote(global_)},"name":{_quote(name)},"args":{args}}}\n'
    ).encode("utf-8")


def encode_log(text, truncated=False):
    """``log`` as one line: Captured program output; truncated only on the ledger's marker."""
    s = f'{{"type":"log","text":{_quote(text)}'
    if truncated:
        s += ',"truncated":true'
    return (s + "}\n").encode("utf-8")


def encode_display(data, metadata=None, truncated=False):
    """``display`` as one line: Rich output: MIME type to text (base64 if binary); truncated: the ledger's marker."""
    s = f'{{"type":"display","data":{"{" + ",".join([_quote(k) + ":" + _quote(v) for k, v in data.items()]) + "}"}'
    if metadata is not None:
        s += ',"metadata":' + metadata
    if truncated:
        s += ',"truncated":true'
    return (s + "}\n").encode("utf-8")


def encode_done(value=None, error=None):
    """``done`` as one line: The run settled: a value, no value, or an error (never both)."""
    s = '{"type":"done"'
    if value is not None:
        s += ',"value":' + value
    if error is not None:
        s += ',"error":' + error
    return (s + "}\n").encode("utf-8")


def encode_done_error(kind, message):
    """``done-error`` as JSON text: done.error: what failed and the message."""
    if kind not in DONE_ERROR_KIND_VALUES:
        raise ValueError("done-error.kind is not a known value")
    return f'{{"kind":{_quote(kind)},"message":{_quote(message)}}}'


_BOOT_REQUIRED = (
    "type",
    "cpuSeconds",
    "addressSpaceBytes",
    "maxLogBytes",
    "maxValueBytes",
    "maxDisplayBytes",
    "namespaces",
)
_BOOT_REQUIRED_SET = frozenset(_BOOT_REQUIRED)
_BOOT_OPTIONAL = ("session", "output")
_BOOT_KNOWN = frozenset(_BOOT_REQUIRED + _BOOT_OPTIONAL)


def check_boot(frame, where="boot"):
    """None when ``frame`` is a well-formed ``boot``, else the problem."""
    if type(frame) is not dict:
        return where + " must be an object"
    keys = frame.keys()
    if not (keys <= _BOOT_KNOWN and keys >= _BOOT_REQUIRED_SET):
        return _key_problem(where, keys, _BOOT_REQUIRED, _BOOT_KNOWN)
    v = frame["type"]
    if v != "boot":
        return where + '.type must be "boot"'
    v = frame["cpuSeconds"]
    if type(v) is not int or v < 0:
        return where + ".cpuSeconds must be a non-negative integer"
    v = frame["addressSpaceBytes"]
    if type(v) is not int or v < 0:
        return where + ".addressSpaceBytes must be a non-negative integer"
    v = frame["maxLogBytes"]
    if type(v) is not int or v < 0:
        return where + ".maxLogBytes must be a non-negative integer"
    v = frame["maxValueBytes"]
    if type(v) is not int or v < 0:
        return where + ".maxValueBytes must be a non-negative integer"
    v = frame["maxDisplayBytes"]
    if type(v) is not int or v < 0:
        return where + ".maxDisplayBytes must be a non-negative integer"
    v = frame["namespaces"]
    if type(v) is not list:
        return where + ".namespaces must be a list"
    for index, item in enumerate(v):
        problem = check_namespace(item, f"{where}.namespaces[{index}]")
        if problem is not None:
            return problem
    if "session" in frame:
        v = frame["session"]
        if type(v) is not bool:
            return where + ".session must be a boolean"
    if "output" in frame:
        v = frame["output"]
        if type(v) is not bool:
            return where + ".output must be a boolean"
    return None


_NAMESPACE_REQUIRED = ("global", "names")
_NAMESPACE_REQUIRED_SET = frozenset(_NAMESPACE_REQUIRED)
_NAMESPACE_OPTIONAL = ("errorClass", "doc", "docs")
_NAMESPACE_KNOWN = frozenset(_NAMESPACE_REQUIRED + _NAMESPACE_OPTIONAL)


def check_namespace(frame, where="namespace"):
    """None when ``frame`` is a well-formed ``namespace``, else the problem."""
    if type(frame) is not dict:
        return where + " must be an object"
    keys = frame.keys()
    if not (keys <= _NAMESPACE_KNOWN and keys >= _NAMESPACE_REQUIRED_SET):
        return _key_problem(where, keys, _NAMESPACE_REQUIRED, _NAMESPACE_KNOWN)
    v = frame["global"]
    if type(v) is not str:
        return where + ".global must be a string"
    v = frame["names"]
    if type(v) is not list or not all(type(x) is str for x in v):
        return where + ".names must be a list of strings"
    if "errorClass" in frame:
        v = frame["errorClass"]
        problem = check_error_class(v, where + ".errorClass")
        if problem is not None:
            return problem
    if "doc" in frame:
        v = frame["doc"]
        if type(v) is not str:
            return where + ".doc must be a string"
    if "docs" in frame:
        v = frame["docs"]
        if type(v) is not dict or not all(type(x) is str for x in v.values()):
            return where + ".docs must be an object of strings"
    return None


_ERROR_CLASS_REQUIRED = ("name", "memberNameProperty")
_ERROR_CLASS_KNOWN = frozenset(_ERROR_CLASS_REQUIRED)


def check_error_class(frame, where="errorClass"):
    """None when ``frame`` is a well-formed ``errorClass``, else the problem."""
    if type(frame) is not dict:
        return where + " must be an object"
    keys = frame.keys()
    if keys != _ERROR_CLASS_KNOWN:
        return _key_problem(where, keys, _ERROR_CLASS_REQUIRED, _ERROR_CLASS_KNOWN)
    v = frame["name"]
    if type(v) is not str:
        return where + ".name must be a string"
    v = frame["memberNameProperty"]
    if type(v) is not str:
        return where + ".memberNameProperty must be a string"
    return None


_RUN_REQUIRED = ("type", "program")
_RUN_REQUIRED_SET = frozenset(_RUN_REQUIRED)
_RUN_OPTIONAL = ("cpuSeconds", "maxLogBytes", "maxValueBytes", "maxDisplayBytes", "sysPath", "seed")
_RUN_KNOWN = frozenset(_RUN_REQUIRED + _RUN_OPTIONAL)


def check_run(frame, where="run"):
    """None when ``frame`` is a well-formed ``run``, else the problem."""
    if type(frame) is not dict:
        return where + " must be an object"
    keys = frame.keys()
    if not (keys <= _RUN_KNOWN and keys >= _RUN_REQUIRED_SET):
        return _key_problem(where, keys, _RUN_REQUIRED, _RUN_KNOWN)
    v = frame["type"]
    if v != "run":
        return where + '.type must be "run"'
    v = frame["program"]
    if type(v) is not str:
        return where + ".program must be a string"
    if "cpuSeconds" in frame:
        v = frame["cpuSeconds"]
        if type(v) is not int or v < 0:
            return where + ".cpuSeconds must be a non-negative integer"
    if "maxLogBytes" in frame:
        v = frame["maxLogBytes"]
        if type(v) is not int or v < 0:
            return where + ".maxLogBytes must be a non-negative integer"
    if "maxValueBytes" in frame:
        v = frame["maxValueBytes"]
        if type(v) is not int or v < 0:
            return where + ".maxValueBytes must be a non-negative integer"
    if "maxDisplayBytes" in frame:
        v = frame["maxDisplayBytes"]
        if type(v) is not int or v < 0:
            return where + ".maxDisplayBytes must be a non-negative integer"
    if "sysPath" in frame:
        v = frame["sysPath"]
        if type(v) is not list or not all(type(x) is str for x in v):
            return where + ".sysPath must be a list of strings"
    if "seed" in frame:
        v = frame["seed"]
        if type(v) is not int or v < 0:
            return where + ".seed must be a non-negative integer"
    return None


_REPLY_OK_REQUIRED = ("type", "id", "ok", "value")
_REPLY_OK_KNOWN = frozenset(_REPLY_OK_REQUIRED)


def check_reply_ok(frame, where="reply"):
    """None when ``frame`` is a well-formed ``reply-ok``, else the problem."""
    if type(frame) is not dict:
        return where + " must be an object"
    keys = frame.keys()
    if keys != _REPLY_OK_KNOWN:
        return _key_problem(where, keys, _REPLY_OK_REQUIRED, _REPLY_OK_KNOWN)
    v = frame["type"]
    if v != "reply":
        return where + '.type must be "reply"'
    v = frame["id"]
    if type(v) is not int or v < 0:
        return where + ".id must be a non-negative integer"
    v = frame["ok"]
    if v is not True:
        return where + ".ok must be true"
    return None


_REPLY_ERROR_REQUIRED = ("type", "id", "ok", "message")
_REPLY_ERROR_KNOWN = frozenset(_REPLY_ERROR_REQUIRED)


def check_reply_error(frame, where="reply"):
    """None when ``frame`` is a well-formed ``reply-error``, else the problem."""
    if type(frame) is not dict:
        return where + " must be an object"
    keys = frame.keys()
    if keys != _REPLY_ERROR_KNOWN:
        return _key_problem(where, keys, _REPLY_ERROR_REQUIRED, _REPLY_ERROR_KNOWN)
    v = frame["type"]
    if v != "reply":
        return where + '.type must be "reply"'
    v = frame["id"]
    if type(v) is not int or v < 0:
        return where + ".id must be a non-negative integer"
    v = frame["ok"]
    if v is not False:
        return where + ".ok must be false"
    v = frame["message"]
    if type(v) is not str:
        return where + ".message must be a string"
    return None


def check_reply(frame, where="reply"):
    """None when ``frame`` is a well-formed ``reply`` (any variant), else the problem."""
    discriminant = frame.get("ok") if type(frame) is dict else None
    if discriminant is True:
        return check_reply_ok(frame, where)
    if discriminant is False:
        return check_reply_error(frame, where)
    if type(frame) is not dict:
        return where + " must be an object"
    if frame.get("type") != "reply":
        return where + '.type must be "reply"'
    return where + ".ok is not one of the variants' values"


def _key_problem(where, keys, required, known):
    for key in required:
        if key not in keys:
            return f"{where}: missing field {key!r}"
    for key in keys:
        if key not in known:
            return f"{where}: unknown field {key!r}"
    return where + ": wrong fields"
