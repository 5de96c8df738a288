//! Why a run's packages could not be provided.

use std::path::PathBuf;
use std::time::Duration;

/// Why a run's packages could not be provided. The run fails with
/// `dependencies` and this message; the program did not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackageError {
    /// The `# /// script` block or a requirement in it is malformed.
    #[error("{0}")]
    Invalid(String),
    /// The program declares packages and the caller allowed none, or not
    /// this one. The message says how to allow it, in every interface.
    #[error(
        "the program declares {what}, which this runtime does not allow: a program's own declarations \
         (its `# /// script` dependencies) are installed only when the caller allows them ({how}){allowed}"
    )]
    NotAllowed { what: String, how: String, allowed: String },
    /// What the resolver chose to install for an allowed package brings a
    /// package that is not allowed.
    #[error(
        "installing {requirements} would bring {name} {version}, which this runtime does not allow (it is \
         a dependency of what was declared; every package installed for a program must be allowed: {how})"
    )]
    DependencyNotAllowed { requirements: String, name: String, version: String, how: String },
    /// A package has no wheel for this interpreter and platform; builds
    /// from source are not run.
    #[error(
        "installing {requirements} failed: {detail}; pycage installs wheels only (a build from source runs \
         the package's own code, which it never does outside a sandbox): pick a version with a wheel for \
         {platform}, have the caller install it into the venv, or have the caller allow builds, which run \
         in a sandbox of their own (`pycage run --allow-builds`; `allow_builds=True` in Python; \
         `RuntimeConfig::allow_builds` in Rust)"
    )]
    NoWheel { requirements: String, detail: String, platform: String },
    /// A build the caller allowed (`allow_builds`) failed in its sandbox.
    #[error("building {requirements} in a sandbox failed: {output}")]
    Build { requirements: String, output: String },
    /// This runtime has seen too many failed resolutions of names that
    /// programs declared: each one reached the package index.
    #[error(
        "the package index was not asked for {requirements}: programs of this runtime declared packages that \
         could not be resolved {failed} times, its bound (each failed name reaches the index, a channel out of \
         a run that has no network)"
    )]
    TooManyFailures { requirements: String, failed: u64 },
    /// Neither uv nor pip is available.
    #[error(
        "no installer for the run's packages: install uv next to the interpreter or on PATH \
         (pip install uv), or pip into the interpreter"
    )]
    NoInstaller,
    /// The installer failed (resolution, download).
    #[error("installing {requirements} with {installer} failed: {output}")]
    Install { installer: &'static str, requirements: String, output: String },
    /// Past `RuntimeConfig::install_timeout`.
    #[error("installing {requirements} took longer than {} s", .timeout.as_secs())]
    Timeout { requirements: String, timeout: Duration },
    /// The run was cancelled while its packages were being installed.
    #[error("the run was cancelled while its packages were being installed")]
    Cancelled,
    /// The cache could not be written.
    #[error("the package cache {path}: {message}")]
    Cache { path: PathBuf, message: String },
}
