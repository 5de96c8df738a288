//! What a program sees, end to end: `pycage run --json` with a real python3.
//!
//! A program runs as the script `__main__` (docs/semantics.md): module
//! globals, no event loop unless it awaits at top level, a top-level
//! `return`, the final expression's value, keyword arguments for bindings,
//! tuples as arrays. Each test states the exact JSON a run prints.

mod support;

use support::{assert_exit, pycage, run, run_in, stderr, stdout};

/// The `--json` line of a successful run of `program`.
#[track_caller]
fn json_ok(program: &str) -> String {
    let o = run(&["--json", "-c", program]);
    assert_exit(&o, 0);
    stdout(&o)
}

/// The `--json` line of a failed run (exit 1).
#[track_caller]
fn json_failed(program: &str) -> String {
    let o = run(&["--json", "-c", program]);
    assert_exit(&o, 1);
    stdout(&o)
}

fn value_line(value: &str) -> String {
    format!("{{\"value\":{value},\"logs\":[]}}\n")
}

// ---- the examples a model writes ----

#[test]
fn global_statement_reaches_the_module_global() {
    assert_eq!(json_ok("x = 1\ndef f():\n    global x\n    x = 2\nf()\nreturn x"), value_line("2"));
}

#[test]
fn asyncio_run_works_without_top_level_await() {
    assert_eq!(json_ok("import asyncio\nasync def main(): return 1\nreturn asyncio.run(main())"), value_line("1"));
    // Several loops in a row, and a loop made by hand.
    let program = "import asyncio\n\
                   async def main(n):\n    await asyncio.sleep(0)\n    return n\n\
                   a = asyncio.run(main(1))\n\
                   b = asyncio.run(main(2))\n\
                   loop = asyncio.new_event_loop()\n\
                   c = loop.run_until_complete(main(3))\n\
                   loop.close()\n\
                   [a, b, c]";
    assert_eq!(json_ok(program), value_line("[1,2,3]"));
}

#[test]
fn star_import_exec_and_eval_use_module_globals() {
    assert_eq!(json_ok("from math import *\nreturn floor(2.5)"), value_line("2"));
    assert_eq!(json_ok("exec(\"y = 3\")\nreturn y"), value_line("3"));
    assert_eq!(json_ok("z = 4\neval('z * 2')"), value_line("8"));
}

#[test]
fn tuples_cross_as_arrays() {
    assert_eq!(json_ok("return \"a\", 1"), value_line("[\"a\",1]"));
    let program = "import collections\nP = collections.namedtuple('P', 'x y')\nreturn {'p': P(1, (2, 3)), 'e': ()}";
    assert_eq!(json_ok(program), value_line("{\"p\":[1,[2,3]],\"e\":[]}"));
}

#[test]
fn final_expression_is_the_value() {
    assert_eq!(json_ok("20 + 22"), value_line("42"));
    assert_eq!(json_ok("import asyncio\nawait asyncio.sleep(0)\n{'a': [1]}"), value_line("{\"a\":[1]}"));
    // `None` (as `print(...)` returns) gives no value, as a notebook shows none.
    assert_eq!(json_ok("print('hi')"), "{\"logs\":[\"hi\"]}\n");
    assert_eq!(json_ok("None"), "{\"logs\":[]}\n");
    // Only a final statement counts, and a `return` wins.
    assert_eq!(json_ok("1\nx = 2"), "{\"logs\":[]}\n");
    assert_eq!(json_ok("if True:\n    return 'r'\n'final'"), value_line("\"r\""));
    // `return None` is a value: null.
    assert_eq!(json_ok("return None"), value_line("null"));
}

// ---- top-level return: the corner cases ----

#[test]
fn return_inside_try_finally_runs_finally() {
    let program = "try:\n    return 'v'\nfinally:\n    print('finally ran')";
    assert_eq!(json_ok(program), "{\"value\":\"v\",\"logs\":[\"finally ran\"]}\n");
    // A return in `finally` replaces the first and discards an exception.
    assert_eq!(json_ok("try:\n    return 1\nfinally:\n    return 2"), value_line("2"));
    assert_eq!(json_ok("try:\n    1 / 0\nfinally:\n    return 'kept'"), value_line("\"kept\""));
    // An exception in `finally` beats the return.
    let out = json_failed("try:\n    return 1\nfinally:\n    raise KeyError('k')");
    assert!(
        out.starts_with("{\"logs\":[],\"error\":{\"kind\":\"exception\"") && out.contains("KeyError: 'k'"),
        "{out}"
    );
}

