//! A run's declared packages: what a program asks for (a PEP 723
//! `# /// script` block) and what the caller adds (`--with`,
//! `RuntimeConfig::with_packages`), checked, installed by the host where no
//! package's code can run, and kept in a cache that each run sees only
//! its own entry of.
//!
//! The rules, each enforced here:
//!
//! - **A program's declarations are refused unless the caller allows
//!   them** ([`Declarations`]): by name (`--allow-package NAME`), or any
//!   (`--allow-any-package`). The caller's own requirements are trusted.
//! - **What an allowed package brings is checked too**: every distribution
//!   the resolver installed must be allowed, or be reached from the
//!   caller's own requirements ([`metadata::closure`]); otherwise the run
//!   fails naming it, before anything reaches a run.
//! - **No package's code runs on the host**: the installer installs wheels
//!   only, from an empty private directory ([`installer`]). A package
//!   without a wheel for the platform fails with a message that names it
//!   and says why, unless the caller allowed builds: then the whole set is
//!   installed by a [`installer::Builder`] (the runtime's runs pip in a
//!   sandbox whose only network is the index), and what it made is checked
//!   here like any install before it enters the cache.
//! - **Requirements stay data** ([`requirement`]): names, extras,
//!   specifiers and markers only; bounded in number and length; each
//!   passed after `--`.
//! - **Names are not a channel**: with the default policy only allowed
//!   names reach the index; with any name allowed, a runtime allows
//!   [`MAX_FAILED_RESOLUTIONS`] failed installs of declared names, then
//!   asks the index for no new name.
//! - **The cache** (`cache`) is keyed by what was installed, written
//!   only by the host, bounded in bytes with least-recently-used eviction
//!   of entries no run holds, and one install runs at a time.
//!
//! # Layers
//!
//! Each module uses only those listed before it (`tests/layers.rs`):
//! `error`, [`requirement`], [`metadata`], [`installer`], then `cache`.

mod cache;
mod error;
pub mod installer;
pub mod metadata;
pub mod requirement;

pub use cache::{Declarations, Entry, PackageCache, Request, Target, HOW_TO_ALLOW, MAX_FAILED_RESOLUTIONS};
pub use error::PackageError;
pub use installer::Builder;
pub use requirement::{is_project_name, normalize, script_dependencies, Requirement, MAX_REQUIREMENTS};

/// Where a sandboxed run sees its packages (its own entry, read-only).
pub const PACKAGES_DIR: &str = "/opt/pycage-packages";
