//! A run directory is removed whatever the program made of it: deeper than
//! the host's descriptor limit, with a 1 GiB `fallocate(KEEP_SIZE)` file at
//! the bottom and locked-down permissions. One test in its own binary: it
//! lowers this process's `RLIMIT_NOFILE`.
#![allow(clippy::unwrap_used, clippy::panic)]

mod common;

use std::path::Path;

use pycage_runtime::*;

/// A program that builds a chain `levels` deep (one `chdir` at a time, so
/// it never holds more than one descriptor), then a 1 GiB file at the
/// bottom whose blocks are allocated without changing its size, then makes
/// a few directories unreadable on the way back up.
fn chain_program(levels: usize) -> String {
    format!(
        "import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
top = os.getcwd()
for i in range({levels}):
    os.mkdir('d')
    os.chdir('d')
fd = os.open('big', os.O_CREAT | os.O_WRONLY, 0o600)
assert libc.fallocate(fd, 1, 0, 1 << 30) == 0, ctypes.get_errno()
allocated = os.fstat(fd).st_blocks * 512
os.close(fd)
os.symlink('/etc/passwd', 'link')
os.chdir(top)
os.chmod('d', 0o000)
return allocated >= 1 << 30"
    )
}

fn build_chain_with_std(dir: &Path, levels: usize) {
    let mut path = dir.to_path_buf();
    for _ in 0..levels {
        path.push("d");
    }
    // create_dir_all with a path longer than PATH_MAX fails; go level by level.
    let mut fd =
        rustix::fs::open(dir, rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY, rustix::fs::Mode::empty())
            .unwrap();
    for _ in 0..levels {
        rustix::fs::mkdirat(&fd, "d", rustix::fs::Mode::from_raw_mode(0o755)).unwrap();
        fd = rustix::fs::openat(
            &fd,
            "d",
            rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_dir_deeper_than_the_fd_limit_with_1_gib_inside_is_removed() {
    // A low limit keeps the chain short (and the test fast).
    let limit = 256u64;
    rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: Some(limit),
            maximum: rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum,
        },
    )
    .unwrap();
    let levels = limit as usize + 100;

    // The control: std's recursive removal holds a descriptor per level.
    let control = tempfile::tempdir().unwrap();
    build_chain_with_std(control.path(), levels);
    let err = std::fs::remove_dir_all(control.path().join("d")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EMFILE), "{err}");
    pycage_runtime::cleanup::remove_tree(&control.path().join("d")).unwrap();

    let parent = tempfile::tempdir().unwrap();
    let rt = common::runtime_with(|c| {
        c.run_dir_parent = Some(parent.path().to_path_buf());
        c.max_file_bytes = 4 << 30;
        c.wall_time = std::time::Duration::from_secs(120);
    });
    let r = rt.run(RunRequest::new(chain_program(levels))).await.unwrap();
    assert_eq!(common::value(&r), "true", "the file's gigabyte was really allocated");
    // Shutdown waits for the run's child to be reaped and its directory removed.
    rt.shutdown().await;
    assert_eq!(rt.cleanup_failures(), Vec::<CleanupFailure>::new());
    drop(rt);
    let left: Vec<String> = std::fs::read_dir(parent.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, Vec::<String>::new(), "the run's directory and the runtime's lock are gone");
}
