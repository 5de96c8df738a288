"""A run's files: the ``inputs`` and ``output_dir`` arguments, checked,
and what the native copy of ``out/`` reports, as :class:`OutputFile` and
:class:`SkippedFile` lists."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, Optional

from ._checks import _describe
from ._display import OutputFile, SkippedFile


def _run_files(inputs: Any, output_dir: Any, owner: str) -> tuple[Optional[list[str]], Optional[str]]:
    """``inputs`` and ``output_dir`` of a run, checked: paths."""
    paths = None
    if inputs is not None:
        if isinstance(inputs, (str, bytes, os.PathLike)) or not isinstance(inputs, Iterable):
            raise TypeError(f"{owner}: inputs must be a list of paths, got {_describe(inputs)}")
        paths = []
        for p in inputs:
            try:
                paths.append(os.fspath(p))
            except TypeError:
                raise TypeError(
                    f"{owner}: inputs items must be paths (str or os.PathLike), got {_describe(p)}"
                ) from None
    out = None
    if output_dir is not None:
        try:
            out = os.fspath(output_dir)
        except TypeError:
            raise TypeError(
                f"{owner}: output_dir must be a path (str or os.PathLike), got {_describe(output_dir)}"
            ) from None
    return paths, out


def _output_files(output: Optional[tuple]) -> tuple[list[OutputFile], list[SkippedFile]]:
    """The native module's report of an ``out/`` copy (``None``: no
    ``output_dir``) as what was copied and what was not."""
    if output is None:
        return [], []
    copied, not_copied, _, _ = output
    files = [OutputFile(path, size) for path, size in copied]
    skipped = [SkippedFile(path, reason, kind) for path, reason, kind in not_copied]
    return files, skipped
