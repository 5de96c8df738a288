"""pycage as smolagents' code executor (tested with smolagents 1.26).

:class:`PycageExecutor` implements smolagents' ``PythonExecutor``: pass it
to a ``CodeAgent`` and each step's code runs in real CPython in a sandboxed
pycage session instead of smolagents' AST interpreter::

    from smolagents import CodeAgent
    from pycage.smolagents import PycageExecutor

    agent = CodeAgent(tools=[web_search], model=model, executor=PycageExecutor())

- **Tools stay on the host.** Each ``Tool`` (and each managed agent) is a
  pycage binding: its call runs ``tool(*args, **kwargs)`` (so
  ``Tool.forward``) in this process, so a tool that holds host state or
  credentials works and nothing is pickled into the sandbox. The program
  calls tools as smolagents' prompts teach: plain functions at top level,
  ``result = web_search(query="x")``, positional or keyword arguments,
  without ``await`` (they are backed by the binding's blocking ``.sync``
  form). Arguments and results cross as JSON; a failed call raises
  ``ToolError("<exception type>: <message>")`` in the program.
- **A step's outcome** is smolagents': ``final_answer(x)`` ends the step
  with ``is_final_answer=True`` and the answer as the host tool returned
  it; printed lines are ``logs``; the value of the step's final expression
  statement is ``output`` (as itself when it is JSON, as its ``str()``
  otherwise, which is what smolagents shows the model). A step that
  raises, times out or fails otherwise raises ``InterpreterError`` with its
  logs and traceback, which the agent shows the model for its next step.
- **State.** One pycage session holds the agent's variables
  (``send_variables``) and every name a step defines, for as long as the
  executor lives and its tools stay the same (as smolagents' own executors
  keep their state between runs); :meth:`PycageExecutor.cleanup` (or
  leaving ``with agent:``) ends it. A step that ends the session (it ran
  past ``wall_seconds`` or ``cpu_seconds``, it crashed) says so in its
  error; the next step starts a new session with the agent's variables
  but not what earlier steps defined.
- **Images.** Figures a step shows (``plt.show()``, ``display(img)``) come
  back as PIL images: as the step's ``output`` when its value is None, and,
  with ``step_callbacks=[executor.attach_images]``, as the step's
  ``observations_images``, which smolagents sends to the model.
- **Imports.** ``CodeAgent(additional_authorized_imports=...)`` is only
  what smolagents' prompt tells the model it may import: pycage does not
  check imports, because the sandbox (not an import list) is the
  boundary. Any module of the runtime's interpreter (``venv=``) imports.

Only this module imports smolagents; ``import pycage`` does not.
"""

from __future__ import annotations

import ast
import base64
import io
import keyword
from typing import Any, Optional

from smolagents.local_python_executor import CodeOutput, InterpreterError, PythonExecutor
from smolagents.utils import truncate_content

from ._integrations import RuntimeHolder, images
from ._native import to_json
from ._runtime import ErrorClass, Namespace, Result, Runtime, Session

__all__ = ["PycageExecutor"]

#: The program's global holding the tools' bindings.
TOOLS_GLOBAL = "_pycage_tools"
#: The program's global from which the prelude takes the agent's variables.
VARIABLES_GLOBAL = "_pycage_variables"
#: The default bound on a step's logs, as smolagents' ``LocalPythonExecutor``.
DEFAULT_MAX_PRINT_OUTPUTS_LENGTH = 50_000

# Defines the tools as plain functions. Compiled under its own file name so
# that a traceback through a tool shows `<smolagents tools>`, not lines of
# `<program>` the model never wrote.
_TOOLS_SOURCE = '''
from pycage.encoder import encode_json as _pycage_encode


class FinalAnswerException(BaseException):
    """Raised by final_answer() to end the step: the host has the answer."""


def _pycage_tool(name, doc, final):
    call = getattr(_pycage_tools, name).sync
    prefix = "argument of _pycage_tools." + name + ".sync() "

    def tool(*args, **kwargs):
        try:
            value = call({"args": list(args), "kwargs": kwargs})
        except TypeError as e:
            text = str(e)
            if not text.startswith(prefix):
                raise
            raise TypeError("argument of " + name + "() " + text[len(prefix):]) from None
        if final:
            raise FinalAnswerException()
        return value

    tool.__name__ = tool.__qualname__ = name
    tool.__doc__ = doc
    return tool


def _pycage_output(value, limit):
    """A step's final expression as it can cross: itself when it is JSON
    within ``limit`` bytes, else its str() (what smolagents shows)."""
    try:
        if len(_pycage_encode(value)) <= limit:
            return value
    except Exception:
        pass
    try:
        text = str(value)
    except Exception as e:
        return "<" + type(value).__name__ + " object; str() failed: " + repr(e) + ">"
    return text if len(text) <= limit // 2 else text[: limit // 2] + "... (truncated)"
'''


