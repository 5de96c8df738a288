"""What pycage's agent-framework integrations share (``pycage.smolagents``,
``pycage.pydantic_ai``, ``pycage.langchain``, ``pycage.openai_agents``):

- :class:`RuntimeHolder`: the runtime they run on, passed in or made on
  first use from a runtime's keyword arguments (and then closed by them);
- :class:`SessionPool`: sessions by conversation (a LangGraph thread, an
  OpenAI Agents group id), at most ``max_sessions`` live, the least
  recently used closed beyond it;
- the ``run_python`` description (:func:`description`), around the stubs
  ``pycage._stubs`` writes;
- how a run's :class:`pycage.Result` reads to a model (:func:`report`).

It imports no framework: each integration module imports its own.
"""

from __future__ import annotations

import asyncio
import base64
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Optional

from ._display import Display
from ._native import to_json
from ._runtime import Bindings, Result, Runtime, Session
from .errors import SessionEndedError

#: MIME types a model can be shown as an image, best first.
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
#: Richest text of a display that has no image, best first.
TEXT_TYPES = ("text/markdown", "text/html", "text/latex", "application/json", "image/svg+xml", "text/plain")


class RuntimeHolder:
    """A :class:`pycage.Runtime` passed in (the caller closes it), or one
    made on first use from ``options`` (closed by :meth:`close`)."""

    def __init__(self, runtime: Optional[Runtime], options: Mapping[str, Any], owner: str) -> None:
        if runtime is not None and options:
            raise TypeError(f"{owner}: pass either a pycage.Runtime or its keyword arguments, not both")
        if runtime is not None and not isinstance(runtime, Runtime):
            raise TypeError(f"{owner}: runtime must be a pycage.Runtime, got {type(runtime).__name__}")
        self._runtime = runtime
        self._options = dict(options)
        self._owned = runtime is None
        self._lock = threading.Lock()

    @property
    def runtime(self) -> Runtime:
        with self._lock:
            if self._runtime is None:
                self._runtime = Runtime(**self._options)
            return self._runtime

    @property
    def started(self) -> bool:
        return self._runtime is not None

    def close(self) -> None:
        """Closes the runtime if this holder made it; a later use makes a new one."""
        with self._lock:
            runtime = self._runtime if self._owned else None
            if self._owned:
                self._runtime = None
        if runtime is not None:
            runtime.close()


class SessionPool:
    """Sessions by key, each opened on first use with the pool's bindings.

    At most ``max_sessions`` are live: opening one more closes the least
    recently used (a run in flight in it returns ``abort``). A session that
    ended (its idle timeout, a run that timed out) is replaced by a new,
    empty one on its key's next use, and :meth:`acquire` says so once.
    Thread-safe.
    """

    def __init__(
        self,
        holder: RuntimeHolder,
        bindings: Optional[Bindings],
        *,
        max_sessions: int,
        idle_timeout_seconds: float,
        max_lifetime_seconds: float,
    ) -> None:
        if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
            raise ValueError(f"max_sessions must be an int of at least 1, got {max_sessions!r}")
        self._holder = holder
        self._bindings = bindings
        self._max = max_sessions
        self._idle = idle_timeout_seconds
        self._lifetime = max_lifetime_seconds
        self._sessions: OrderedDict[Hashable, Session] = OrderedDict()
        self._lock = threading.Lock()
        self._doomed: deque[Callable[[Hashable], bool]] = deque()

    def close_later(self, match: Callable[[Hashable], bool]) -> None:
        """Closes the sessions whose keys ``match`` at the pool's next use.
        Safe from a finalizer (it takes no lock: the garbage collector may
        run it on a thread that holds the pool's)."""
        self._doomed.append(match)

    def _sweep(self) -> None:
        while self._doomed:
            match = self._doomed.popleft()
            with self._lock:
                doomed = [key for key in self._sessions if match(key)]
            for key in doomed:
                self.close(key)

    def acquire(self, key: Hashable) -> tuple[Session, Optional[str]]:
        """The live session of ``key`` (opened if needed) and, when an earlier
        one of that key had ended, a note saying so."""
        self._sweep()
        evicted: list[Session] = []
        note = None
        with self._lock:
            session = self._sessions.pop(key, None)
            if session is not None and session.ended:
                note = (
                    f"the session of this conversation ended ({session.ended}); "
                    "this run started a new, empty one: names defined by earlier runs are gone"
                )
                session = None
            if session is None:
                while len(self._sessions) >= self._max:
                    evicted.append(self._sessions.popitem(last=False)[1])
                session = self._holder.runtime.session(
                    self._bindings, idle_timeout_seconds=self._idle, max_lifetime_seconds=self._lifetime
                )
            self._sessions[key] = session
        for old in evicted:
            old.close()
        return session, note

    def close(self, key: Hashable) -> bool:
        """Closes the session of ``key``; False if it had none."""
        with self._lock:
            session = self._sessions.pop(key, None)
        if session is None:
            return False
        session.close()
        return True

    def close_all(self) -> None:
        self._doomed.clear()
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for session in sessions:
            session.close()

    def __len__(self) -> int:
        return len(self.keys())

    def keys(self) -> list[Hashable]:
        """The keys with a live session, least recently used first."""
        self._sweep()
        with self._lock:
            return list(self._sessions)


