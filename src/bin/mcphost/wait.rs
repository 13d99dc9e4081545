//! `mcphost servers --wait`: until every server has settled, a progress
//! display on a terminal (a line per server as it settles otherwise), then
//! the slowest starts named.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::Value;

use crate::backend::Backend;

/// States a server stays in until someone acts (or, for `restarting`
/// after a failure of a server that retries forever, until it comes back).
fn settled(state: &str) -> bool {
    matches!(
        state,
        "ready" | "failed" | "disabled" | "stopped" | "auth_required" | "auth_failed"
    )
}

/// Polls `mcphost/servers/list` until every server settled or `limit`
/// passed; returns the last list. A server still starting at the limit is
/// an error naming it.
pub async fn servers(b: &Backend, limit: Duration, quiet: bool) -> Result<Value> {
    let started = Instant::now();
    let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {pos}/{len} servers settled  {elapsed}  {wide_msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.enable_steady_tick(Duration::from_millis(100));
        bar
    });
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    loop {
        let list = b.request("mcphost/servers/list", None).await?;
        let servers = list.as_array().cloned().unwrap_or_default();
        let mut waiting = Vec::new();
        for sv in &servers {
            let name = sv["name"].as_str().unwrap_or("?").to_owned();
            let state = sv["state"].as_str().unwrap_or("?").to_owned();
            if settled(&state) {
                if seen.get(&name) != Some(&state) {
                    let line = format!("{name}: {state}{}", took(sv));
                    match &bar {
                        Some(bar) => bar.println(line),
                        None if !quiet => eprintln!("{line}"),
                        None => {}
                    }
                }
            } else {
                waiting.push(name.clone());
            }
            seen.insert(name, state);
        }
        if let Some(bar) = &bar {
            bar.set_length(servers.len() as u64);
            bar.set_position((servers.len() - waiting.len()) as u64);
            bar.set_message(format!("waiting for {}", waiting.join(", ")));
        }
        if waiting.is_empty() {
            if let Some(bar) = &bar {
                bar.finish_and_clear();
            }
            return Ok(list);
        }
        if started.elapsed() >= limit {
            if let Some(bar) = &bar {
                bar.abandon();
            }
            bail!(
                "still starting after {}: {}",
                humantime::format_duration(Duration::from_secs(limit.as_secs())),
                waiting.join(", ")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn took(sv: &Value) -> String {
    match sv["startMs"].as_f64() {
        Some(ms) => format!(" in {}", ms_text(ms)),
        None => String::new(),
    }
}

fn ms_text(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else {
        format!("{ms:.0} ms")
    }
}

/// "slowest to start: a (2.1 s), b (900 ms), c (450 ms)", or `None` with
/// fewer than two timed servers.
pub fn slowest(list: &Value, n: usize) -> Option<String> {
    let mut timed: Vec<(f64, &str)> = list
        .as_array()?
        .iter()
        .filter_map(|sv| Some((sv["startMs"].as_f64()?, sv["name"].as_str()?)))
        .collect();
    if timed.len() < 2 {
        return None;
    }
    timed.sort_by(|a, b| b.0.total_cmp(&a.0));
    let names: Vec<String> = timed
        .iter()
        .take(n)
        .map(|(ms, name)| format!("{name} ({})", ms_text(*ms)))
        .collect();
    Some(format!("slowest to start: {}", names.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn slowest_names_the_longest_starts_first() {
        let list = json!([
            {"name": "a", "startMs": 12.0},
            {"name": "b", "startMs": 2100.0},
            {"name": "c"},
            {"name": "d", "startMs": 450.4},
        ]);
        assert_eq!(
            slowest(&list, 2).as_deref(),
            Some("slowest to start: b (2.1 s), d (450 ms)")
        );
        assert_eq!(slowest(&json!([{"name": "a", "startMs": 1.0}]), 3), None);
    }
}