def _rewrite_final_expression(code: str, limit: int) -> str:
    """``code`` with its final top-level expression statement ``E`` turned
    into ``return _pycage_output(E, limit)``, on the same lines (tracebacks
    keep the model's line numbers). Code the host's parser rejects is left
    as it is: the child reports its own error."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return code
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return code
    node = tree.body[-1].value
    # Lines as the tokenizer counts them (\n, \r\n, \r), not str.splitlines,
    # which also splits at \f, \x1c-\x1e, \x85 and \u2028 inside literals.
    lines = io.StringIO(code, newline="").readlines()
    if node.end_lineno is None or node.end_col_offset is None:
        return code

    def offset(lineno: int, col: int) -> int:
        # ast columns count UTF-8 bytes.
        before = sum(len(line) for line in lines[: lineno - 1])
        return before + len(lines[lineno - 1].encode("utf-8")[:col].decode("utf-8", "replace"))

    start = offset(node.lineno, node.col_offset)
    end = offset(node.end_lineno, node.end_col_offset)
    return f"{code[:start]}return _pycage_output(({code[start:end]}), {limit}){code[end:]}"


def _check_name(what: str, name: object) -> str:
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_pycage"):
        raise ValueError(f"{what} {name!r} cannot be a global of the program: it must be an identifier")
    return name


class _ToolFailed(Exception):
    """A tool raised: the program sees ``ToolError("<type>: <message>")``."""


class PycageExecutor(PythonExecutor):
    """smolagents' ``PythonExecutor`` running each step in a pycage session.

    ``runtime`` is a :class:`pycage.Runtime` to share (you close it);
    without one, the executor makes one on first use from
    ``runtime_options`` (``isolation``, ``venv``, ``preload``, budgets such
    as ``wall_seconds``: each step gets them) and closes it in
    :meth:`cleanup`. ``max_print_outputs_length`` bounds a step's logs as
    smolagents' executor does; ``idle_timeout_seconds`` and
    ``max_lifetime_seconds`` bound the session.
    """

    def __init__(
        self,
        runtime: Optional[Runtime] = None,
        *,
        max_print_outputs_length: Optional[int] = None,
        idle_timeout_seconds: float = 600.0,
        max_lifetime_seconds: float = 3600.0,
        **runtime_options: Any,
    ) -> None:
        self._holder = RuntimeHolder(runtime, runtime_options, "PycageExecutor")
        self.max_print_outputs_length = max_print_outputs_length or DEFAULT_MAX_PRINT_OUTPUTS_LENGTH
        self._idle = idle_timeout_seconds
        self._lifetime = max_lifetime_seconds
        self._tools: dict[str, Any] = {}
        self._tools_key: Optional[tuple[tuple[str, int], ...]] = None  # what send_tools was last given
        self._variables: dict[str, Any] = {}
        self._pending: dict[str, Any] = {}
        self._session: Optional[Session] = None
        self._final: Optional[tuple[Any]] = None
        self._value_limit = 0
        #: The images the last step showed (PIL images), for :meth:`attach_images`.
        self.last_images: list[Any] = []

    @property
    def runtime(self) -> Runtime:
        """The runtime steps run on (made on first use unless one was passed)."""
        return self._holder.runtime

    # -- smolagents' PythonExecutor ------------------------------------------

    def send_tools(self, tools: dict[str, Any]) -> None:
        """Makes ``tools`` (smolagents ``Tool``s and managed agents, by name)
        the program's functions. The same tools again keep the session; other
        tools start a new one (a session's bindings are fixed), to which the
        agent's variables are sent again."""
        key = tuple((name, id(tool)) for name, tool in tools.items())
        if key == self._tools_key:
            return
        for name, tool in tools.items():
            _check_name("the tool name", name)
            if not callable(tool):
                raise TypeError(f"the tool {name!r} is not callable: got {type(tool).__name__}")
        self._tools = dict(tools)
        self._tools_key = key
        self._end_session()

    def send_variables(self, variables: dict[str, Any]) -> None:
        """Makes ``variables`` globals of the program from the next step on.
        They cross as JSON: a value that cannot raises ``TypeError`` naming it."""
        for name, value in variables.items():
            _check_name("the variable", name)
            try:
                to_json(value)
            except (TypeError, ValueError) as e:
                raise TypeError(
                    f"the agent variable {name!r} ({type(value).__name__}) cannot be sent into the pycage sandbox: "
                    f"variables cross as JSON (dict with str keys, list, str, int, float, bool, None); {e}"
                ) from None
        self._variables.update(variables)
        self._pending.update(variables)

    def __call__(self, code_action: str) -> CodeOutput:
        session, restarted = self._ready_session()
        self._final = None
        result = session.run(_rewrite_final_expression(code_action, self._value_limit))
        ended = session.ended
        if ended:
            self._session = None
        logs = "\n".join(result.logs) + "\n" if result.logs else ""
        logs = truncate_content(logs, max_length=self.max_print_outputs_length)
        self.last_images = self._pil_images(result)
        if self._final is not None:
            return CodeOutput(output=self._final[0], logs=logs, is_final_answer=True)
        if result.error is not None:
            raise InterpreterError(self._error_text(result, logs, ended, restarted))
        output = result.value
        if output is None and self.last_images:
            output = self.last_images[-1]
        return CodeOutput(output=output, logs=logs, is_final_answer=False)

    # -- lifecycle -------------------------------------------------------------

    def cleanup(self) -> None:
        """Ends the session and closes the runtime if the executor made it
        (``CodeAgent.cleanup`` and ``with agent:`` call this). Idempotent; a
        later step starts a new session."""
        self._end_session()
        self._holder.close()

    close = cleanup

    def __enter__(self) -> PycageExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def attach_images(self, memory_step: Any) -> None:
        """A smolagents step callback: puts the images the step showed into
        ``memory_step.observations_images``, which smolagents sends to the
        model. ``CodeAgent(..., step_callbacks=[executor.attach_images])``."""
        if self.last_images and hasattr(memory_step, "observations_images"):
            memory_step.observations_images = list(self.last_images)

    # -- internals -------------------------------------------------------------

    def _end_session(self) -> None:
        session, self._session = self._session, None
        self._pending = dict(self._variables)
        if session is not None:
            session.close()

    def _bindings(self) -> dict[str, Any]:
        adapters = {name: self._adapter(tool, name == "final_answer") for name, tool in self._tools.items()}
        return {
            TOOLS_GLOBAL: Namespace(adapters, error_class=ErrorClass("ToolError", "tool")),
            VARIABLES_GLOBAL: {"take": self._take_variables},
        }

    def _adapter(self, tool: Any, final: bool) -> Any:
        def call(args: list[Any], kwargs: dict[str, Any]) -> Any:
            try:
                value = tool(*args, **kwargs)
            except Exception as e:  # noqa: BLE001 - any tool failure is the program's to see
                raise _ToolFailed(f"{type(e).__name__}: {e}") from e
            if final:
                # The answer stays here, whatever it is; the program ends its step.
                self._final = (value,)
                return None
            return value

        return call

    def _take_variables(self) -> dict[str, Any]:
        taken, self._pending = self._pending, {}
        return taken

    def _prelude(self) -> str:
        lines = [f"exec(compile({_TOOLS_SOURCE!r}, '<smolagents tools>', 'exec'), globals())"]
        for name, tool in self._tools.items():
            doc = getattr(tool, "description", None)
            doc = doc if isinstance(doc, str) else None
            lines.append(f"{name} = _pycage_tool({name!r}, {doc!r}, {name == 'final_answer'})")
        lines.append("del _pycage_tool")
        return "\n".join(lines) + "\n"

    def _ready_session(self) -> tuple[Session, bool]:
        """The live session, opened (its tools defined) if needed, with the
        pending variables sent; and whether it was opened here after an
        earlier one ended."""
        restarted = False
        session = self._session
        if session is None or session.ended:
            restarted = session is not None
            # Half the value budget: a final expression past it comes back as
            # its (cut) str(), never as an output-limit failure.
            self._value_limit = self._holder.runtime.config["max_value_bytes"] // 2
            session = self._holder.runtime.session(
                self._bindings(), idle_timeout_seconds=self._idle, max_lifetime_seconds=self._lifetime
            )
            self._session = session
            self._pending = dict(self._variables)
            self._setup(session, self._prelude(), "define the tools")
        if self._pending:
            self._setup(session, f"globals().update({VARIABLES_GLOBAL}.take.sync())\n", "send the agent's variables")
        return session, restarted

    def _setup(self, session: Session, code: str, what: str) -> None:
        result = session.run(code)
        if result.error is not None:
            self._session = None
            session.close()
            raise InterpreterError(
                f"pycage could not {what} in the sandbox: {result.error.kind}: {result.error.message}"
            )

    @staticmethod
    def _error_text(result: Result, logs: str, ended: Optional[str], restarted: bool) -> str:
        error = result.error
        assert error is not None
        text = f"Execution logs:\n{logs}\n" if logs else ""
        if error.kind == "exception":
            text += f"Executing code yielded an error:\n{error.message}"
        else:
            text += f"Executing code failed ({error.kind}): {error.message}"
        if ended:
            text += (
                "\nThe sandbox session ended with this step: the next step starts a new one, with the agent's "
                "variables but without the names, imports and objects earlier steps defined."
            )
        elif restarted:
            text += "\n(This step ran in a new sandbox session: names earlier steps defined are gone.)"
        return text

    @staticmethod
    def _pil_images(result: Result) -> list[Any]:
        found = images(result)
        if not found:
            return []
        import PIL.Image  # smolagents depends on pillow

        out = []
        for _mime, data in found:
            try:
                image = PIL.Image.open(io.BytesIO(base64.b64decode(data)))
                image.load()
            except Exception:  # noqa: BLE001 - a display that is not a decodable image stays out
                continue
            out.append(image)
        return out