def run_in(session: Optional[Session], runtime: Runtime, code: str, bindings: Optional[Bindings]) -> Result:
    """``code`` in ``session``, or a fresh run without one. A session that
    ended between :meth:`SessionPool.acquire` and this run reads as its
    failure (the next call starts a new one)."""
    if session is None:
        return runtime.run(code, bindings)
    try:
        return session.run(code)
    except SessionEndedError as e:
        return _ended_result(str(e))


async def arun_in(session: Optional[Session], runtime: Runtime, code: str, bindings: Optional[Bindings]) -> Result:
    """:func:`run_in` from a coroutine."""
    if session is None:
        return await runtime.arun(code, bindings)
    try:
        return await session.arun(code)
    except SessionEndedError as e:
        return _ended_result(str(e))


def _ended_result(message: str) -> Result:
    from ._runtime import Failure

    return Result(
        value=None,
        logs=[],
        error=Failure("abort", f"{message}; the next call starts a new, empty session"),
        has_value=False,
        dropped_frames=0,
        displays=[],
        files=[],
        skipped_files=[],
    )


class RunPython:
    """A ``run_python`` tool's engine: its bindings, description and
    sessions by conversation key. ``key=None`` runs afresh."""

    def __init__(
        self,
        bindings: dict[str, Any],
        stubs: str,
        *,
        runtime: Optional[Runtime],
        runtime_options: Mapping[str, Any],
        owner: str,
        conversation: str,
        max_sessions: int,
        idle_timeout_seconds: float,
        max_lifetime_seconds: float,
    ) -> None:
        self.holder = RuntimeHolder(runtime, runtime_options, owner)
        self.bindings = bindings
        self.pool = SessionPool(
            self.holder,
            bindings,
            max_sessions=max_sessions,
            idle_timeout_seconds=idle_timeout_seconds,
            max_lifetime_seconds=max_lifetime_seconds,
        )
        persistence = (
            f"Names, imports and objects persist between calls of one {conversation} (a program that times out "
            f"or crashes resets them, and so do {idle_timeout_seconds:g} s without a call)."
        )
        self.description = description(self.holder.runtime, stubs, persistence)

    def run(self, key: Optional[Hashable], code: str) -> tuple[Result, Optional[str]]:
        if key is None:
            return self.holder.runtime.run(code, self.bindings), None
        session, note = self.pool.acquire(key)
        return run_in(session, self.holder.runtime, code, self.bindings), note

    async def arun(self, key: Optional[Hashable], code: str) -> tuple[Result, Optional[str]]:
        if not self.holder.started:
            await asyncio.to_thread(lambda: self.holder.runtime)
        if key is None:
            return await self.holder.runtime.arun(code, self.bindings), None
        session, note = self.pool.acquire(key)
        return await arun_in(session, self.holder.runtime, code, self.bindings), note

    def close(self) -> None:
        """Closes every session, and the runtime if this tool made it."""
        self.pool.close_all()
        self.holder.close()


