"""Compiling a program as the script ``__main__``, plus pycage's two additions.

A program is compiled as module code, file name ``<program>``, with
``ast.PyCF_ALLOW_TOP_LEVEL_AWAIT``. Its top-level names are module globals, so
``global``, ``globals()``, ``exec``/``eval``, ``from m import *``, class bodies,
closures and comprehensions behave as under ``python3 program.py``; tracebacks
name its frames ``<module>``. When it awaits at top level the code object is a
coroutine (``is_coroutine``) and the caller runs it in an event loop;
otherwise the caller runs it with no loop at all.

The additions, as notebooks and ``python -m asyncio`` have them:

* A top-level ``return X`` ends the program with the value ``X``.
* Without a ``return``, the value of a final top-level expression statement
  is the program's value (``None`` means no value).

How ``return`` works at module level. CPython rejects ``return`` outside a
function, and wrapping the program in a function would turn its names into
locals. Raising a private exception would be wrong four ways: ``except
BaseException`` and ``contextlib.suppress`` could swallow it, a ``with`` block
would see an error (a transaction would roll back), and a ``finally`` clause
would see it in ``sys.exc_info()`` and chain it into its own errors. So the
tree is rewritten to use the language's own non-exceptional exit, ``break``:

* the statements (after the docstring and ``from __future__`` imports, which
  must stay first) run inside ``while True: ...; break``, a loop that runs once;
* ``return X`` becomes ``<returned>.append(X); break``, and after every loop
  whose body holds such a ``return``, ``if <returned>.__len__(): break`` carries
  the exit outwards. ``finally`` clauses run, ``with`` blocks exit with
  ``__exit__(None, None, None)``, loop ``else`` clauses are skipped, and a
  ``return`` inside ``finally`` replaces an earlier one and discards an
  exception in flight — as in a function;
* the final expression statement ``E`` becomes ``<last>.append(E)``.

``<returned>`` and ``<last>`` are unique string constants in the tree; after
compiling they are swapped, in the code object's ``co_consts``, for two
private lists. The program's globals get no extra name, and no rebinding by
the program can reach them. Because the wrapper loop would make ``break`` and
``continue`` legal at the top level, they are rejected here with CPython's
own messages; every other error (``yield`` or ``nonlocal`` at module level,
``return`` in a class body, misplaced ``from __future__``) is the compiler's.

Stdlib only; nothing here runs program code. The walk is iterative.
"""

import ast
import os

from pycage._private import BUILTINS

# Functions here resolve builtins in the private copy (see _private).
__builtins__ = BUILTINS

#: File name of the program in code objects, tracebacks and ``linecache``.
PROGRAM_FILENAME = "<program>"

_CO_COROUTINE = 0x80
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_TRY_TYPES = tuple(getattr(ast, name) for name in ("Try", "TryStar") if hasattr(ast, name))
_MATCH = getattr(ast, "Match", None)


class _Box(list):
    """A private list the rewritten program appends to. Hashable by identity,
    so the code object that holds it in ``co_consts`` stays hashable."""

    __slots__ = ()
    __hash__ = object.__hash__


class Program:
    """A compiled program: run ``code`` with ``exec``/``eval`` in the globals
    it was compiled for (a coroutine when ``is_coroutine``), then ask
    :meth:`value` for its value."""

    __slots__ = ("code", "is_coroutine", "_returned", "_last")

    def __init__(self, code, returned, last):
        self.code = code
        self.is_coroutine = bool(code.co_flags & _CO_COROUTINE)
        self._returned = returned
        self._last = last

    def value(self):
        """``(True, value)`` after a ``return`` or a final expression that is
        not ``None``; ``(False, None)`` when the program has no value."""
        if self._returned:
            return True, self._returned[-1]  # a return in `finally` wins
        if self._last and self._last[-1] is not None:
            return True, self._last[-1]
        return False, None


def _at(node, where):
    """``node`` with the source location of ``where`` (a parsed node, which
    has all four fields): ``ast.copy_location`` without its generic lookups."""
    node.lineno = where.lineno
    node.col_offset = where.col_offset
    node.end_lineno = where.end_lineno
    node.end_col_offset = where.end_col_offset
    return node


def _syntax_error(message, node, lines):
    line = lines[node.lineno - 1] if 0 < node.lineno <= len(lines) else None
    end_col = node.end_col_offset + 1 if node.end_col_offset is not None else None
    return SyntaxError(
        message,
        (PROGRAM_FILENAME, node.lineno, node.col_offset + 1, line, node.end_lineno, end_col),
    )


def _placeholder_call(token, method, args, where):
    """``<token>.<method>(*args)`` located at ``where``."""
    func = ast.Attribute(ast.Constant(token), method, ast.Load())
    call = ast.Call(func, list(args), [])
    for node in (func.value, func, call):
        _at(node, where)
    return call


