//! How each interface names a setting in messages (see `crate::error`):
//! a leaf, so that every module that explains an error can use it.

/// A setting an error message may tell the reader to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// The interpreter (`RuntimeConfig::python`).
    Python,
    /// Process isolation instead of the sandbox (`Isolation::Process`).
    ProcessIsolation,
    /// An extra read-only path (`RuntimeConfig::allow_read`).
    AllowRead,
    /// The virtual environment (`RuntimeConfig::venv`).
    Venv,
    /// The modules imported before each program (`RuntimeConfig::preload`).
    Preload,
    /// The caller's requirements (`RuntimeConfig::with_packages`).
    WithPackages,
    /// The type checker's binary (`RuntimeConfig::ty`).
    Ty,
}

/// How one interface names settings in its messages.
pub trait Spelling {
    /// The setting as a reader of this interface would write it.
    fn setting(&self, setting: Setting) -> &'static str;
}

/// The library's own spelling (Rust names).
#[derive(Debug, Clone, Copy, Default)]
pub struct RustSpelling;

impl Spelling for RustSpelling {
    fn setting(&self, setting: Setting) -> &'static str {
        match setting {
            Setting::Python => "RuntimeConfig::python",
            Setting::ProcessIsolation => "RuntimeConfig::isolation = Isolation::Process",
            Setting::AllowRead => "RuntimeConfig::allow_read",
            Setting::Venv => "RuntimeConfig::venv",
            Setting::Preload => "RuntimeConfig::preload",
            Setting::WithPackages => "RuntimeConfig::with_packages",
            Setting::Ty => "RuntimeConfig::ty",
        }
    }
}