# -- the run_python tool -------------------------------------------------------


def description(runtime: Runtime, stubs: str, persistence: str) -> str:
    """What a ``run_python`` tool tells the model: the rules of a program,
    the runtime's budgets, ``persistence`` (what survives between calls)
    and the stubs of its functions."""
    config = runtime.config
    nets = config.get("allow_net") or []
    network = (
        "the network is not (use the functions)."
        if not nets
        else f"the network is reachable only at {', '.join(nets)} through the proxy in HTTPS_PROXY."
    )
    text = (
        "Run a Python program in a sandboxed CPython process and get back only its result. Use it to call "
        "the functions below: one program can make many calls, loop, filter and combine their results, "
        "so you do not need one tool call per step.\n\n"
        "Rules:\n"
        f"- {persistence}\n"
        "- Top-level `await` works: `r = await tools.search(query='x')`. Run independent calls "
        "concurrently with `asyncio.gather(...)`.\n"
        "- The result's value is the program's top-level `return` value, else the value of its last "
        "expression statement. It must be JSON: dict with str keys, list, str, int, float, bool or None.\n"
        f"- print() output comes back in `logs`. Each call has {config['wall_seconds']:g} s of wall clock, "
        f"{config['cpu_seconds']:g} s of CPU and {config['address_space_bytes'] >> 20} MiB of memory.\n"
        "- A failed function call raises the namespace's error class (below); catch it to go on.\n"
        "- display(obj) shows rich output (a matplotlib figure, a DataFrame); images come back after the result.\n"
        f"- The standard library is available; {network}\n\n"
        'Result: {"value": ..., "logs": [...], "error": {"kind": ..., "message": ...}} '
        "(error only when the run failed).\n"
    )
    if not stubs:
        return text + "\nNo functions are configured: the program can only compute.\n"
    return text + (
        "\nFunctions (Python stubs; `help(tools.name)` in a program prints one of them):\n```python\n" + stubs + "```\n"
    )


def best_image(display: Display) -> Optional[str]:
    """The MIME type of ``display``'s image a model can be shown, if any."""
    return next((t for t in IMAGE_TYPES if t in display.data), None)


def image_data_url(display: Display, mime: str) -> str:
    data = display.data[mime]
    if not isinstance(data, str):  # bytes are never stored, but be sure
        data = base64.b64encode(data).decode("ascii")
    return f"data:{mime};base64,{data}"


def _display_entry(display: Display) -> dict[str, Any]:
    entry: dict[str, Any] = {"types": list(display.mime_types)}
    image = best_image(display)
    if image is not None:
        entry["shown_as"] = image
    else:
        text = next((t for t in TEXT_TYPES if t in display.data), None)
        if text is not None:
            entry["shown_as"] = text
            entry["text"] = display.data[text]
    return entry


def report(result: Result, note: Optional[str] = None) -> dict[str, Any]:
    """A run's outcome as the object a model reads (``pycage mcp``'s
    ``run_python`` result): ``value`` when it has one, ``logs``, ``error``
    when it failed, ``displays`` (each display's types, and its text when
    it has no image: images go to the model as images), and ``note``."""
    out: dict[str, Any] = {}
    if result.has_value:
        out["value"] = result.value
    out["logs"] = list(result.logs)
    if result.displays:
        out["displays"] = [_display_entry(d) for d in result.displays]
    if result.error is not None:
        out["error"] = {"kind": result.error.kind, "message": result.error.message}
    if note:
        out["note"] = note
    return out


def report_text(result: Result, note: Optional[str] = None) -> str:
    """:func:`report` as JSON text (exact integers, non-ASCII kept)."""
    return to_json(report(result, note))


def images(result: Result) -> list[tuple[str, str]]:
    """``(mime, base64 data)`` of every display of ``result`` with an image."""
    out = []
    for display in result.displays:
        mime = best_image(display)
        if mime is not None:
            out.append((mime, display.data[mime]))
    return out