#[test]
fn return_inside_with_exits_without_an_error() {
    let program = "class Txn:\n\
                   \x20   def __enter__(self): return self\n\
                   \x20   def __exit__(self, *exc):\n\
                   \x20       print('commit' if exc == (None, None, None) else 'rollback')\n\
                   with Txn():\n    return 'done'";
    assert_eq!(json_ok(program), "{\"value\":\"done\",\"logs\":[\"commit\"]}\n");
}

#[test]
fn return_inside_loops_leaves_every_loop() {
    let program = "for i in range(3):\n\
                   \x20   while True:\n\
                   \x20       if i == 1:\n\
                   \x20           return i\n\
                   \x20       break\n\
                   else:\n    print('else is skipped')\n\
                   print('not reached')";
    assert_eq!(json_ok(program), value_line("1"));
    assert_eq!(json_ok("n = 0\nwhile True:\n    n += 1\n    if n == 5:\n        return n"), value_line("5"));
}

#[test]
fn return_inside_if_and_except() {
    assert_eq!(json_ok("x = 3\nif x > 2:\n    return 'big'\nreturn 'small'"), value_line("\"big\""));
    assert_eq!(json_ok("try:\n    {}['k']\nexcept KeyError:\n    return 'caught'"), value_line("\"caught\""));
}

#[test]
fn return_cannot_be_caught_by_the_program() {
    let program = "import contextlib, sys\n\
                   try:\n\
                   \x20   with contextlib.suppress(BaseException):\n\
                   \x20       try:\n\
                   \x20           return 'kept'\n\
                   \x20       finally:\n\
                   \x20           print(sys.exc_info())\n\
                   except BaseException:\n\
                   \x20   print('caught')";
    assert_eq!(json_ok(program), "{\"value\":\"kept\",\"logs\":[\"(None, None, None)\"]}\n");
}

#[test]
fn break_yield_and_return_in_the_wrong_place_are_syntax_errors() {
    for (program, message) in [
        ("x = 1\nbreak", "SyntaxError: 'break' outside loop"),
        ("continue", "SyntaxError: 'continue' not properly in loop"),
        ("x = 1\nyield x", "SyntaxError: 'yield' outside function"),
        ("class A:\n    return 1", "SyntaxError: 'return' outside function"),
    ] {
        let out = json_failed(program);
        assert!(out.contains("File \\\"<program>\\\", line") && out.ends_with(&format!("{message}\"}}}}\n")), "{out}");
    }
}

// ---- what the script sees ----

#[test]
fn the_program_is_main_with_a_scripts_argv() {
    let program = "import sys, asyncio\n\
                   try:\n    asyncio.get_running_loop()\n    loop = 'running'\nexcept RuntimeError:\n    loop = None\n\
                   [__name__, __file__, sys.argv, sys.modules['__main__'].__dict__ is globals(), loop]";
    assert_eq!(json_ok(program), value_line("[\"__main__\",\"<program>\",[\"<program>\"],true,null]"));
}

#[test]
fn tracebacks_show_the_programs_frames_only() {
    let out = json_failed("def f():\n    raise ValueError('boom')\nf()");
    let want = "Traceback (most recent call last):\\n  File \\\"<program>\\\", line 3, in <module>\\n    f()\\n  \
                File \\\"<program>\\\", line 2, in f\\n    raise ValueError('boom')\\nValueError: boom";
    assert_eq!(out, format!("{{\"logs\":[],\"error\":{{\"kind\":\"exception\",\"message\":\"{want}\"}}}}\n"));
    // Under asyncio.run: the library frames the program called stay, pycage's never show.
    let out = json_failed("import asyncio\nasync def main():\n    raise ValueError('inner')\nasyncio.run(main())");
    assert!(out.contains("line 4, in <module>") && out.contains("line 3, in main") && out.contains("asyncio"), "{out}");
    assert!(!out.contains("bootstrap") && !out.contains("__dsh_main__") && !out.contains("pycage"), "{out}");
}

#[test]
fn sys_exit_zero_is_success_without_a_value() {
    assert_eq!(json_ok("print('bye')\nimport sys\nsys.exit(0)\nreturn 1"), "{\"logs\":[\"bye\"]}\n");
    let out = json_failed("import sys\nsys.exit(3)");
    assert!(out.contains("SystemExit: 3"), "{out}");
}

