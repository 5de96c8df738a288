//! `_copy_output(work_dir, output_dir, max_bytes)`: the copy of a run's
//! `out/` into the caller's output directory, as a local run makes it
//! (`pycage_runtime::files::copy_entry`: nothing that exists there is
//! written, symlinks and special files never copied, bounded), for a
//! transport that brought a run's `out/` from elsewhere (`pycage.ray`
//! writes the node's `out/` into a private directory, then copies it here).

use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use pycage_runtime::files::{self, Access, CopyLimits, CopyReport, SkipKind, Skipped, OUTPUT_DIR_NAME};
use pyo3::prelude::*;

use crate::drive::copy_parts;

fn failed(reason: String) -> CopyReport {
    CopyReport {
        skipped: vec![Skipped { path: PathBuf::new(), reason, kind: SkipKind::Failed }],
        ..CopyReport::default()
    }
}

/// Copies `work_dir/out` into `output_dir` (created if missing) within
/// `max_bytes`, and reports it as `pycage._native` reports a run's output.
#[pyfunction]
pub fn _copy_output<'py>(
    py: Python<'py>,
    work_dir: PathBuf,
    output_dir: PathBuf,
    max_bytes: u64,
) -> PyResult<Bound<'py, PyAny>> {
    let report = py.detach(|| {
        let work = match files::create_dir_all(&work_dir) {
            Ok(fd) => fd,
            Err(e) => return failed(e.to_string()),
        };
        let dest = std::path::absolute(&output_dir).unwrap_or(output_dir);
        let dst = match files::create_dir_all(&dest) {
            Ok(fd) => fd,
            Err(e) => return failed(format!("cannot create {}: {e}", dest.display())),
        };
        files::copy_entry(
            work.as_fd(),
            OsStr::new(OUTPUT_DIR_NAME),
            dst.as_fd(),
            OsStr::new("."),
            Path::new(""),
            CopyLimits::output(max_bytes),
            Access::Writable,
        )
    });
    copy_parts(py, &report)
}
