//! The process's one multi-threaded tokio runtime, shared by every
//! `NativeRuntime`, and rebuilt in a forked child.

use std::sync::{Arc, Mutex};

use pyo3::prelude::*;

use crate::errors::error;

/// The process's tokio runtime, rebuilt in a forked child (whose copy of the
/// parent's runtime has no threads).
static TOKIO: Mutex<Option<(u32, Arc<tokio::runtime::Runtime>)>> = Mutex::new(None);

pub fn tokio_runtime(py: Python<'_>) -> PyResult<Arc<tokio::runtime::Runtime>> {
    let pid = std::process::id();
    let mut slot = TOKIO.lock().map_err(|_| error(py, "PycageError", "the tokio runtime lock is poisoned".into()))?;
    if let Some((owner, rt)) = slot.as_ref() {
        if *owner == pid {
            return Ok(rt.clone());
        }
    }
    if let Some((_, inherited)) = slot.take() {
        // Dropping it would wait for worker threads that do not exist here.
        std::mem::forget(inherited);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("pycage")
        .on_thread_start(pycage_runtime::run_in_background)
        .build()
        .map_err(|e| error(py, "PycageError", format!("could not start the tokio runtime: {e}")))?;
    let rt = Arc::new(rt);
    *slot = Some((pid, rt.clone()));
    Ok(rt)
}