#[test]
fn a_raising_timer_handler_never_makes_invalid_output() {
    // The value takes tens of milliseconds to encode while a 0.5 ms interval
    // timer's handler raises. The program's value gets through (or, if the
    // timer fired before its last line finished, the program raised).
    let program = "import signal\n\
                   class Tick(Exception):\n    pass\n\
                   def handler(signum, frame):\n    raise Tick()\n\
                   value = [{'k': 'x' * 40, 'n': list(range(30))} for _ in range(20000)]\n\
                   signal.signal(signal.SIGALRM, handler)\n\
                   signal.setitimer(signal.ITIMER_REAL, 0.0005, 0.0005)\n\
                   return len(value), value";
    let o = run(&["--json", "--max-value-bytes", "67108864", "-c", program]);
    let out = stdout(&o);
    if o.status.code() == Some(0) {
        assert!(
            out.starts_with("{\"value\":[20000,[{\"k\":\"xxxx") && out.ends_with("29]}]],\"logs\":[]}\n"),
            "{}",
            &out[..200.min(out.len())]
        );
    } else {
        assert_exit(&o, 1);
        assert!(out.starts_with("{\"logs\":[],\"error\":{\"kind\":\"exception\",\"message\":\"Traceback"), "{out}");
    }
}

// ---- bindings ----

const ECHO: &str = "[[namespace]]\nglobal = \"tools\"\n\n[namespace.functions]\necho = { command = [\"cat\"] }\n";

/// `pycage run --json --bindings <echo tool> -c program` in a fresh directory.
fn with_echo(program: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bindings.toml"), ECHO).unwrap();
    run_in(dir.path(), &["--json", "--bindings", "bindings.toml", "-c", program])
}

#[test]
fn keyword_arguments_reach_a_command_binding_as_an_object() {
    let o = with_echo("return await tools.echo(query='x', limit=3, tags=('a', 'b'))");
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), value_line("{\"query\":\"x\",\"limit\":3,\"tags\":[\"a\",\"b\"]}"));
    // One positional argument as it is; none as {}.
    let o = with_echo("return [await tools.echo([1, 2]), await tools.echo(), await tools.echo(None)]");
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), value_line("[[1,2],{},null]"));
}

#[test]
fn mixed_or_extra_positional_arguments_are_a_type_error() {
    let program = "out = []\n\
                   for call in (lambda: tools.echo({}, q=1), lambda: tools.echo(1, 2)):\n\
                   \x20   try:\n        await call()\n    except TypeError as e:\n        out.append(str(e))\n\
                   out";
    let o = with_echo(program);
    assert_exit(&o, 0);
    assert_eq!(
        stdout(&o),
        value_line(
            "[\"tools.echo() takes keyword arguments or one positional argument, not both (got 1 positional and 1 keyword); \
             call it as: async def echo(args: Any = None, /) -> Any\",\
             \"tools.echo() takes keyword arguments or one positional argument (2 positional given); \
             call it as: async def echo(args: Any = None, /) -> Any\"]"
        )
    );
}

#[test]
fn bindings_work_in_any_event_loop() {
    let program = "import asyncio\n\
                   async def both(n):\n    return await asyncio.gather(tools.echo(n=n), tools.echo(n=n + 1))\n\
                   a = asyncio.run(both(1))\n\
                   b = asyncio.run(both(10))\n\
                   [a, b]";
    let o = with_echo(program);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), value_line("[[{\"n\":1},{\"n\":2}],[{\"n\":10},{\"n\":11}]]"));
    let o = with_echo("import asyncio\nr = await asyncio.gather(*(tools.echo(i=i) for i in range(3)))\nr");
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), value_line("[{\"i\":0},{\"i\":1},{\"i\":2}]"));
    // With top-level await the program runs in a loop, so asyncio.run
    // refuses, as it does in `python -m asyncio`.
    let o = with_echo("import asyncio\nawait tools.echo()\nasync def f():\n    pass\nasyncio.run(f())");
    assert_exit(&o, 1);
    assert!(stdout(&o).contains("RuntimeError: asyncio.run() cannot be called from a running event loop"));
}

// ---- misuse, in the user's terms ----

#[test]
fn json_mode_reports_misuse_as_json() {
    let misuse =
        |message: &str| format!("{{\"logs\":[],\"error\":{{\"kind\":\"misuse\",\"message\":\"{message}\"}}}}\n");
    let o = run(&["--json", "--memory-mb", "1", "-c", "return 1"]);
    assert_exit(&o, 2);
    assert_eq!(stdout(&o), misuse("--memory-mb must be at least 64 MiB"));
    assert_eq!(stderr(&o), "");
    let o = run(&["--json", "--no-such-flag", "-c", "return 1"]);
    assert_exit(&o, 2);
    assert_eq!(stdout(&o), misuse("unexpected argument '--no-such-flag' found"));
    assert_eq!(stderr(&o), "");
    let o = run(&["--json", "missing.py"]);
    assert_exit(&o, 2);
    assert_eq!(stdout(&o), misuse("cannot read program file missing.py: No such file or directory (os error 2)"));
}

