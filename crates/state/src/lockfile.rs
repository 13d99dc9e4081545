//! An exclusive lock on a file, against other processes and against other
//! tasks and threads of this one: the token store's refresh lock and the
//! CLI's daemon start-up lock.
//!
//! Tasks of this process queue on an async mutex per path first (fair, no
//! polling, and exclusion even where `flock` is per process: NFS emulates it
//! with `fcntl` locks); then the file's `flock` is polled with a growing
//! pause. A process that dies releases its locks with its descriptors, so a
//! lock is never stale. Lock files stay: removing one races with its next
//! user.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

const POLL_MIN: Duration = Duration::from_millis(2);
const POLL_MAX: Duration = Duration::from_millis(50);

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another process or task held the lock for the whole wait.
    #[error("timed out after {waited:?} waiting for the lock {}", path.display())]
    Timeout { path: PathBuf, waited: Duration },
    #[error("lock file {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl LockError {
    pub fn path(&self) -> &Path {
        match self {
            LockError::Timeout { path, .. } | LockError::Io { path, .. } => path,
        }
    }
}

/// Held while the lock is: dropping it releases the lock.
pub struct FileLock {
    // Closed before the local mutex is released (field order), so the next
    // task of this process finds the file unlocked.
    file: File,
    _local: tokio::sync::OwnedMutexGuard<()>,
    path: PathBuf,
}

impl FileLock {
    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces what the lock file says (who holds it, for those who find
    /// it held); the lock is on the file, not its contents.
    pub fn set_contents(&self, text: &str) -> Result<(), LockError> {
        use std::io::{Seek, Write};
        let io = |source| LockError::Io {
            path: self.path.clone(),
            source,
        };
        let mut file = &self.file;
        file.set_len(0).map_err(io)?;
        file.seek(std::io::SeekFrom::Start(0)).map_err(io)?;
        file.write_all(text.as_bytes()).map_err(io)?;
        file.flush().map_err(io)
    }
}

impl std::fmt::Debug for FileLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileLock")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // Closing the descriptor would release it too; this is explicit.
        let _ = self.file.unlock();
    }
}

/// Takes the exclusive lock on `path` (created 0600 if missing, its
/// directory must exist), waiting at most `timeout`. Needs a tokio runtime
/// with its time driver.
pub async fn lock_within(path: &Path, timeout: Duration) -> Result<FileLock, LockError> {
    let started = tokio::time::Instant::now();
    let timed_out = || LockError::Timeout {
        path: path.to_path_buf(),
        waited: timeout,
    };
    let local = tokio::time::timeout(timeout, local_mutex(path).lock_owned())
        .await
        .map_err(|_| timed_out())?;
    let file = open(path)?;
    let mut pause = POLL_MIN;
    loop {
        match file.try_lock() {
            Ok(()) => {
                return Ok(FileLock {
                    file,
                    _local: local,
                    path: path.to_path_buf(),
                });
            }
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(source)) => {
                return Err(LockError::Io {
                    path: path.to_path_buf(),
                    source,
                });
            }
        }
        let left = timeout.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(timed_out());
        }
        tokio::time::sleep(pause.min(left)).await;
        pause = pause.saturating_mul(2).min(POLL_MAX);
    }
}

/// Whether some process holds the lock on `path` right now (a missing file
/// is not held). The answer can change the moment it is given.
pub fn is_held(path: &Path) -> Result<bool, LockError> {
    let file = match OpenOptions::new().read(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(source) => {
            return Err(LockError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    match file.try_lock() {
        Ok(()) => {
            let _ = file.unlock();
            Ok(false)
        }
        Err(std::fs::TryLockError::WouldBlock) => Ok(true),
        Err(std::fs::TryLockError::Error(source)) => Err(LockError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// One async mutex per lock file path in this process.
fn local_mutex(path: &Path) -> Arc<tokio::sync::Mutex<()>> {
    type Map = HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>;
    static LOCAL: LazyLock<parking_lot::Mutex<Map>> = LazyLock::new(Default::default);
    let mut map = LOCAL.lock();
    // Drop the mutexes nobody holds or waits for.
    map.retain(|_, m| Arc::strong_count(m) > 1);
    map.entry(path.to_path_buf()).or_default().clone()
}

/// Opens (creating 0600) a lock file, taking group and other permissions
/// off one that has them.
pub(crate) fn open(path: &Path) -> Result<File, LockError> {
    let io = |source| LockError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut options = OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        options.mode(0o600).custom_flags(libc::O_NOFOLLOW);
        let file = options.open(path).map_err(io)?;
        let current = file.metadata().map_err(io)?.permissions().mode() & 0o777;
        if current & 0o077 != 0 {
            tracing::warn!(path = %path.display(), mode = format!("{current:o}"), "lock file open to others, tightening");
            file.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(io)?;
        }
        Ok(file)
    }
    #[cfg(not(unix))]
    options.open(path).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The assumption behind the in-process half: two opens of one file in
    /// one process conflict (flock is per open file description).
    #[test]
    fn flock_conflicts_between_two_opens_in_one_process() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.lock");
        let a = open(&path).unwrap();
        let b = open(&path).unwrap();
        a.try_lock().unwrap();
        assert!(matches!(
            b.try_lock(),
            Err(std::fs::TryLockError::WouldBlock)
        ));
        a.unlock().unwrap();
        b.try_lock().unwrap();
    }

    #[tokio::test]
    async fn a_second_taker_waits_and_times_out_and_is_held_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        assert!(!is_held(&path).unwrap());
        let first = lock_within(&path, Duration::from_secs(1)).await.unwrap();
        assert!(is_held(&path).unwrap());
        let err = lock_within(&path, Duration::from_millis(50))
            .await
            .unwrap_err();
        assert!(matches!(err, LockError::Timeout { .. }), "{err}");
        drop(first);
        assert!(!is_held(&path).unwrap());
        lock_within(&path, Duration::from_millis(50)).await.unwrap();
    }
}
