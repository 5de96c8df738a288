//! `pycage repl`, driven through a pipe: JSON lines, and cells on stdin.
mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::process::Stdio;

use support::*;

/// A `pycage repl --json` child and its line reader.
struct Driver {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    _dir: tempfile::TempDir,
}

impl Driver {
    fn start(extra: &[&str]) -> Driver {
        let dir = tempfile::tempdir().unwrap();
        let mut child = pycage(dir.path())
            .args(["repl", "--json", "--isolation", "process"])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Driver { child, stdin, stdout, _dir: dir }
    }

    /// Sends one raw line and reads one answer line.
    fn line(&mut self, request: &str) -> String {
        writeln!(self.stdin, "{request}").unwrap();
        self.stdin.flush().unwrap();
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).unwrap();
        answer.trim_end().to_owned()
    }

    fn program(&mut self, program: &str) -> String {
        let mut quoted = Vec::new();
        pycage_protocol::write_json_string(&mut quoted, program);
        self.line(&format!("{{\"program\":{}}}", String::from_utf8(quoted).unwrap()))
    }

    fn finish(self) -> std::process::Output {
        drop(self.stdin);
        self.child.wait_with_output().unwrap()
    }
}

#[test]
fn json_lines_drive_one_session() {
    let mut d = Driver::start(&[]);
    assert_eq!(d.program("x = 1\nimport math"), r#"{"logs":[]}"#);
    assert_eq!(d.program("x += 41\nprint('kept', x)\nx"), r#"{"value":42,"logs":["kept 42"]}"#);
    assert_eq!(d.program("math.floor(2.5) + x"), r#"{"value":44,"logs":[]}"#);
    // A bad request line is misuse, and the session goes on.
    let misuse = d.line("return 1");
    assert!(misuse.starts_with(r#"{"logs":[],"error":{"kind":"misuse","message":"a request must be"#), "{misuse}");
    assert!(d.line(r#"{}"#).contains(r#"has no \"program\""#));
    // A field the request does not have is refused, naming the ones it has,
    // and the cell does not run (it was not ignored silently).
    let unknown = d.line(r#"{"program":"x = 0","wall_ms":100}"#);
    assert_eq!(
        unknown,
        r#"{"logs":[],"error":{"kind":"misuse","message":"unknown field \"wall_ms\" in the request: a request has only \"program\"; a session's budgets are pycage repl's flags (--wall-ms, --cpu-seconds, ...), not request fields"}}"#
    );
    assert!(d.line(r#"{"code":"x"}"#).contains(r#"unknown field \"code\""#));
    // An exception is an outcome; the state survives it.
    assert!(d.program("1/0").contains(r#""kind":"exception""#));
    assert_eq!(d.program("x"), r#"{"value":42,"logs":[]}"#);
    // A crash ends the session; the next cell starts a new one and says why.
    assert!(d.program("import os\nos._exit(3)").contains(r#""kind":"worker-exit""#));
    let after = d.program("'x' in globals()");
    assert!(after.starts_with(r#"{"value":false,"logs":[],"restarted":"its last run ended as worker-exit"#), "{after}");
    assert_eq!(d.program("x = 7\nx"), r#"{"value":7,"logs":[]}"#);
    let out = d.finish();
    assert_exit(&out, 0);
}

#[test]
fn json_repl_has_the_bindings_of_its_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("b.toml"),
        "[[namespace]]\nglobal = \"tools\"\n[namespace.functions]\necho = { command = [\"cat\"] }\n",
    )
    .unwrap();
    let file = dir.path().join("b.toml");
    let mut d = Driver::start(&["--bindings", file.to_str().unwrap()]);
    assert_eq!(d.program("r = await tools.echo(q=1)"), r#"{"logs":[]}"#);
    assert_eq!(d.program("r"), r#"{"value":{"q":1},"logs":[]}"#);
    assert_exit(&d.finish(), 0);
}

/// `pycage repl` (process isolation) with `input` piped to its stdin, to the end.
fn cells_on_stdin(input: &[u8]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let mut child = pycage(dir.path())
        .args(["repl", "--isolation", "process"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).unwrap();
    drop(stdin);
    child.wait_with_output().unwrap()
}

#[test]
fn cells_on_stdin_run_in_one_session() {
    let out = cells_on_stdin(b"x = 1\ndef f(a):\n    return a * 2\n\nf(x) + 1\nprint('log')\n1/0\nx\n");
    assert_exit(&out, 0);
    assert_eq!(stdout(&out), "3\nlog\n1\n");
    assert!(stderr(&out).contains("error: exception: Traceback"), "{}", stderr(&out));
}

/// `exit()` and `quit` leave, as at Python's prompt: the cells after them
/// never run.
#[test]
fn exit_or_quit_leaves() {
    for word in ["exit()", "quit", "  quit()  "] {
        let out = cells_on_stdin(format!("x = 41\nx + 1\n{word}\nprint('after')\n").as_bytes());
        assert_exit(&out, 0);
        assert_eq!(stdout(&out), "42\n", "{word}");
        assert!(!stderr(&out).contains("error"), "{}", stderr(&out));
    }
}

/// Cells' logs, values and errors are for a person: escape sequences are
/// shown, never sent to the terminal (an OSC 52 clipboard write, a screen
/// clear, a bidi override).
#[test]
fn cell_output_is_escaped_for_the_terminal() {
    let out =
        cells_on_stdin(b"print('\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J')\n'\\u202e'\nraise ValueError('\\x1b[31mred')\n");
    assert_exit(&out, 0);
    for stream in [&out.stdout, &out.stderr] {
        assert!(!stream.contains(&0x1b), "{}", String::from_utf8_lossy(stream));
        assert!(!String::from_utf8_lossy(stream).contains('\u{202e}'));
    }
    assert_eq!(stdout(&out), "\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J\n\"\\u202e\"\n");
    assert!(stderr(&out).contains("ValueError: \\x1b[31mred"), "{}", stderr(&out));
}

/// What the terminal has shown (and whether pycage closed it), shared with
/// the thread that reads it.
type Screen = std::sync::Arc<(std::sync::Mutex<(Vec<u8>, bool)>, std::sync::Condvar)>;

/// `pycage repl` on a pseudo-terminal: the test is the terminal (the
/// master side); pycage leads a session whose controlling terminal is the
/// slave, so a Ctrl-C typed there is a SIGINT to pycage's process group,
/// as on a real terminal.
struct Terminal {
    child: std::process::Child,
    master: std::fs::File,
    /// Everything pycage wrote, and whether the slave side closed.
    seen: Screen,
    /// How much of `seen` the test has already matched.
    cursor: usize,
    dir: tempfile::TempDir,
}

impl Terminal {
    fn start(term: &str) -> Terminal {
        use std::os::fd::{FromRawFd, OwnedFd};
        use std::os::unix::process::CommandExt;

        let (mut master, mut slave) = (-1, -1);
        let size = libc::winsize { ws_row: 40, ws_col: 200, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: openpty writes two descriptors into the locals; no name
        // buffer is passed, and the termios/winsize pointers are valid or null.
        let rc = unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), &size) };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: openpty returned two fresh descriptors this test owns.
        let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = pycage(dir.path());
        cmd.args(["repl", "--isolation", "process"])
            .env("TERM", term)
            // History and the probe cache go to this test's directory.
            .env("XDG_CACHE_HOME", dir.path().join("cache"))
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave);
        // SAFETY: between fork and exec the child only calls setsid and
        // ioctl, both async-signal-safe; the slave is its stdin (fd 0).
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap();
        drop(cmd); // closes the parent's copies of the slave
        let master = std::fs::File::from(master);
        let seen: Screen = std::sync::Arc::new((std::sync::Mutex::new((Vec::new(), false)), std::sync::Condvar::new()));
        let (reader, sink) = (master.try_clone().unwrap(), seen.clone());
        std::thread::spawn(move || {
            use std::io::Read;
            let mut reader = reader;
            let mut buf = [0u8; 4096];
            loop {
                // EIO once every slave descriptor is closed: pycage is gone.
                let n = reader.read(&mut buf).unwrap_or(0);
                let (lock, cond) = &*sink;
                let mut state = lock.lock().unwrap();
                if n == 0 {
                    state.1 = true;
                } else {
                    state.0.extend_from_slice(&buf[..n]);
                }
                cond.notify_all();
                if n == 0 {
                    return;
                }
            }
        });
        Terminal { child, master, seen, cursor: 0, dir }
    }

    /// Types `bytes` at the terminal.
    fn send(&mut self, bytes: &str) {
        self.master.write_all(bytes.as_bytes()).unwrap();
    }

    /// Waits until `pattern` appears after what was matched before; returns
    /// the text up to and including it. The terminal echoes what is typed,
    /// so a pattern that shows a cell's effect must not be in its text. The deadline only keeps a broken
    /// build from hanging: a cell that is not aborted runs forever.
    #[track_caller]
    fn expect(&mut self, pattern: &str) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        let (lock, cond) = &*self.seen;
        let mut state = lock.lock().unwrap();
        loop {
            let text = String::from_utf8_lossy(&state.0[self.cursor..]).into_owned();
            if let Some(at) = text.find(pattern) {
                let upto = at + pattern.len();
                self.cursor += text[..upto].len();
                return text[..upto].to_owned();
            }
            let now = std::time::Instant::now();
            assert!(
                !state.1 && now < deadline,
                "no {pattern:?} in what the terminal shows after the last match:\n{text}"
            );
            state = cond.wait_timeout(state, deadline - now).unwrap().0;
        }
    }

    /// Waits until pycage has taken the SIGINT the terminal sent it (no
    /// SIGINT pending for the process any more).
    fn sigint_taken(&self) {
        let status = format!("/proc/{}/status", self.child.id());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let text = std::fs::read_to_string(&status).unwrap();
            let pending = text.lines().find_map(|l| l.strip_prefix("ShdPnd:")).unwrap().trim().to_owned();
            if u64::from_str_radix(&pending, 16).unwrap() & (1 << (libc::SIGINT - 1)) == 0 {
                return;
            }
            assert!(std::time::Instant::now() < deadline, "SIGINT still pending");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Ctrl-D at the prompt; pycage leaves with status 0.
    fn leave(mut self) {
        self.send("\x04");
        let status = self.child.wait().unwrap();
        assert_eq!(status.code(), Some(0));
    }
}

/// Ctrl-C during a cell aborts it and says the session ended with it; the
/// prompt stays; lines typed while a cell runs are read after it, all of
/// them; Ctrl-C at the prompt drops the cell being typed and is not held
/// over to the next cell.
#[test]
fn ctrl_c_on_a_terminal_aborts_the_running_cell_only() {
    let mut t = Terminal::start("xterm");
    t.expect(">>> ");
    t.send("x = 1\n");
    t.expect(">>> ");

    // A cell that runs until it is aborted.
    t.send("import time; print('spin' + 'ning'); [time.sleep(0.01) for _ in iter(int, 1)]\n");
    t.expect("spinning");
    t.send("\x03");
    t.expect("error: abort: the run was cancelled");
    t.expect("KeyboardInterrupt: the cell was aborted, and its session ended with it");
    t.expect(">>> ");
    t.send("'x' in globals()\n");
    let shown = t.expect("false");
    assert!(!shown.contains("the session had ended"), "the abort was already told: {shown}");
    // One prompt: the Ctrl-C was not also kept for the editor's next line.
    assert!(!shown.contains(">>> "), "{shown}");
    t.expect(">>> ");

    // A line typed while a cell runs is the next cell.
    let flag = t.dir.path().join("go");
    t.send(&format!(
        "import os, time; print('wait' + 'ing'); [time.sleep(0.01) for _ in iter(lambda: os.path.exists({:?}), True)]; 'done'\n",
        flag.to_str().unwrap()
    ));
    t.expect("waiting");
    // Two lines queue up in the terminal and reach the editor in one read:
    // the second must not be dropped with the rest of that read.
    t.send("y = 21\n");
    t.send("z = y * 2\n");
    std::fs::write(&flag, "").unwrap();
    t.expect("\"done\"");
    t.send("z + 1\n");
    t.expect("43");
    t.expect(">>> ");

    // Ctrl-C at a continuation prompt drops the cell being typed.
    t.send("def f():\n");
    t.expect("... ");
    t.send("\x03");
    t.expect(">>> ");
    t.send("'f' in globals()\n");
    t.expect("false");
    t.expect(">>> ");

    // Ctrl-C at the prompt, then a cell that sleeps: it runs to its value.
    t.send("\x03");
    t.expect(">>> ");
    t.send("import time; time.sleep(0.3); 'slept'\n");
    let shown = t.expect("\"slept\"");
    assert!(!shown.contains("abort"), "{shown}");
    t.expect(">>> ");
    t.leave();
}

/// On a terminal the editor cannot drive (TERM=dumb), the prompt reads in
/// the terminal's own line mode, so a Ctrl-C at the prompt is a SIGINT to
/// pycage: it must not abort the next cell.
#[test]
fn a_sigint_at_the_prompt_is_not_held_over_to_the_next_cell() {
    let mut t = Terminal::start("dumb");
    t.expect(">>> ");
    t.send("x = 1\n");
    t.expect(">>> ");
    t.send("\x03");
    t.expect("^C");
    t.sigint_taken();
    t.send("import time; time.sleep(0.3); 'slept'\n");
    let shown = t.expect("\"slept\"");
    assert!(!shown.contains("abort"), "{shown}");
    // A Ctrl-C during a cell still aborts it.
    t.send("import time; print('spin' + 'ning'); [time.sleep(0.01) for _ in iter(int, 1)]\n");
    t.expect("spinning");
    t.send("\x03");
    t.expect("KeyboardInterrupt: the cell was aborted");
    t.send("'x' in globals()\n");
    t.expect("false");
    t.leave();
}

/// A sandboxed session's shell is forked by the repl's shell helper (the
/// embedded `pycage-shell-helper` program, installed in the user's cache,
/// the repl's child), not by the repl; the repl ends it when it exits.
#[test]
fn sandboxed_sessions_get_their_shells_from_the_helper() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let mut child = pycage(dir.path())
        .env("XDG_CACHE_HOME", cache.path())
        .args(["repl", "--json", "--isolation", "sandbox"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut d = Driver {
        stdin: child.stdin.take().unwrap(),
        stdout: BufReader::new(child.stdout.take().unwrap()),
        child,
        _dir: dir,
    };
    assert_eq!(d.program("1 + 1"), r#"{"value":2,"logs":[]}"#);
    let repl = d.child.id();
    // Each thread's children: the spawner thread starts the helper.
    let children: String = std::fs::read_dir(format!("/proc/{repl}/task"))
        .unwrap()
        .flatten()
        .map(|t| std::fs::read_to_string(t.path().join("children")).unwrap_or_default())
        .collect::<Vec<_>>()
        .join(" ");
    // The installed program: the cache's `pycage/shell-helper-<hash>`.
    let installed = cache.path().join("pycage");
    let helpers: Vec<u32> = children
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter(|p| {
            let argv = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            let program = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(
                argv.split(|&b| b == 0).next().unwrap_or_default(),
            ));
            program.parent() == Some(installed.as_path())
                && program.file_name().is_some_and(|n| n.to_string_lossy().starts_with("shell-helper-"))
        })
        .collect();
    assert_eq!(helpers.len(), 1, "the repl's children: {children}");
    // The helper's own children: the shell of the session, and the pool's.
    let shells = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", helpers[0])).unwrap_or_default();
    assert!(!shells.trim().is_empty(), "the helper forked no shell");
    let o = d.finish();
    assert_exit(&o, 0);
    // Gone with the repl (its death signal, or the runtime's shutdown);
    // init reaps it.
    let helper = helpers[0];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let alive = || {
        std::fs::read_to_string(format!("/proc/{helper}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().next() != Some("Z")))
            .unwrap_or(false)
    };
    while alive() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!alive(), "the helper outlived the repl");
}

/// Issue 41: back-to-back cells that each keep 24 MiB more cannot outgrow
/// `--memory-mb 64`: the cell that crosses it ends the session, and the
/// next cell runs in a new one.
#[test]
fn back_to_back_cells_cannot_outgrow_the_memory_budget() {
    let mut d = Driver::start(&["--memory-mb", "64"]);
    assert_eq!(d.program("held = []"), r#"{"logs":[]}"#);
    let mut ended = None;
    for cell in 1..=20 {
        let answer = d.program("held.append(b'x' * (24 << 20))\nlen(held)");
        if answer.contains("\"error\"") {
            assert!(answer.contains("worker-exit") && answer.contains("memory budget"), "{answer}");
            ended = Some(cell);
            break;
        }
    }
    let cell = ended.expect("20 cells of 24 MiB fit a 64 MiB budget");
    assert!(cell <= 3, "the session held {} MiB before it ended", cell * 24);
    let next = d.program("'held' in globals()");
    assert!(next.contains("\"value\":false") && next.contains("restarted"), "{next}");
    assert!(d.finish().status.success());
}

/// `pycage repl --type-check`: a cell with a type error comes back as a
/// `type-error` at its own line and does not run (its print never shows,
/// its assignment never happens); the session checks its cells as one
/// program, so a later cell that uses an earlier cell's name passes.
#[test]
fn type_check_stops_a_wrong_cell_and_knows_the_earlier_ones() {
    let Some(ty) = ty_binary() else { return };
    let mut d = Driver::start(&["--type-check", "--ty", ty.to_str().unwrap()]);
    assert_eq!(d.program("count: int = 2"), r#"{"logs":[]}"#);
    let wrong = d.program("print('ran')\ncount = 'three'");
    assert!(
        wrong.starts_with(r#"{"logs":[],"error":{"kind":"type-error","message":"the type check (ty) found 1 error"#),
        "{wrong}"
    );
    assert!(wrong.contains("<program>:2:"), "{wrong}");
    assert_eq!(d.program("count + 1"), r#"{"value":3,"logs":[]}"#);
    let o = d.finish();
    assert!(o.status.success(), "{o:?}");
}
