//! The files mcphost keeps for itself (tokens, stored catalogs, the era
//! cache, the config's lock): private to the user and replaced atomically.
//! A leaf: every layer that keeps a file writes it through here, in the
//! directory the daemon (or the CLI) hands it.
//!
//! - [`write_atomic`]: a reader sees the old file or the new one, never a
//!   torn one, and the new one is `0600` from its creation.
//! - [`ensure_private_dir`]: the directory, `0700`, ours.
//! - [`user_home_dir`]: where the per-user directories are, as the password
//!   database has it.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A state file or directory that could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("{}: {reason}", path.display())]
pub struct StateFileError {
    pub path: PathBuf,
    pub reason: String,
}

impl StateFileError {
    fn io(path: &Path, e: &std::io::Error) -> StateFileError {
        StateFileError {
            path: path.to_path_buf(),
            reason: e.to_string(),
        }
    }
}

/// Replaces `path` with `bytes`: a temp file in the same directory (`0600`
/// from creation), fsync, rename over `path`, fsync the directory. The
/// directory must exist ([`ensure_private_dir`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StateFileError> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .suffix(".json")
        .tempfile_in(dir)
        .map_err(|e| StateFileError::io(dir, &e))?;
    tmp.write_all(bytes)
        .map_err(|e| StateFileError::io(tmp.path(), &e))?;
    tmp.as_file()
        .sync_all()
        .map_err(|e| StateFileError::io(tmp.path(), &e))?;
    tmp.persist(path)
        .map_err(|e| StateFileError::io(path, &e.error))?;
    sync_dir(dir)
}

/// Makes a rename or removal in `dir` durable.
pub fn sync_dir(dir: &Path) -> Result<(), StateFileError> {
    #[cfg(unix)]
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StateFileError::io(dir, &e))?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Creates `dir` `0700` (with its missing parents), or tightens an existing
/// one that group or others can use: it is ours, and refusing would only
/// leave the user to run the chmod. A directory we cannot chmod (another
/// user's) is refused.
pub fn ensure_private_dir(dir: &Path) -> Result<(), StateFileError> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder
        .create(dir)
        .map_err(|e| StateFileError::io(dir, &e))?;
    let meta = std::fs::metadata(dir).map_err(|e| StateFileError::io(dir, &e))?;
    if !meta.is_dir() {
        return Err(StateFileError {
            path: dir.to_path_buf(),
            reason: "not a directory".into(),
        });
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        if meta.uid() != nix::unistd::geteuid().as_raw() {
            return Err(StateFileError {
                path: dir.to_path_buf(),
                reason: format!("owned by uid {}, not by this user", meta.uid()),
            });
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(path = %dir.display(), mode = format!("{mode:o}"), "state directory open to others, setting 0700");
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| StateFileError::io(dir, &e))?;
        }
    }
    Ok(())
}

/// Takes group and other permissions off an open state file (to `mode`),
/// saying so: something else loosened them.
pub fn tighten(file: &File, path: &Path, mode: u32) -> Result<(), StateFileError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = file.metadata().map_err(|e| StateFileError::io(path, &e))?;
        let current = meta.permissions().mode() & 0o777;
        if current & 0o077 != 0 {
            tracing::warn!(path = %path.display(), mode = format!("{current:o}"), "state file open to others, tightening");
            file.set_permissions(std::fs::Permissions::from_mode(mode))
                .map_err(|e| StateFileError::io(path, &e))?;
        }
    }
    #[cfg(not(unix))]
    let _ = (file, path, mode);
    Ok(())
}

/// The user's home directory as the password database has it, not `$HOME`
/// (which a host may drop or set to a sandbox of its own); `None` when the
/// database has no absolute one.
pub fn user_home_dir() -> Option<PathBuf> {
    #[cfg(unix)]
    {
        nix::unistd::User::from_uid(nix::unistd::geteuid())
            .ok()
            .flatten()
            .map(|u| u.dir)
            .filter(|d| d.is_absolute())
    }
    #[cfg(not(unix))]
    {
        directories::BaseDirs::new().map(|d| d.home_dir().to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_written_file_is_private_and_a_loose_directory_is_tightened() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("state");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        ensure_private_dir(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);

        let file = dir.join("x.json");
        write_atomic(&file, b"one").unwrap();
        write_atomic(&file, b"two").unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"two");
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(left.len(), 1, "no temp file is left behind");
    }
}
