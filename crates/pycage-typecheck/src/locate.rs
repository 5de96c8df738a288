//! Finding the `ty` binary, as the package installer finds `uv`: the
//! configured path, else `ty` beside the run's interpreter (`pip install
//! ty` into a venv puts it there), else `ty` on `PATH`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The ty release pycage is tested with (pinned in the CI requirements).
/// Another release may name its rules differently; `pycage doctor` says
/// which one was found.
pub const TESTED_TY_VERSION: &str = "0.0.104";

/// How to install ty, for messages.
pub const INSTALL_HINT: &str = "install it with `pip install ty==0.0.104` into the interpreter's venv (or anywhere \
     on PATH), or name the binary (`pycage --ty PATH`, the Python package's `ty=`, `RuntimeConfig::ty`)";

/// Where ty was looked for, and why it was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocateError {
    /// The configured path is not an executable file.
    #[error("the configured ty binary `{}` is not an executable file: {INSTALL_HINT}", .0.display())]
    Configured(PathBuf),
    /// Nothing found beside the interpreter or on PATH.
    #[error("type checking needs ty, which was found neither beside the interpreter ({}) nor on PATH: {INSTALL_HINT}", .0.display())]
    NotFound(PathBuf),
}

/// The ty binary to run: `configured`, else beside `python`, else on
/// `PATH`.
pub fn find(configured: Option<&Path>, python: &Path) -> Result<PathBuf, LocateError> {
    if let Some(path) = configured {
        // Absolute: the server runs in its own workspace directory.
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        return if is_executable(&absolute) { Ok(absolute) } else { Err(LocateError::Configured(path.into())) };
    }
    let dir = python.parent().unwrap_or(Path::new("/"));
    let beside = dir.join("ty");
    if is_executable(&beside) {
        return Ok(beside);
    }
    let on_path = std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).map(|d| d.join("ty")).find(|p| is_executable(p)));
    // A relative PATH entry too: the server runs in its own directory.
    on_path.map(|p| std::path::absolute(&p).unwrap_or(p)).ok_or_else(|| LocateError::NotFound(dir.to_path_buf()))
}

/// What `ty --version` prints (`ty 0.0.104`), for `pycage doctor`.
pub fn version(ty: &Path) -> Result<String, String> {
    let out = Command::new(ty)
        .arg("--version")
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("`{} --version` could not run: {e}", ty.display()))?;
    if !out.status.success() {
        return Err(format!("`{} --version` failed ({})", ty.display(), out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().chars().take(200).collect())
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configured_path_that_is_not_executable_is_refused() {
        let e = find(Some(Path::new("/nonexistent/ty")), Path::new("/usr/bin/python3")).unwrap_err();
        assert!(e.to_string().contains("pip install ty=="), "{e}");
    }

    #[test]
    fn a_relative_configured_path_is_made_absolute() {
        let dir = tempfile::tempdir().unwrap();
        let ty = dir.path().join("ty");
        std::fs::write(&ty, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&ty, std::fs::Permissions::from_mode(0o755)).unwrap();
        let cwd = std::env::current_dir().unwrap();
        let relative: PathBuf = std::iter::repeat_n("..", cwd.components().count())
            .collect::<PathBuf>()
            .join(ty.strip_prefix("/").unwrap());
        let found = find(Some(&relative), Path::new("/usr/bin/python3")).unwrap();
        assert!(found.is_absolute(), "{}", found.display());
        assert!(std::fs::metadata(&found).is_ok());
    }

    #[test]
    fn ty_beside_the_interpreter_is_found_first() {
        let dir = tempfile::tempdir().unwrap();
        let ty = dir.path().join("ty");
        std::fs::write(&ty, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&ty, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(find(None, &dir.path().join("python")).unwrap(), ty);
    }
}
