//! Latency and outcome of tool calls, per server and per tool, kept across
//! a server's restarts (the registry's clients share one [`CallStats`]).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Microseconds from 1 µs to one hour, at 2 significant digits: about 3 KiB
/// per histogram, made only for a server or tool that was called.
const LOWEST_US: u64 = 1;
const HIGHEST_US: u64 = 3_600_000_000;
const SIGFIG: u8 = 2;

#[derive(Default)]
pub struct CallStats {
    servers: Mutex<HashMap<String, ServerStats>>,
}

struct ServerStats {
    all: Series,
    tools: HashMap<String, Series>,
}

pub(crate) struct Series {
    latency: Histogram<u64>,
    errors: u64,
}

impl Series {
    pub(crate) fn new() -> Option<Series> {
        Some(Series {
            latency: Histogram::new_with_bounds(LOWEST_US, HIGHEST_US, SIGFIG).ok()?,
            errors: 0,
        })
    }

    pub(crate) fn record(&mut self, took: Duration, failed: bool) {
        let us = u64::try_from(took.as_micros())
            .unwrap_or(u64::MAX)
            .clamp(LOWEST_US, HIGHEST_US);
        // In bounds by the clamp, so this cannot fail.
        let _ = self.latency.record(us);
        if failed {
            self.errors = self.errors.saturating_add(1);
        }
    }

    pub(crate) fn summary(&self) -> Summary {
        let ms = |q: f64| self.latency.value_at_quantile(q) as f64 / 1e3;
        Summary {
            calls: self.latency.len(),
            errors: self.errors,
            p50_ms: ms(0.5),
            p99_ms: ms(0.99),
            max_ms: self.latency.max() as f64 / 1e3,
        }
    }
}

/// One series as `mcphost/status` and `servers --stats` show it.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub calls: u64,
    /// JSON-RPC errors, timeouts and results with `isError`.
    pub errors: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// A server's calls: all of them, then per tool (its own tool names).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ServerSummary {
    #[serde(flatten)]
    pub all: Summary,
    pub tools: std::collections::BTreeMap<String, Summary>,
}

impl CallStats {
    pub fn new() -> Arc<CallStats> {
        Arc::new(CallStats::default())
    }

    /// One finished `tools/call` of `server`'s tool `tool`.
    pub fn record(&self, server: &str, tool: &str, took: Duration, failed: bool) {
        let mut servers = self.servers.lock();
        if !servers.contains_key(server) {
            let Some(all) = Series::new() else { return };
            servers.insert(
                server.to_owned(),
                ServerStats {
                    all,
                    tools: HashMap::new(),
                },
            );
        }
        let Some(s) = servers.get_mut(server) else {
            return;
        };
        s.all.record(took, failed);
        if let Some(t) = s.tools.get_mut(tool) {
            t.record(took, failed);
        } else if let Some(mut t) = Series::new() {
            t.record(took, failed);
            s.tools.insert(tool.to_owned(), t);
        }
    }

    /// `None` for a server never called.
    pub fn server(&self, server: &str) -> Option<ServerSummary> {
        let servers = self.servers.lock();
        let s = servers.get(server)?;
        Some(ServerSummary {
            all: s.all.summary(),
            tools: s
                .tools
                .iter()
                .map(|(name, t)| (name.clone(), t.summary()))
                .collect(),
        })
    }

    /// Forget a server that left the config.
    pub fn forget(&self, server: &str) {
        self.servers.lock().remove(server);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_calls_and_errors_are_per_server_and_per_tool() {
        let stats = CallStats::new();
        for i in 1..=100u64 {
            stats.record("a", "echo", Duration::from_millis(i), i % 10 == 0);
        }
        stats.record("a", "slow", Duration::from_secs(2), false);
        stats.record("b", "echo", Duration::from_micros(300), false);

        let a = stats.server("a").expect("a was called");
        assert_eq!(a.all.calls, 101);
        assert_eq!(a.all.errors, 10);
        let echo = &a.tools["echo"];
        assert_eq!(echo.calls, 100);
        // 2 significant digits: within 1% of the true quantiles.
        assert!((echo.p50_ms - 50.0).abs() <= 0.5, "{echo:?}");
        assert!((echo.p99_ms - 99.0).abs() <= 1.0, "{echo:?}");
        assert!((a.tools["slow"].max_ms - 2000.0).abs() <= 20.0);
        let b = stats.server("b").expect("b was called");
        assert_eq!((b.all.calls, b.all.errors), (1, 0));
        assert!((b.all.p50_ms - 0.3).abs() < 0.01, "{b:?}");
        assert!(stats.server("c").is_none());
        stats.forget("a");
        assert!(stats.server("a").is_none());
    }

    #[test]
    fn durations_out_of_range_are_clamped_not_dropped() {
        let stats = CallStats::new();
        stats.record("a", "t", Duration::ZERO, false);
        stats.record("a", "t", Duration::from_secs(10 * 3600), true);
        let a = stats.server("a").expect("called");
        assert_eq!(a.all.calls, 2);
        assert_eq!(a.all.errors, 1);
    }
}
