//! Waiting on events instead of sleeping: a test that needs "the call is
//! pending at its server" waits for the server to say so.

use std::time::Duration;

use mcphost::registry::RegistryEvent;
use tokio::sync::broadcast;

/// The line the test server logs on stderr as a blocking call (`slow`,
/// `sample`, `elicit`, ...) starts: the call is pending there.
pub fn in_flight_line(tool: &str) -> String {
    format!("in flight: tools/call {tool}")
}

/// Waits for a stderr line of `server` containing `needle` among the
/// registry's events (subscribe before starting what logs it).
pub async fn stderr_line(
    events: &mut broadcast::Receiver<RegistryEvent>,
    server: &str,
    needle: &str,
    limit: Duration,
) -> String {
    let wait = async {
        loop {
            match events.recv().await {
                Ok(RegistryEvent::Stderr { server: s, line })
                    if s == server && line.contains(needle) =>
                {
                    return line.to_string();
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    panic!("lost {n} registry events while waiting for {needle:?}")
                }
                Err(broadcast::error::RecvError::Closed) => {
                    panic!("the registry closed before {server} logged {needle:?}")
                }
            }
        }
    };
    tokio::time::timeout(limit, wait)
        .await
        .unwrap_or_else(|_| panic!("{server} did not log {needle:?} within {limit:?}"))
}

/// Waits for the daemon's log (it runs with `-vv` where debug lines are
/// wanted) to contain `needle` `times` times.
pub fn daemon_log(d: &super::Daemon, needle: &str, times: usize, limit: Duration) {
    super::poll(
        &format!("{times}× {needle:?} in the daemon's log"),
        limit,
        || (d.log_text().matches(needle).count() >= times).then_some(()),
    );
}
