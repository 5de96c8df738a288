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

Most programs do not go through the tree at all: they compile from their
text in two pieces, with the same outcome ("the split", below).

Stdlib only; nothing here runs program code. The walk is iterative.
"""

import __future__

import ast
import os
import re

from pycage._private import BUILTINS

# Functions here resolve builtins in the private copy (see _private).
__builtins__ = BUILTINS

#: File name of the program in code objects, tracebacks and ``linecache``.
PROGRAM_FILENAME = "<program>"

_CO_COROUTINE = 0x80
_ONLY_AST = ast.PyCF_ONLY_AST
_compile = compile
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
    """A compiled program: ``eval`` ``code`` in the globals it was compiled
    for, then, when there is one, ``tail`` and hand its result to
    :meth:`keep` (await each result that is a coroutine: ``code_awaits``,
    ``tail_awaits``; ``is_coroutine`` when either is); then ask :meth:`value`
    for the program's value."""

    __slots__ = ("_last", "_returned", "_tail_box", "code", "code_awaits", "is_coroutine", "tail", "tail_awaits")

    def __init__(self, code, returned, last, tail=None, tail_box=None):
        self.code = code
        self.code_awaits = bool(code.co_flags & _CO_COROUTINE)
        self.tail = tail
        self.tail_awaits = tail is not None and bool(tail.co_flags & _CO_COROUTINE)
        self.is_coroutine = self.code_awaits or self.tail_awaits
        self._tail_box = tail_box
        self._returned = returned
        self._last = last

    def keep(self, result):
        """Take the tail's result: the final expression's value, or what a
        final ``return`` returns (``tail_box`` says which, or neither)."""
        if self._tail_box is not None:
            self._tail_box.append(result)

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


def _rewrite_returns(body, returned_token, source):
    """Rewrite every top-level ``return`` in place (see the module docs);
    whether there was one."""
    lines = source.splitlines(True)
    lists, loops_with_return = _statement_lists(body, lines)
    found = False
    for stmts in lists:
        if not any(isinstance(s, ast.Return) or id(s) in loops_with_return for s in stmts):
            continue
        rewritten = []
        for node in stmts:
            if isinstance(node, ast.Return):
                found = True
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
    return found


def _is_docstring(node):
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and type(node.value.value) is str


def _is_future_import(node):
    return isinstance(node, ast.ImportFrom) and node.module == "__future__" and node.level == 0


def compile_program(source):
    """Compile ``source`` into a :class:`Program`.

    Raises what ``compile`` raises (``SyntaxError``, ``ValueError`` for a NUL
    byte, ``RecursionError``/``MemoryError`` for absurd nesting).
    """
    program = _compile_split(source)
    if program is not None:
        return program
    return _compile_rewritten(source)