#[test]
fn a_program_that_is_not_python_gets_one_line() {
    let o = run(&["--python", "/bin/ls", "-c", "return 1"]);
    assert_exit(&o, 2);
    let err = stderr(&o);
    assert!(
        err.starts_with("pycage: error: /bin/ls is not a CPython >= 3.10: it failed when run as one (exit status: "),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!err.contains("import"), "the probe script leaked: {err}");
    // The remedy is spelled as this interface's flag, not the library's field.
    assert!(err.trim_end().ends_with("give another with --python"), "{err}");
    assert!(!err.contains("RuntimeConfig"), "{err}");
}

#[test]
fn a_missing_allow_read_path_is_named_by_its_flag() {
    // Sandbox isolation (the default): the only one that reads the flag.
    let dir = tempfile::tempdir().unwrap();
    let o = pycage(dir.path()).args(["run", "--allow-read", "/nonexistent/venv", "-c", "return 1"]).output().unwrap();
    assert_exit(&o, 2);
    assert_eq!(stderr(&o), "pycage: error: --allow-read /nonexistent/venv: no such file or directory\n");
}

#[test]
fn a_namespace_may_not_shadow_a_builtin() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("b.toml"), "[[namespace]]\nglobal = \"print\"\n").unwrap();
    let o = run_in(dir.path(), &["--bindings", "b.toml", "-c", "return 1"]);
    assert_exit(&o, 2);
    assert_eq!(
        stderr(&o),
        "pycage: error: b.toml: namespace[0] (print): namespace global \"print\" would shadow the Python builtin print; \
         choose another name\n"
    );
}

// ---- what a program sees when it calls a function that does not exist ----

const FOUR_TOOLS: &str = "[[namespace]]\nglobal = \"tools\"\n\n[namespace.functions]\n\
                          echo = { command = [\"cat\"] }\nsearch = { command = [\"cat\"] }\n\
                          search_docs = { command = [\"cat\"] }\nfetch = { command = [\"cat\"] }\n";

#[test]
fn an_unknown_function_lists_the_namespace_functions_closest_first() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("b.toml"), FOUR_TOOLS).unwrap();
    let program = "out = []\n\
                   for name in ('serch', 'nope'):\n    try:\n        getattr(tools, name)\n    \
                   except AttributeError as e:\n        out.append([str(e), e.name])\n\
                   out";
    let o = run_in(dir.path(), &["--json", "--bindings", "b.toml", "-c", program]);
    assert_exit(&o, 0);
    assert_eq!(
        stdout(&o),
        value_line(
            "[[\"namespace 'tools' has no function 'serch'; did you mean 'search'? \
             Its functions: 'search', 'echo', 'search_docs', 'fetch'.\",\"serch\"],\
             [\"namespace 'tools' has no function 'nope'. Its functions: 'echo', 'fetch', 'search', 'search_docs'.\",\
             \"nope\"]]"
        )
    );
    // Uncaught, as a model meets it: the traceback's last line says what exists.
    let o = run_in(dir.path(), &["--json", "--bindings", "b.toml", "-c", "x = 1\nawait tools.nope()"]);
    assert_exit(&o, 1);
    let out = stdout(&o);
    assert!(
        out.contains("line 2, in <module>")
            && out.ends_with(
                "AttributeError: namespace 'tools' has no function 'nope'. \
                 Its functions: 'echo', 'fetch', 'search', 'search_docs'.\"}}\n"
            ),
        "{out}"
    );
}

#[test]
fn int_digit_limit_and_recursion_depth_are_cpythons() {
    // The child lifts the int digit limit only around its own encoding: the
    // program's own conversion refuses as under CPython, its value crosses.
    let program = "try:\n    str(10 ** 6000)\n    r = 'converted'\nexcept ValueError:\n    r = 'ValueError'\n\
                   [r, len(str(10 ** 4000)), 10 ** 5000 > 0]";
    assert_eq!(json_ok(program), value_line("[\"ValueError\",4001,true]"));
    let o = run(&["--json", "-c", "return 7 * 10 ** 6000"]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), value_line(&format!("7{}", "0".repeat(6000))));
    // A script's recursion depth: 998 frames of f under python3 (the module
    // is the first; CPython's own answer moves by one with its warm state).
    let depth =
        json_ok("def f(n):\n    try:\n        return f(n + 1)\n    except RecursionError:\n        return n\nf(0)");
    let n: i64 = depth.strip_prefix("{\"value\":").unwrap().split(',').next().unwrap().parse().unwrap();
    let limit: i64 = 1000;
    assert!((limit - 3..=limit - 1).contains(&n), "recursed {n} deep under a limit of {limit}");
}
