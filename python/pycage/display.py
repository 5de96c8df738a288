"""``display()``: the program's rich output as ``display`` frames, within the
run's display ledger.

``display(obj)`` builds a MIME bundle the way IPython's ``display`` does:
``_repr_mimebundle_(include=, exclude=)`` first (a dict, or a ``(data,
metadata)`` pair), then, for each type it did not give, ``_repr_html_``,
``_repr_markdown_``, ``_repr_svg_``, ``_repr_png_``, ``_repr_jpeg_``,
``_repr_latex_``, ``_repr_json_``, ``_repr_javascript_``, ``_repr_pdf_``
(each may return ``None``, the data, or ``(data, metadata)``) and
``text/plain`` from ``repr``; an object with ``_ipython_display_`` displays
itself. A matplotlib figure is rendered as ``image/png`` at its own size
(``pycage.mpl_backend`` sends ``plt.show()``'s figures here).

On the wire (docs/protocol.md): text types are text, binary types
(``image/png``, ``image/jpeg``, ``application/pdf``) base64, JSON types JSON
text from the lossless codec. A value of the wrong kind for its type (a
``str`` from ``_repr_png_`` is taken as base64 already) is left out, as
IPython leaves it out. An exception raised by a ``_repr_*_`` method reaches
the program.

The ledger holds the run's ``maxDisplayBytes``, counted as the encoded
frames' bytes; the first display that does not fit is replaced by one
marker frame (``truncated: true``) and later ones are dropped, while the
run goes on (docs/semantics.md, "Rich output").
"""

import builtins as _shared_builtins
import sys
from binascii import b2a_base64
from io import BytesIO

from pycage import _wire
from pycage._private import BUILTINS, clean
from pycage.channel import lock, send
from pycage.encoder import NotJsonError, encode_json

__builtins__ = BUILTINS

_encode_display = _wire.encode_display
_modules = sys.modules
_type_name = type.__dict__["__name__"].__get__

#: The formatters IPython's ``DisplayFormatter`` runs, in its order: MIME
#: type, the method, the kind of data it yields.
_TEXT, _BINARY, _JSON = "text", "binary", "json"
_FORMATTERS = (
    ("text/html", "_repr_html_", _TEXT),
    ("text/markdown", "_repr_markdown_", _TEXT),
    ("image/svg+xml", "_repr_svg_", _TEXT),
    ("image/png", "_repr_png_", _BINARY),
    ("application/pdf", "_repr_pdf_", _BINARY),
    ("image/jpeg", "_repr_jpeg_", _BINARY),
    ("text/latex", "_repr_latex_", _TEXT),
    ("application/json", "_repr_json_", _JSON),
    ("application/javascript", "_repr_javascript_", _TEXT),
)

_display_left = 0  # bytes the ledger still accepts; -1 once the marker is sent
_marker_frame = b""
_marker_for = None  # the budget _marker_frame names


def start_display_ledger(max_display_bytes):
    """A new run's display ledger: ``max_display_bytes`` to spend, then the
    marker (built ahead, and again only when the budget changes, as the
    log ledger's)."""
    global _display_left, _marker_frame, _marker_for
    _display_left = max_display_bytes
    if max_display_bytes != _marker_for:
        _marker_frame = _encode_display({"text/plain": _wire.display_truncation_marker(max_display_bytes)}, None, True)
        _marker_for = max_display_bytes


def _kind(mime):
    base = mime.split(";", 1)[0].strip()
    if base == "application/json" or base.endswith("+json"):
        return _JSON
    if base.startswith("text/") or base in ("image/svg+xml", "application/javascript"):
        return _TEXT
    return _BINARY


def _wire_text(mime, data):
    """``data`` of ``mime`` as the frame's text, or None when it is not of
    the type's kind."""
    kind = _kind(mime)
    if kind == _JSON:
        if isinstance(data, (dict, list)):
            try:
                return encode_json(data)
            except NotJsonError:
                return None
        return clean(data) if type(data) is str else None
    if kind == _BINARY:
        if isinstance(data, (bytes, bytearray, memoryview)):
            return b2a_base64(data, newline=False).decode("ascii")
        return clean(data) if isinstance(data, str) else None
    if isinstance(data, (bytes, bytearray)):
        try:
            return clean(bytes(data).decode("utf-8"))
        except UnicodeDecodeError:
            return None
    return clean(str.__str__(data)) if isinstance(data, str) else None


def _split(result):
    """A formatter's result: ``(data, metadata)`` or ``data``."""
    if type(result) is tuple and len(result) == 2:
        return result
    return result, None


def _is_figure(obj):
    figure = _modules.get("matplotlib.figure")
    return figure is not None and isinstance(obj, figure.Figure)


