//! A host that holds many descriptors (an MCP server with hundreds of
//! connections) still starts sandboxed runs: a child forked from it lowers
//! its `RLIMIT_NOFILE` only once the inherited descriptors are out of the
//! way. Before, opening `/proc/self` for the id maps failed with EMFILE
//! whenever the host held more descriptors than a run may.
#![allow(clippy::unwrap_used, clippy::panic)]

mod common;

use std::os::fd::OwnedFd;

use pycage_runtime::*;

/// More than a run's `max_open_files` (256 by default).
const HELD: usize = 400;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_with_inputs_starts_while_the_host_holds_many_descriptors() {
    let held: Vec<OwnedFd> = (0..HELD).map(|_| std::fs::File::open("/dev/null").unwrap().into()).collect();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("data.txt");
    std::fs::write(&input, "hello").unwrap();
    let rt = common::runtime_with(|c| c.isolation = Isolation::Sandbox);
    let program = "import os, resource\n\
                   fds = sorted(int(f) for f in os.listdir('/proc/self/fd'))\n\
                   [open('data.txt').read(), resource.getrlimit(resource.RLIMIT_NOFILE)[0], max(fds) < 10]";
    let r = rt.run(RunRequest::new(program).with_input(&input)).await.unwrap();
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(common::value(&r), "[\"hello\",256,true]");
    // Without inputs too (a pooled child; its shell comes from the helper).
    let r = common::run(&rt, "1 + 1").await;
    assert_eq!(common::value(&r), "2", "{:?}", r.error);
    drop(held);
    rt.shutdown().await;
}
