"""What a run shows and leaves: :class:`Display` (one rich output, which
Jupyter renders), :class:`OutputFile` and :class:`SkippedFile` (what its
``out/`` held, when the run had an ``output_dir``)."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any, Optional

__all__ = ["Display", "OutputFile", "SkippedFile"]


def _base_type(mime: str) -> str:
    return mime.split(";", 1)[0].strip()


def is_json_type(mime: str) -> bool:
    """``application/json`` and ``*+json``: carried as JSON text."""
    base = _base_type(mime)
    return base == "application/json" or base.endswith("+json")


def is_base64_type(mime: str) -> bool:
    """Everything but text (``text/*``), JSON, JavaScript and SVG is
    carried as base64, as in Jupyter's notebook format."""
    base = _base_type(mime)
    return not (base.startswith("text/") or is_json_type(base) or base in ("application/javascript", "image/svg+xml"))


def _json_or_text(content: str) -> Any:
    """JSON text as the object Jupyter expects; text that is not JSON (a
    program may send anything) or nests too deep to parse stays text."""
    try:
        return json.loads(content)
    except (ValueError, RecursionError):
        return content


@dataclass(frozen=True)
class Display:
    """One rich output of a run, as the program's ``display(obj)`` (or a
    matplotlib figure it showed) made it: a MIME bundle.

    ``data`` maps MIME type to content as it crossed: text for text types,
    base64 for binary ones (``image/png``, ``image/jpeg``), JSON text for
    JSON types. ``metadata`` is IPython's display metadata (for a figure:
    ``{"image/png": {"width": 640, "height": 480}}``). In Jupyter a
    ``Display`` renders as the program's object would have
    (``_repr_mimebundle_``); :meth:`bytes` gives a type's content as bytes.
    """

    data: dict[str, str]
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def mime_types(self) -> list[str]:
        """The MIME types, in the order the program gave them."""
        return list(self.data)

    @property
    def text(self) -> Optional[str]:
        """The ``text/plain`` (the object's ``repr``), if any."""
        return self.data.get("text/plain")

    def bytes(self, mime: str = "image/png") -> bytes:
        """The content of ``mime`` as bytes (base64 decoded for binary
        types); ``KeyError`` when the display has no such type."""
        content = self.data[mime]
        if is_base64_type(mime):
            return base64.b64decode(content)
        return content.encode("utf-8")

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        data: dict[str, Any] = {}
        for mime, content in self.data.items():
            if (include and mime not in include) or (exclude and mime in exclude):
                continue
            data[mime] = _json_or_text(content) if is_json_type(mime) else content
        return data, dict(self.metadata)

    def __repr__(self) -> str:
        size = ""
        for meta in self.metadata.values():
            if isinstance(meta, dict) and "width" in meta and "height" in meta:
                size = f" {meta['width']}x{meta['height']}"
                break
        text = self.text
        shown = f": {text[:60]!r}" if text is not None else ""
        return f"<pycage.Display {', '.join(self.data)}{size}{shown}>"


@dataclass(frozen=True)
class OutputFile:
    """A file the program left in ``out/``, copied to the run's
    ``output_dir``: its path there (relative, ``/``-separated) and size."""

    path: str
    bytes: int


@dataclass(frozen=True)
class SkippedFile:
    """An entry of ``out/`` that was not copied: its path, why, and the
    kind of reason: ``excluded`` (symlinks and special files are never
    copied), ``limit`` (``max_output_bytes`` or the entry and depth caps)
    or ``failed``."""

    path: str
    reason: str
    kind: str