def figure_bundle(fig):
    """A matplotlib figure as ``image/png`` at its own size (``figsize`` x
    ``dpi``, no cropping), with its size as metadata."""
    buf = BytesIO()
    fig.canvas.print_figure(buf, format="png", dpi=fig.dpi)
    png = buf.getvalue()
    width, height = _png_size(png)
    data = {"image/png": png, "text/plain": repr(fig)}
    return data, {"image/png": {"width": width, "height": height}}


def _png_size(png):
    # The IHDR chunk: width and height, big-endian, at bytes 16..24.
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def format_bundle(obj, include=None, exclude=None):
    """``(data, metadata)`` of ``obj``, as IPython's ``DisplayFormatter.format``."""
    if _is_figure(obj):
        data, metadata = figure_bundle(obj)
    else:
        data, metadata = {}, {}
        method = getattr(obj, "_repr_mimebundle_", None)
        if method is not None and callable(method) and not isinstance(obj, type):
            bundle, md = _split(method(include=include, exclude=exclude))
            if isinstance(bundle, dict):
                data.update(bundle)
            if isinstance(md, dict):
                metadata.update(md)
        for mime, name, _ in _FORMATTERS:
            if mime in data:
                continue
            if (include and mime not in include) or (exclude and mime in exclude):
                continue
            method = getattr(obj, name, None)
            if method is None or not callable(method) or isinstance(obj, type):
                continue
            value, md = _split(method())
            if value is not None:
                data[mime] = value
            if md is not None:
                metadata[mime] = md
        if "text/plain" not in data and not (include and "text/plain" not in include):
            if not (exclude and "text/plain" in exclude):
                data["text/plain"] = repr(obj)
    if include:
        data = {k: v for k, v in data.items() if k in include}
    if exclude:
        data = {k: v for k, v in data.items() if k not in exclude}
    return data, metadata


def publish(data, metadata=None):
    """Send one bundle (``{mime: data}``, metadata ``{}`` or a dict) as a
    ``display`` frame, within the ledger. Entries of the wrong kind, and
    metadata that is not JSON, are left out."""
    global _display_left
    wire = {}
    for mime, value in data.items():
        if type(mime) is not str:
            continue
        text = _wire_text(mime, value)
        if text is not None:
            wire[clean(mime)] = text
    if not wire:
        return
    md_text = None
    if metadata:
        try:
            md_text = encode_json(metadata)
        except NotJsonError:
            md_text = None
        if md_text is not None and md_text[:1] != "{":
            md_text = None
    frame = _encode_display(wire, md_text)
    with lock:
        if _display_left < 0:
            return
        size = len(frame) - 1  # the newline is not counted
        if size <= _display_left:
            _display_left -= size
            send(frame)
            return
        _display_left = -1
        send(_marker_frame)


def display(
    *objs,
    include=None,
    exclude=None,
    metadata=None,
    transient=None,
    display_id=None,
    raw=False,
    clear=False,
    **kwargs,
):
    """Show each object as rich output of the run, as IPython's ``display``.

    Each becomes one MIME bundle: ``_repr_mimebundle_``, the ``_repr_*_``
    methods (HTML, markdown, SVG, PNG, JPEG, LaTeX, JSON) and ``repr`` for
    ``text/plain``; a matplotlib figure becomes a PNG. ``raw=True`` takes
    each object as a ready ``{mime: data}`` bundle. ``include``/``exclude``
    limit the MIME types; ``metadata`` is merged into each bundle's.
    ``transient``, ``display_id`` and ``clear`` are accepted and ignored.
    The run's value is unaffected: ``display`` returns None.
    """
    for obj in objs:
        if raw:
            if isinstance(obj, dict):
                publish(obj, metadata)
            continue
        method = getattr(obj, "_ipython_display_", None)
        if method is not None and callable(method) and not isinstance(obj, type):
            method()
            continue
        data, md = format_bundle(obj, include, exclude)
        if metadata:
            md.update(metadata)
        publish(data, md)


def flush_figures():
    """Show the pyplot figures still open when a run ends, then close them
    (as Jupyter's inline backend does after a cell). A figure that fails to
    render is reported on stderr; the run's outcome stands."""
    helpers = _modules.get("matplotlib._pylab_helpers")
    if helpers is None:
        return
    try:
        managers = helpers.Gcf.get_all_fig_managers()
        if not managers:
            return
        show_figures(managers)
    except BaseException as e:
        try:
            sys.stderr.write(f"[pycage] an open figure could not be shown: {_type_name(type(e))}: {e}\n")
        except BaseException:
            pass


def show_figures(managers=None):
    """Display every open pyplot figure (or ``managers``'), then close them all."""
    helpers = _modules.get("matplotlib._pylab_helpers")
    if helpers is None:
        return
    if managers is None:
        managers = helpers.Gcf.get_all_fig_managers()
    try:
        for manager in managers:
            publish(*figure_bundle(manager.canvas.figure))
    finally:
        helpers.Gcf.destroy_all()


#: A builtin, as in IPython: library code the program calls sees it too.
_shared_builtins.display = display
BUILTINS["display"] = display
