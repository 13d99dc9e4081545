//! Where the socket lives. One test in its own binary: it changes the
//! process environment, which nothing may read concurrently.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use mcphost::config::default_config_path;
use mcphost::ipc::{
    ListenOptions, SOCKET_ENV, connect, default_socket_path, listen, resolve_socket_path,
    user_home_dir,
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
async fn socket_path_precedence_and_a_default_no_environment_variable_moves() {
    set(SOCKET_ENV, None);
    // The user's runtime directory if logind made it, else the home
    // directory of the password database.
    let uid = unsafe { libc::geteuid() };
    let run = PathBuf::from(format!("/run/user/{uid}"));
    let home = user_home_dir().expect("a home directory in the password database");
    let expected = if std::fs::metadata(&run).is_ok_and(|m| m.is_dir() && m.uid() == uid) {
        run.join("mcphost/mcphost.sock")
    } else {
        home.join(".cache/mcphost/mcphost.sock")
    };
    assert_eq!(default_socket_path(), expected);
    let config = home.join(".config/mcphost/config.json");
    assert_eq!(default_config_path().as_deref(), Some(config.as_path()));
    // Whatever a host passes or leaves out, the same paths.
    for (name, value) in [
        ("XDG_RUNTIME_DIR", Some("/run/user/4242")),
        ("XDG_RUNTIME_DIR", None),
        ("HOME", Some("/home/someone-else")),
        ("HOME", None),
        ("XDG_CACHE_HOME", Some("/var/cache/someone")),
        ("XDG_CONFIG_HOME", Some("/var/config/someone")),
        ("TMPDIR", Some("/var/tmp/someone")),
    ] {
        set(name, value);
        assert_eq!(default_socket_path(), expected, "{name}={value:?}");
        assert_eq!(
            default_config_path().as_deref(),
            Some(config.as_path()),
            "{name}={value:?}"
        );
    }
    assert_eq!(resolve_socket_path(None), default_socket_path());
    set("TMPDIR", None);

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

    // End to end: the socket's directory is created 0700.
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("mcphost/mcphost.sock");
    set(SOCKET_ENV, path.to_str());
    let listener = listen(ListenOptions::new(resolve_socket_path(None)))
        .await
        .unwrap();
    assert_eq!(listener.path(), path);
    assert_eq!(
        std::fs::metadata(tmp.path().join("mcphost"))
            .unwrap()
            .mode()
            & 0o777,
        0o700
    );
    assert!(connect(&resolve_socket_path(None), 1024).await.is_ok());
}
