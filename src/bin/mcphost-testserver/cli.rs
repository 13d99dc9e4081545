//! Command-line / environment configuration of the test server.

use std::path::PathBuf;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Parser, ValueEnum};

/// Which capabilities the server declares in its `initialize` result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub tools: bool,
    pub resources: bool,
    pub subscribe: bool,
    pub prompts: bool,
    pub logging: bool,
    pub completions: bool,
}

impl Caps {
    pub const ALL: Caps = Caps {
        tools: true,
        resources: true,
        subscribe: true,
        prompts: true,
        logging: true,
        completions: true,
    };

    pub const NONE: Caps = Caps {
        tools: false,
        resources: false,
        subscribe: false,
        prompts: false,
        logging: false,
        completions: false,
    };
}

/// Parses `tools,resources,prompts,logging,completions,subscribe` (any subset,
/// any order; empty or `none` for no capabilities at all).
pub fn parse_caps(s: &str) -> Result<Caps, String> {
    let mut caps = Caps::NONE;
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        match item.to_ascii_lowercase().as_str() {
            "tools" => caps.tools = true,
            "resources" => caps.resources = true,
            "subscribe" => caps.subscribe = true,
            "prompts" => caps.prompts = true,
            "logging" => caps.logging = true,
            "completions" => caps.completions = true,
            "none" => {}
            "all" => caps = Caps::ALL,
            other => {
                return Err(format!(
                    "unknown capability `{other}` (expected tools, resources, prompts, \
                     logging, completions, subscribe, all or none)"
                ));
            }
        }
    }
    Ok(caps)
}

/// Which protocol era(s) the server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Era {
    /// The `initialize` handshake (2024-11-05 … 2025-11-25) only.
    Handshake,
    /// The stateless 2026-07-28 revision only: `server/discover` and `_meta` on
    /// every request; `initialize` is refused with -32022.
    Stateless,
    /// Dual-era: `initialize` selects the handshake, requests carrying
    /// `_meta["io.modelcontextprotocol/protocolVersion"]` (and `server/discover`,
    /// `subscriptions/listen`) are served statelessly.
    Both,
}

/// Faults of the 2026-07-28 era (`--stateless-fault`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatelessFault {
    /// A legacy server that exits (status 1) on `server/discover` before
    /// `initialize`, as some SDKs do. Needs `--era handshake`.
    DieOnDiscover,
    /// The first stateless request is refused with -32022 whatever its version
    /// (`data.supported` = the supported versions); later ones are served.
    UnsupportedVersion,
    /// Every stateless request is refused with -32022, even with a listed version.
    UnsupportedVersionAlways,
    /// The first stateless `tools/call`, `resources/read` or `prompts/get` is
    /// refused with -32020 (stdio has no headers: simulated); later ones are served.
    HeaderMismatchOnce,
    /// The MRTR tools never complete: every retry gets a new `input_required`.
    InputRequiredForever,
    /// Every stateless `tools/call` without a `requestState` first gets an
    /// `input_required` carrying only a `requestState` (load shedding).
    StateOnly,
    /// A `subscriptions/listen` stream sends its acknowledgement and one
    /// notification, then ends with `notifications/cancelled` (no result).
    ListenDrops,
    /// As listen-drops, but ends gracefully with the listen request's result.
    ListenCloses,
}

/// `Cache-Control`-like scope of cacheable stateless results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CacheScope {
    Public,
    Private,
}

impl CacheScope {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheScope::Public => "public",
            CacheScope::Private => "private",
        }
    }
}

/// Scriptable fault-injection MCP server over stdio (newline-delimited JSON-RPC 2.0).
///
/// Every flag can also be set through an environment variable `MCPHOST_TS_<FLAG>`
/// (boolean flags accept 1/0, true/false, yes/no, on/off). Logs go to stderr;
/// stdout carries only the protocol (plus deliberate garbage with --garbage).
#[derive(Debug, Clone, Parser)]
#[command(name = "mcphost-testserver", version, about, long_about)]
pub struct Cli {
    /// Answer `initialize` with exactly this protocolVersion (any string, even an
    /// unknown one such as 1999-01-01). Default: echo the client's requested version
    /// if it is 2024-11-05, 2025-03-26, 2025-06-18 or 2025-11-25, else 2025-11-25.
    #[arg(long, env = "MCPHOST_TS_PROTOCOL_VERSION", value_name = "V")]
    pub protocol_version: Option<String>,