def _statement_lists(body, lines):
    """Every statement list of the top-level scope, with each loop whose
    body holds a top-level ``return`` and checks for ``break``/``continue``.

    Returns ``(lists, loops_with_return)``; ``loops_with_return`` holds ids.
    """
    lists = []
    loops_with_return = set()
    # (statement list, loops whose *body* encloses it, innermost first).
    # A loop's `else` clause is not inside the loop: `break` there leaves
    # the enclosing loop, so it keeps the enclosing chain.
    todo = [(body, ())]
    while todo:
        stmts, loops = todo.pop()
        lists.append(stmts)
        for node in stmts:
            if isinstance(node, _SCOPES):
                continue
            if isinstance(node, ast.Return):
                loops_with_return.update(id(loop) for loop in loops)
            elif isinstance(node, ast.Break) and not loops:
                raise _syntax_error("'break' outside loop", node, lines)
            elif isinstance(node, ast.Continue) and not loops:
                raise _syntax_error("'continue' not properly in loop", node, lines)
            elif isinstance(node, _LOOPS):
                todo.append((node.body, (node,) + loops))
                todo.append((node.orelse, loops))
            elif isinstance(node, ast.If):
                todo.append((node.body, loops))
                todo.append((node.orelse, loops))
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                todo.append((node.body, loops))
            elif isinstance(node, _TRY_TYPES):
                todo.append((node.body, loops))
                todo.append((node.orelse, loops))
                todo.append((node.finalbody, loops))
                todo.extend((handler.body, loops) for handler in node.handlers)
            elif _MATCH is not None and isinstance(node, _MATCH):
                todo.extend((case.body, loops) for case in node.cases)
    return lists, loops_with_return


def _rewrite_returns(body, returned_token, lines):
    """Rewrite every top-level ``return`` in place (see the module docs)."""
    lists, loops_with_return = _statement_lists(body, lines)
    for stmts in lists:
        if not any(isinstance(s, ast.Return) or id(s) in loops_with_return for s in stmts):
            continue
        rewritten = []
        for node in stmts:
            if isinstance(node, ast.Return):
                value = node.value if node.value is not None else _at(ast.Constant(None), node)
                store = _placeholder_call(returned_token, "append", [value], node)
                rewritten.append(_at(ast.Expr(store), node))
                rewritten.append(_at(ast.Break(), node))
                continue
            rewritten.append(node)
            if id(node) in loops_with_return:
                # The loop ended: by a `return` inside it, or normally.
                test = _placeholder_call(returned_token, "__len__", [], node)
                leave = _at(ast.Break(), node)
                rewritten.append(_at(ast.If(test, [leave], []), node))
        stmts[:] = rewritten


def _is_docstring(node):
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and type(node.value.value) is str


def _is_future_import(node):
    return isinstance(node, ast.ImportFrom) and node.module == "__future__" and node.level == 0


def compile_program(source):
    """Compile ``source`` into a :class:`Program`.

    Raises what ``compile`` raises (``SyntaxError``, ``ValueError`` for a NUL
    byte, ``RecursionError``/``MemoryError`` for absurd nesting).
    """
    lines = source.splitlines(True)
    tree = ast.parse(source, PROGRAM_FILENAME)
    body = tree.body
    # Kept at module level: the docstring (the compiler stores `__doc__`)
    # and the leading `from __future__` imports (they must come first).
    start = 1 if body and _is_docstring(body[0]) else 0
    end = start
    while end < len(body) and _is_future_import(body[end]):
        end += 1
    head = body[:end]
    rest = body[end:]
    if not rest and start:
        # A program that is only a string: its docstring and its value.
        rest = [body[0]]

    tag = os.urandom(16).hex()
    returned_token = "\x00pycage-returned-" + tag
    last_token = "\x00pycage-last-" + tag
    _rewrite_returns(rest, returned_token, lines)
    if rest and isinstance(rest[-1], ast.Expr):
        final = rest[-1]
        store = _placeholder_call(last_token, "append", [final.value], final.value)
        rest[-1] = _at(ast.Expr(store), final)
    if rest:
        first = rest[0]
        wrapper = ast.While(ast.Constant(True), rest + [ast.Break()], [])
        _at(wrapper, first)
        _at(wrapper.test, first)
        _at(wrapper.body[-1], rest[-1])
        head.append(wrapper)
    # Every node made here got its location from `_at`, so no
    # `ast.fix_missing_locations` walk (a third of the compile of a small program).
    module = ast.Module(body=head, type_ignores=[])
    code = compile(
        module,
        PROGRAM_FILENAME,
        "exec",
        flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
        dont_inherit=True,
    )
    returned, last = _Box(), _Box()
    swap = {returned_token: returned, last_token: last}
    consts = tuple(swap.get(c, c) if type(c) is str else c for c in code.co_consts)
    return Program(code.replace(co_consts=consts), returned, last)