def _compile_rewritten(source):
    """The program compiled through its rewritten tree (see the module docs)."""
    body = _compile(source, PROGRAM_FILENAME, "exec", _ONLY_AST, dont_inherit=True).body
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
    # Without a top-level `return` (no `return` anywhere is the common case,
    # and needs no walk) the statements run as they are: the wrapper loop is
    # only the way out for a `return`, and without it the compiler itself
    # rejects a top-level `break` or `continue`.
    wrap = "return" in source and _rewrite_returns(rest, returned_token, source)
    if rest and isinstance(rest[-1], ast.Expr):
        final = rest[-1]
        store = _placeholder_call(last_token, "append", [final.value], final.value)
        rest[-1] = _at(ast.Expr(store), final)
    if not wrap:
        head += rest
    elif rest:
        first = rest[0]
        wrapper = ast.While(ast.Constant(True), rest + [ast.Break()], [])
        _at(wrapper, first)
        _at(wrapper.test, first)
        _at(wrapper.body[-1], rest[-1])
        head.append(wrapper)
    # Every node made here got its location from `_at`, so no
    # `ast.fix_missing_locations` walk (a third of the compile of a small program).
    module = ast.Module(body=head, type_ignores=[])
    code = _compile(
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


# --- the split: most programs compile without a tree ---------------------
#
# The rewrite above goes through Python's ``ast``: the parser's tree is built
# as Python objects and converted back for the compiler, about twice the
# cost of compiling the text (50 µs instead of 18 for ``x = x + 1; x``, 470
# instead of 250 for a thirty-line program; more in a cold child). A program
# without a top-level ``return`` needs no rewrite but the final expression's,
# so it is compiled as two code objects: the text up to its last top-level
# statement (the head), compiled as it is, and that statement alone (the
# tail: an expression in ``eval`` mode, whose result is the value; a final
# ``return X``, the most common ``return``, is ``X`` in ``eval`` mode: see
# ``_compile_return``). A program whose split this cannot prove goes to the
# rewrite, which stays the reference: the two agree on every program
# (``tests/test_script_split.py``).
# Any other top-level ``return`` makes the head or the tail fail to compile
# (the compiler's "'return' outside function"), which sends it to the rewrite.
#
# The proof. The last top-level statement starts at column 0 of some line,
# after a line that ends a statement; the candidate is the last line that
# starts with a character a statement can start with (not a clause such as
# ``else:``; a decorated definition from its first decorator). If the head
# compiles on its own, every string and bracket opened in it is closed, and
# the candidate starts a top-level statement; if the tail parses as exactly
# one statement, that statement is the last one.
#
# Compile warnings come once: the head is compiled once; the tail is
# compiled as an expression, or, when it is none (its parse failed before a
# compiler warning could come), parsed and compiled from its tree. Texts
# with a backslash escape the tokenizer warns about go to the rewrite, whose
# parse would repeat the warning. One case repeats one: a program with both
# a compiler warning (``x is 1``) and a top-level ``return`` warns here, then
# again in the rewrite.

_STMT_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789([{@-+~.*")
#: A backslash the tokenizer may warn about (an unknown escape).
_WARNED_ESCAPE = re.compile(r"\\[^\\'\"abfnrtv0-7xNuU\n]")
_FUTURE_FLAGS = 0
for _name in __future__.all_feature_names:
    _FUTURE_FLAGS |= getattr(__future__, _name).compiler_flag
del _name
#: Lines that go on a compound statement rather than start one.
_CLAUSES = ("else", "elif", "except", "finally")
#: A statement that starts with a string, perhaps in parentheses, past
#: blanks and comments: a docstring, if it comes first? A comment is taken
#: to its line's end only (the lookahead), so there is one way to match
#: and no backtracking blows up on a banner of ``#``.
_MAYBE_DOCSTRING = re.compile(r"(?:[(\s]|#[^\n]*(?=\n|\Z))*[bBrRuUfF]{0,2}['\"]")
#: What may follow ``return`` on its line for ``_compile_return`` to read it.
_AFTER_RETURN = frozenset(" \t([{'\"")
_NOT_AFTER_RETURN = re.compile(r":=|\bfor\b")
_TOP_LEVEL_AWAIT = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
_Return = ast.Return
_Expr = ast.Expr
_Constant = ast.Constant
_Expression = ast.Expression
_Module = ast.Module


#: The head of a program that is one statement.
_NOTHING = compile("", PROGRAM_FILENAME, "exec", dont_inherit=True)


def _has_code(lines, k):
    """Whether a statement comes before line ``k`` (a line that is not blank
    and not a comment; the first one is most often line 0)."""
    for i in range(k):
        line = lines[i].strip()
        if line and line[0] != "#":
            return True
    return False


def _compile_return(line, lines, k, flags):
    """``return X`` on the last statement's line, alone (what follows is
    blank or comments), as ``X`` in ``eval`` mode: ``return`` becomes ``(``
    and five spaces, so ``X`` keeps its columns, and a ``)`` closes it on a
    line of its own. In parentheses ``X`` could be two things it cannot be
    after ``return`` (an unparenthesized ``:=`` or generator): a line with
    either goes to the tree, as does any line this does not compile."""
    value = line[6:].strip()
    if not value or value[0] == "#" or _NOT_AFTER_RETURN.search(line) is not None:
        return None
    rest = lines[k + 1 :]
    for later in rest:
        later = later.strip()
        if later and later[0] != "#":
            return None
    text = "\n" * k + "(     " + line[6:] + "\n" + "\n".join(rest) + "\n)"
    try:
        return _compile(text, PROGRAM_FILENAME, "eval", flags, dont_inherit=True)
    except Exception:
        return None


def _compile_split(source):
    """The program as head and tail (see above), or None when the split
    cannot be proven and the rewrite must compile it."""
    if "\r" in source or ("\\" in source and _WARNED_ESCAPE.search(source) is not None):
        return None
    lines = source.split("\n")
    k = len(lines) - 1
    while k >= 0 and (lines[k][:1] not in _STMT_START or lines[k].startswith(_CLAUSES)):
        k -= 1
    if k < 0:
        return None  # no statement: the rewrite keeps the rules for a docstring alone
    while k > 0 and lines[k - 1][:1] == "@":
        k -= 1  # a decorated definition starts at its first decorator
    if k == 0:
        head = _NOTHING  # a one-statement program: no head to compile
    else:
        try:
            head = _compile("\n".join(lines[:k]), PROGRAM_FILENAME, "exec", _TOP_LEVEL_AWAIT, dont_inherit=True)
        except Exception:
            return None
    flags = _TOP_LEVEL_AWAIT | (head.co_flags & _FUTURE_FLAGS)
    line = lines[k]
    final_return = line.startswith("return") and line[6:7] in _AFTER_RETURN
    if final_return:
        tail = _compile_return(line, lines, k, flags)
        if tail is not None:
            returned = _Box()
            return Program(head, returned, _Box(), tail, returned)
    # Padded with the head's lines, so the tail's locations are the program's.
    tail_text = "\n" * k + "\n".join(lines[k:])
    if not final_return and ((k and _has_code(lines, k)) or _MAYBE_DOCSTRING.match(tail_text, k) is None):
        # Most often the last statement is an expression: compiled as one at
        # once. A string that is the program's first statement could be its
        # docstring: the tree says.
        try:
            tail = _compile(tail_text, PROGRAM_FILENAME, "eval", flags, dont_inherit=True)
            last = _Box()
            return Program(head, _Box(), last, tail, last)
        except Exception:
            pass  # a statement (or none, or an error): the tree says
    try:
        tail = _compile(tail_text, PROGRAM_FILENAME, "exec", _ONLY_AST, dont_inherit=True).body
        if len(tail) != 1:
            return None
        statement = tail[0]
        if _is_future_import(statement):
            return None
        kind = type(statement)
        if kind is _Expr and type(statement.value) is _Constant and type(statement.value.value) is str:
            return None  # perhaps a docstring
    except Exception:
        return None
    returned, last = _Box(), _Box()
    box = None
    try:
        if kind is _Expr or kind is _Return:
            # A final `return X` is X's value (`return` alone: None), as a
            # final expression is, but a value even when it is None.
            value = statement.value if kind is _Expr else statement.value or _at(_Constant(None), statement)
            box = last if kind is _Expr else returned
            tail = _compile(_Expression(value), PROGRAM_FILENAME, "eval", flags, dont_inherit=True)
        else:
            tail = _compile(_Module(tail, []), PROGRAM_FILENAME, "exec", flags, dont_inherit=True)
    except SyntaxError:
        return None  # a `return` inside the last statement, or the rewrite's error
    return Program(head, returned, last, tail, box)