    /// Comma-separated capabilities to declare: tools, resources, prompts, logging,
    /// completions, subscribe (or `all` / `none` / empty). Requests for an undeclared
    /// feature get -32601.
    #[arg(
        long,
        env = "MCPHOST_TS_CAPABILITIES",
        value_name = "LIST",
        default_value = "tools,resources,prompts,logging,completions,subscribe",
        value_parser = parse_caps
    )]
    pub capabilities: Caps,

    /// Number of extra generated tools `tool_0000`, `tool_0001`, ...
    #[arg(long, env = "MCPHOST_TS_TOOLS", value_name = "N", default_value_t = 0)]
    pub tools: usize,

    /// Number of extra generated resources `test://extra/0000`, ...
    #[arg(
        long,
        env = "MCPHOST_TS_RESOURCES",
        value_name = "N",
        default_value_t = 0
    )]
    pub resources: usize,

    /// Number of extra generated prompts `prompt_0000`, ...
    #[arg(
        long,
        env = "MCPHOST_TS_PROMPTS",
        value_name = "N",
        default_value_t = 0
    )]
    pub prompts: usize,

    /// Send every response as a JSON-RPC batch (array) together with a
    /// `notifications/message` (the notification first, the response second,
    /// follow-up notifications after it); standalone notifications and the server's
    /// own requests are sent as arrays too. Incoming batches are always accepted
    /// (and answered with an array) regardless of this flag.
    #[arg(long, env = "MCPHOST_TS_BATCH", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub batch: bool,

    /// Echo request ids as strings (`"7"` for `7`). The server's own requests then
    /// use string ids too.
    #[arg(long, env = "MCPHOST_TS_STRING_IDS", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub string_ids: bool,

    /// Paginate tools/list, resources/list, resources/templates/list and prompts/list
    /// with N items per page and opaque `nextCursor`s.
    #[arg(long, env = "MCPHOST_TS_PAGE_SIZE", value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub page_size: Option<u64>,

    /// Buggy pagination: every list page returns the same `nextCursor` forever
    /// (the cursor of the second page), even past the end.
    #[arg(long, env = "MCPHOST_TS_REPEAT_CURSOR", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub repeat_cursor: bool,

    /// After `notifications/initialized`, every MS milliseconds add a tool
    /// (`dynamic_0001`, ...), a resource and a prompt, and emit the matching
    /// `notifications/{tools,resources,prompts}/list_changed` (for declared
    /// capabilities only).
    #[arg(long, env = "MCPHOST_TS_LIST_CHANGED_AFTER_MS", value_name = "MS")]
    pub list_changed_after_ms: Option<u64>,

    /// After `notifications/initialized`, every MS milliseconds print a numbered
    /// stderr line `mcphost-testserver tick N` and, with logging declared, send a
    /// `notifications/message` whose data is `tick N`: a server that keeps
    /// talking, for log followers.
    #[arg(long, env = "MCPHOST_TS_CHATTER_MS", value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub chatter_ms: Option<u64>,

    /// Stop the --list-changed-after-ms timer after K rounds (default: forever).
    #[arg(long, env = "MCPHOST_TS_LIST_CHANGED_COUNT", value_name = "K")]
    pub list_changed_count: Option<u64>,

    /// Print non-JSON garbage lines on stdout at startup and before every real
    /// message (plain text, `{not json`, an ANSI-coloured banner, ...).
    #[arg(long, env = "MCPHOST_TS_GARBAGE", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub garbage: bool,

    /// Before every real response, also send a response whose id nobody asked for
    /// (alternately `999999` with a result and `"nobody-asked-for-this"` with an error).
    #[arg(long, env = "MCPHOST_TS_UNKNOWN_IDS", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub unknown_ids: bool,

    /// Before every response, print a structured log line on stdout that carries
    /// the response's id but no `jsonrpc`: `{"id":ID,"level":"info","msg":"answering"}`.
    #[arg(long, env = "MCPHOST_TS_JSON_LOGS", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub json_logs: bool,

    /// On receiving the Nth request (initialize = 1 if it comes first; every request
    /// including ping counts), print `fatal: simulated crash` to stderr and exit with
    /// status 3 without answering it.
    #[arg(long, env = "MCPHOST_TS_CRASH_AFTER", value_name = "N")]
    pub crash_after: Option<u64>,

    /// Stop answering requests from the Nth request on (counted like --crash-after,
    /// ping included) while continuing to read stdin.
    #[arg(long, env = "MCPHOST_TS_HANG_AFTER", value_name = "N")]
    pub hang_after: Option<u64>,

    /// Never answer requests for METHOD (repeatable or comma-separated). Use
    /// `tools/call:NAME` to hang only calls of tool NAME.
    #[arg(
        long,
        env = "MCPHOST_TS_HANG_ON",
        value_name = "METHOD",
        value_delimiter = ','
    )]
    pub hang_on: Vec<String>,

    /// Never answer any request except `initialize` and `ping`.
    #[arg(long, env = "MCPHOST_TS_HANG", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub hang: bool,

    /// On stdin EOF do not exit: keep running (and ignore stdout write errors).
    #[arg(long, env = "MCPHOST_TS_IGNORE_EOF", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub ignore_eof: bool,

    /// Ignore SIGTERM (with --ignore-eof only SIGKILL stops the server).
    #[arg(long, env = "MCPHOST_TS_IGNORE_SIGTERM", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub ignore_sigterm: bool,

    /// At startup, start one child process of its own (a copy of this server
    /// with --ignore-eof, and --ignore-sigterm if set here) in the same process
    /// group, and print `child pid N` to stderr.
    #[arg(long, env = "MCPHOST_TS_SPAWN_CHILD", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub spawn_child: bool,

    /// Answer the first N `tools/list` requests with an internal error (-32603).
    #[arg(
        long,
        env = "MCPHOST_TS_FAIL_TOOLS_LIST",
        value_name = "N",
        default_value_t = 0
    )]
    pub fail_tools_list: u64,

    /// Minimum size in bytes of the single-line response of the `huge` tool (streamed
    /// in 64 KiB chunks; the id comes last unless --huge-id-first). A call may
    /// override it with `{"bytes": N}`.
    #[arg(long, env = "MCPHOST_TS_HUGE_BYTES", value_name = "N", default_value_t = 1 << 20)]
    pub huge_bytes: u64,

    /// Put `"jsonrpc"` and `"id"` first in the `huge` response instead of last.
    #[arg(long, env = "MCPHOST_TS_HUGE_ID_FIRST", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub huge_id_first: bool,

    /// Print N numbered lines to stderr at startup.
    #[arg(
        long,
        env = "MCPHOST_TS_STDERR_LINES",
        value_name = "N",
        default_value_t = 0
    )]
    pub stderr_lines: u64,

    /// Keep spamming stderr from a background thread (bursts of 100 lines per ms).
    #[arg(long, env = "MCPHOST_TS_STDERR_FLOOD", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub stderr_flood: bool,

    /// Delay every response by MS milliseconds (order is preserved; stdin keeps
    /// being read meanwhile, so cancellations still arrive).
    #[arg(
        long,
        env = "MCPHOST_TS_DELAY_MS",
        value_name = "MS",
        default_value_t = 0
    )]
    pub delay_ms: u64,

    /// Exit (status 0) right after receiving `notifications/initialized`.
    #[arg(long, env = "MCPHOST_TS_EXIT_ON_INITIALIZED", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub exit_on_initialized: bool,

    /// Never withdraw a request of its own when the tool call that needs it
    /// is cancelled: keep waiting for its answer, as servers that ignore
    /// cancellation do.
    #[arg(long, env = "MCPHOST_TS_NO_WITHDRAW", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub no_withdraw: bool,

    /// A hostile peer's request ids: each request of the server's own takes the
    /// lowest numeric id among the client's requests it is still handling (its
    /// own counter when none), and once answered it is followed by a courtesy
    /// `notifications/cancelled` for that id, as the Python SDK sends after a
    /// timeout. A client that reads a cancel in the wrong id space ends its own
    /// request of that number.
    #[arg(long, env = "MCPHOST_TS_COLLIDE_IDS", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub collide_ids: bool,

    /// Also list the host-callback tools `ask`, `later`, `url_elicit` and
    /// `url_required` (left out by default so the tool count stays 9).
    #[arg(long, env = "MCPHOST_TS_HOST_TOOLS", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub host_tools: bool,

    /// Append every line received on stdin (verbatim, newline-terminated) to FILE,
    /// before it is processed.
    #[arg(long, env = "MCPHOST_TS_LOG_REQUESTS", value_name = "FILE")]
    pub log_requests: Option<PathBuf>,

    /// Also list the scripted tools `log` {levels?, message?} (log messages at
    /// those levels during the call, those below the level set by
    /// `logging/setLevel` left out) and `error` {code, message?, data?} (a
    /// JSON-RPC error with exactly these members).
    #[arg(long, env = "MCPHOST_TS_SCRIPTED_TOOLS", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub scripted_tools: bool,

    /// Also list the `link` tool {uri, embed?}: a result holding a
    /// `resource_link` to `uri` (with `embed`, an embedded text resource).
    #[arg(long, env = "MCPHOST_TS_LINK_TOOL", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub link_tool: bool,

    /// Also list `sandbox_probe` {read?, write?, connect?, childRead?}: tries
    /// each and reports ok or the OS error (tests of `sandbox`).
    #[arg(long, env = "MCPHOST_TS_SANDBOX_PROBE", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub sandbox_probe: bool,

    /// Also list the `hidden` tool, whose description hides text (tag
    /// characters spelling an instruction, a zero-width space, a bidi
    /// override, an HTML comment; another comment in a schema property),
    /// and whose result carries such characters too; and the `hidden`
    /// prompt, a comment in its argument's description; and the resource
    /// `test://hidden` and template `test://hidden/{id}`, hidden text in a
    /// description and a title.
    #[arg(long, env = "MCPHOST_TS_HIDDEN_TEXT", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub hidden_text: bool,

    /// Protocol era: `handshake` (the `initialize` handshake, as always),
    /// `stateless` (2026-07-28 only: `server/discover`, `_meta` on every request,
    /// `input_required` instead of server requests, `subscriptions/listen`) or
    /// `both` (dual-era: chosen per request by how the client opens).
    #[arg(
        long,
        env = "MCPHOST_TS_ERA",
        value_name = "ERA",
        value_enum,
        default_value_t = Era::Handshake
    )]
    pub era: Era,

    /// Inject a 2026-07-28-era fault (repeatable or comma-separated):
    /// die-on-discover (with --era handshake), unsupported-version,
    /// unsupported-version-always, header-mismatch-once, input-required-forever,
    /// state-only, listen-drops, listen-closes (the others need --era stateless
    /// or both).
    #[arg(
        long,
        env = "MCPHOST_TS_STATELESS_FAULT",
        value_name = "KIND",
        value_enum,
        value_delimiter = ','
    )]
    pub stateless_fault: Vec<StatelessFault>,

    /// Comma-separated stateless protocol versions accepted in `_meta` and listed
    /// in `server/discover` and -32022 errors (with --era both, the handshake
    /// versions are listed after them). Use one the client cannot speak (e.g.
    /// 2099-01-01) for a server that refuses every version.
    #[arg(
        long,
        env = "MCPHOST_TS_STATELESS_VERSIONS",
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "2026-07-28"
    )]
    pub stateless_versions: Vec<String>,

    /// `ttlMs` of cacheable stateless results (`server/discover`, the four lists,
    /// `resources/read`).
    #[arg(
        long,
        env = "MCPHOST_TS_TTL_MS",
        value_name = "MS",
        default_value_t = 0
    )]
    pub ttl_ms: u64,

    /// `cacheScope` of cacheable stateless results: public or private.
    #[arg(
        long,
        env = "MCPHOST_TS_CACHE_SCOPE",
        value_name = "SCOPE",
        value_enum,
        default_value_t = CacheScope::Public
    )]
    pub cache_scope: CacheScope,

    // Pinned definitions (tests of `pinning`): a tool that differs between
    // two starts.
    /// Give tool NAME this description instead of its own (`NAME=TEXT`).
    #[arg(long, env = "MCPHOST_TS_DESCRIBE", value_name = "NAME=TEXT")]
    pub describe: Option<String>,
    /// List one more tool, NAME (calls of it fail as unknown).
    #[arg(long, env = "MCPHOST_TS_EXTRA_TOOL", value_name = "NAME")]
    pub extra_tool: Option<String>,
}

