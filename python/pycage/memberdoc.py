"""What ``help(<global>.<name>)`` and ``inspect.signature`` show of a member.

A member is an ``async def member(*args, **kwargs)`` that sends its
arguments to the host; its help text comes from the host (``boot``'s
``docs``): Python stub text with the member's ``async def`` line, its
docstring, and the ``TypedDict`` classes the signature names. Taken as is,
pydoc printed the member's own ``async name(*args, **kwargs)`` line above the
stub's. ``document`` makes the member read as the function the stub
declares: its ``__signature__`` is the stub's (``StubSignature``, worked
out only when something asks: a run that never calls ``help`` pays one
assignment per member), and from then on its ``__doc__`` is the docstring,
followed by the types it uses (until then, the help text as the host gave
it, signature included). So ``help(tools.search)``, which asks for the
signature before it reads the docstring, shows::

    async search(*, query: str, limit: int = 10) -> SearchResult
        Search issues.
        ...

``stub_line(member)`` is the stub's ``async def ...`` line (without its
colon), for ``help(<global>)`` and the message of a refused call.
"""

import inspect

from pycage._private import BUILTINS

__builtins__ = BUILTINS

_Signature = inspect.Signature
_Parameter = inspect.Parameter
_signature_init = inspect.Signature.__init__
_DEF = "async def "
_QUOTES = '"""'


class _Text:
    """An annotation or default as the stub spells it (``repr`` is the text:
    how ``inspect`` shows annotations and defaults it does not know)."""

    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


def _parse(line):
    """``(parameters, return annotation)`` of ``async def name(...) -> R``,
    the stub's texts kept as they are; None when it does not parse."""
    import ast

    source = line + ": ..."
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    node = tree.body[0] if len(tree.body) == 1 else None
    if type(node) is not ast.AsyncFunctionDef:
        return None

    def text(node):  # as the stub spells it
        return ast.get_source_segment(source, node)

    a = node.args
    params = []

    def add(arg, kind, default=_Parameter.empty):
        annotation = _Text(text(arg.annotation)) if arg.annotation is not None else _Parameter.empty
        params.append(_Parameter(arg.arg, kind, default=default, annotation=annotation))

    positional = a.posonlyargs + a.args
    defaults = [_Parameter.empty] * (len(positional) - len(a.defaults)) + [_Text(text(d)) for d in a.defaults]
    for i, arg in enumerate(positional):
        kind = _Parameter.POSITIONAL_ONLY if i < len(a.posonlyargs) else _Parameter.POSITIONAL_OR_KEYWORD
        add(arg, kind, defaults[i])
    if a.vararg is not None:
        add(a.vararg, _Parameter.VAR_POSITIONAL)
    for arg, default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        add(arg, _Parameter.KEYWORD_ONLY, _Parameter.empty if default is None else _Text(text(default)))
    if a.kwarg is not None:
        add(a.kwarg, _Parameter.VAR_KEYWORD)
    returns = _Text(text(node.returns)) if node.returns is not None else _Signature.empty
    return params, returns


class StubSignature(_Signature):
    """A member's signature as its stub declares it, worked out on first use
    (``inspect.signature``, which ``help`` calls before it reads the
    docstring): the stub's ``async def`` line parsed, and the member's
    ``__doc__`` made the rest of the text (the module docs). A text without
    such a line, or one that does not parse, gives ``(*args, **kwargs)``,
    the member's own, and leaves its ``__doc__`` as it is."""

    __slots__ = ("_member", "_text", "_split", "_parsed")

    def __init__(self, member, text):
        self._member = member
        self._text = text
        self._split = None
        self._parsed = False

    @property
    def stub_line(self):
        """The stub's ``async def ...`` line without its colon, or None."""
        return self._parts()[0]

    def _parts(self):
        if self._split is None:
            self._split = _split(self._text)
        return self._split

    def _ensure(self):
        if self._parsed:
            return
        line, doc = self._parts()
        parsed = _parse(line) if line is not None else None
        if parsed is None:
            parsed = (
                [_Parameter("args", _Parameter.VAR_POSITIONAL), _Parameter("kwargs", _Parameter.VAR_KEYWORD)],
                _Signature.empty,
            )
        elif self._member is not None and self._member.__doc__ is self._text:
            self._member.__doc__ = doc
        try:
            _signature_init(self, parsed[0], return_annotation=parsed[1])
        except ValueError:  # an order inspect refuses
            _signature_init(self, [], return_annotation=parsed[1])
        self._parsed = True

    @property
    def parameters(self):
        self._ensure()
        return self._parameters

    @property
    def return_annotation(self):
        self._ensure()
        return self._return_annotation

    def __setstate__(self, state):
        self._member = self._text = None
        self._split = (None, None)
        self._parsed = True
        _Signature.__setstate__(self, state)


def _docstring(rest):
    """The text of a stub's docstring (indented by four, triple-quoted), or
    of ``rest`` as it is when it is not one."""
    text = ("\n" + rest).replace("\n    ", "\n").strip()
    if text.startswith(_QUOTES) and text.endswith(_QUOTES) and len(text) >= 6:
        text = text[3:-3].strip()
        if "\\" in text:
            text = text.replace('\\"\\"\\"', _QUOTES)
    elif text == "...":
        text = ""
    return text


def _split(text):
    """``(line, doc)`` of a help text: its ``async def`` line (without the
    colon) and the docstring followed by the types before it; ``(None,
    None)`` when it has no such line."""
    if text.startswith(_DEF):
        start = 0
    else:
        start = text.find("\n" + _DEF) + 1
        if not start:
            return None, None
    end = text.find("\n", start)
    if end < 0:
        end = len(text)
    line = text[start:end].rstrip()
    if not line.endswith(":"):
        return None, None
    doc = _docstring(text[end + 1 :])
    types = text[:start].strip("\n")
    if types:
        doc = f"{doc}\n\n{types}" if doc else types
    return line[:-1], doc


def document(member, text):
    """Give ``member`` the help text ``text`` (its ``__doc__``) and, when
    the text may declare it, the stub's signature: worked out only when
    something asks (``StubSignature``), so a run pays an assignment per
    member."""
    member.__doc__ = text
    if _DEF in text:
        member.__signature__ = StubSignature(member, text)


def stub_line(member):
    """The member's stub line, ``async def name(...) -> R``, or None."""
    signature = getattr(member, "__signature__", None)
    return signature.stub_line if type(signature) is StubSignature else None
