//! Where the socket lives. One test in its own binary: it changes the
//! process environment, which nothing may read concurrently.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use mcphost::ipc::{
    ListenOptions, SOCKET_ENV, connect, default_socket_path, listen, resolve_socket_path,
};

fn set(name: &str, value: Option<&str>) {
    // SAFETY: this binary runs one test, on one thread.
    unsafe {
        match value {
            Some(v) => std::env::set_var(name, v),
            None => std::env::remove_var(name),
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn socket_path_precedence_and_fallbacks() {
    set(SOCKET_ENV, None);
    set("XDG_RUNTIME_DIR", Some("/run/user/4242"));
    assert_eq!(
        default_socket_path(),
        Path::new("/run/user/4242/mcphost/mcphost.sock")
    );
    assert_eq!(resolve_socket_path(None), default_socket_path());

    // No runtime dir (or a relative one, which XDG says to ignore): the cache dir.
    set("HOME", Some("/home/someone"));
    set("XDG_CACHE_HOME", None);
    for runtime in [None, Some("relative/run")] {
        set("XDG_RUNTIME_DIR", runtime);
        assert_eq!(
            default_socket_path(),
            Path::new("/home/someone/.cache/mcphost/mcphost.sock")
        );
    }
    set("XDG_CACHE_HOME", Some("/var/cache/someone"));
    assert_eq!(
        default_socket_path(),
        Path::new("/var/cache/someone/mcphost/mcphost.sock")
    );

    // --socket beats $MCPHOST_SOCKET beats the default; empty means unset.
    set(SOCKET_ENV, Some("/from/env.sock"));
    assert_eq!(resolve_socket_path(None), Path::new("/from/env.sock"));
    assert_eq!(
        resolve_socket_path(Some("/from/cli.sock".into())),
        Path::new("/from/cli.sock")
    );
    set(SOCKET_ENV, Some(""));
    assert_eq!(resolve_socket_path(None), default_socket_path());
    let relative = resolve_socket_path(Some(PathBuf::from("here.sock")));
    assert_eq!(relative, std::env::current_dir().unwrap().join("here.sock"));

    // The default path end to end: its directory is created 0700.
    let tmp = tempfile::tempdir().unwrap();
    set("XDG_RUNTIME_DIR", tmp.path().to_str());
    set(SOCKET_ENV, None);
    let listener = listen(ListenOptions::default()).await.unwrap();
    let expected = tmp.path().join("mcphost/mcphost.sock");
    assert_eq!(listener.path(), expected);
    assert_eq!(
        std::fs::metadata(tmp.path().join("mcphost"))
            .unwrap()
            .mode()
            & 0o777,
        0o700
    );
    assert!(connect(&resolve_socket_path(None), 1024).await.is_ok());
}