impl Cli {
    /// Whether `fault` was asked for.
    pub fn fault(&self, fault: StatelessFault) -> bool {
        self.stateless_fault.contains(&fault)
    }

    /// Rejects flag combinations that cannot mean anything.
    pub fn validate(&self) -> Result<(), String> {
        for f in &self.stateless_fault {
            let needs_handshake = *f == StatelessFault::DieOnDiscover;
            if needs_handshake != (self.era == Era::Handshake) {
                let name = f
                    .to_possible_value()
                    .map_or_else(String::new, |v| v.get_name().to_owned());
                return Err(if needs_handshake {
                    format!(
                        "--stateless-fault {name} needs --era handshake (it is a legacy server)"
                    )
                } else {
                    format!("--stateless-fault {name} needs --era stateless or --era both")
                });
            }
        }
        let bad = self.stateless_versions.iter().any(|v| v.trim().is_empty());
        if bad || self.stateless_versions.is_empty() {
            return Err("--stateless-versions needs at least one non-empty version".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn caps_parse() {
        assert_eq!(parse_caps(""), Ok(Caps::NONE));
        assert_eq!(parse_caps("none"), Ok(Caps::NONE));
        assert_eq!(
            parse_caps("tools, logging"),
            Ok(Caps {
                tools: true,
                logging: true,
                ..Caps::NONE
            })
        );
        assert!(parse_caps("tools,bogus").is_err());
    }

    #[test]
    fn flags_parse() {
        let cli = Cli::try_parse_from([
            "ts",
            "--batch",
            "--page-size",
            "2",
            "--hang-on",
            "tools/call:slow,prompts/get",
            "--capabilities",
            "tools",
        ])
        .map_err(|e| e.to_string());
        let cli = match cli {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        assert!(cli.batch);
        assert_eq!(cli.page_size, Some(2));
        assert_eq!(cli.hang_on, ["tools/call:slow", "prompts/get"]);
        assert!(cli.capabilities.tools && !cli.capabilities.prompts);
        assert!(Cli::try_parse_from(["ts", "--page-size", "0"]).is_err());
    }

    fn parse(args: &[&str]) -> Cli {
        let mut all = vec!["ts"];
        all.extend_from_slice(args);
        match Cli::try_parse_from(all) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn era_defaults_to_handshake() {
        let cli = parse(&[]);
        assert_eq!(cli.era, Era::Handshake);
        assert!(cli.stateless_fault.is_empty());
        assert_eq!(cli.stateless_versions, ["2026-07-28"]);
        assert_eq!((cli.ttl_ms, cli.cache_scope), (0, CacheScope::Public));
        assert_eq!(cli.validate(), Ok(()));
    }

    #[test]
    fn stateless_flags_parse_and_validate() {
        let cli = parse(&[
            "--era",
            "both",
            "--stateless-fault",
            "header-mismatch-once,listen-drops",
            "--stateless-fault",
            "input-required-forever",
            "--stateless-versions",
            "2026-01-01,2026-07-28",
            "--ttl-ms",
            "60000",
            "--cache-scope",
            "private",
        ]);
        assert_eq!(cli.era, Era::Both);
        assert!(cli.fault(StatelessFault::HeaderMismatchOnce));
        assert!(cli.fault(StatelessFault::ListenDrops));
        assert!(cli.fault(StatelessFault::InputRequiredForever));
        assert!(!cli.fault(StatelessFault::StateOnly));
        assert_eq!(cli.stateless_versions, ["2026-01-01", "2026-07-28"]);
        assert_eq!(cli.cache_scope.as_str(), "private");
        assert_eq!(cli.validate(), Ok(()));

        let bad = parse(&["--era", "stateless", "--stateless-fault", "die-on-discover"]);
        assert!(bad.validate().unwrap_err().contains("--era handshake"));
        let bad = parse(&["--stateless-fault", "listen-drops"]);
        assert!(bad.validate().unwrap_err().contains("--era stateless"));
        assert_eq!(
            parse(&["--stateless-fault", "die-on-discover"]).validate(),
            Ok(())
        );
        assert!(Cli::try_parse_from(["ts", "--era", "bogus"]).is_err());
        assert!(
            Cli::try_parse_from(["ts", "--era", "stateless", "--stateless-fault", "bogus"])
                .is_err()
        );
    }
}
