//! `mcphost-testserver`: a scriptable fault-injection MCP server over stdio.
//!
//! Speaks newline-delimited JSON-RPC 2.0 (one compact message per line) on
//! stdin/stdout and logs to stderr only. It is a normal MCP server for protocol
//! revisions 2024-11-05, 2025-03-26, 2025-06-18 and 2025-11-25 (the handshake era,
//! the default) and, with `--era stateless|both`, for the stateless 2026-07-28
//! revision (see below), used by mcphost's tests and benchmarks to produce the
//! faults real servers won't. It deliberately does not use the `mcphost` library.
//! stdio only: there is no HTTP mode (tests/common/http_fault.rs is the HTTP one).
//!
//! # Features
//!
//! * Tools: `echo` {text}, `add` {a,b} (structuredContent + outputSchema), `fail`
//!   (isError), `slow` {ms} (progress every ~100 ms with a progressToken, with
//!   integer numbers, `_meta` and an unknown member `x-unknown`; honours
//!   `notifications/cancelled` by never answering), `lossless` (a fixed raw result
//!   with `12345678901234567890123`, `1.10`, `1e400`, unsorted keys and
//!   `"x-unknown"`; its `inputSchema` is raw too), `huge` {bytes?}, `sample`
//!   (sampling/createMessage), `elicit` {message?, requestedSchema?} or
//!   {mode: "url", message?, url?, elicitationId?} (elicitation/create; default
//!   schema: a required `name`), `roots` (roots/list),
//!   plus `tool_NNNN` (`--tools`) and `dynamic_NNNN` (list-changed timer), and
//!   with `--link-tool` `link` {uri, embed?} (a `resource_link`, or an embedded
//!   text resource).
//!   With `--host-tools` also: `ask` {method, params?} (a request with raw params
//!   during the call), `later` {method, params?, delayMs?} (a request sent after the
//!   call answered, its response reported in a `notifications/message`),
//!   `url_elicit` {url, elicitationId} (URL-mode elicitation, then
//!   `notifications/elicitation/complete`), `url_required` (error -32042).
//!   A blocking call (`slow`, `sample`, `elicit`, `roots`, `ask`, `url_elicit`)
//!   logs `request ID in flight: tools/call NAME` on stderr as it starts, so a
//!   test can wait for a call to be pending here instead of sleeping.
//!   With `--scripted-tools` also: `log` {levels?, message?} (one
//!   `notifications/message` per level, before the answer, leaving out those
//!   below the level `logging/setLevel` set; the result is
//!   `{"serverLevel": L|null, "sent": [..]}` as text) and `error` {code,
//!   message?, data?} (answers with exactly that JSON-RPC error).
//! * Resources `test://static/1..3`, `test://extra/NNNN`, `test://added/NNNN`,
//!   and, never listed, any `test://unlisted/...`;
//!   template `test://dynamic/{id}`; unknown uri → -32002 with `data.uri`;
//!   subscribe → `{}` then one `notifications/resources/updated`.
//! * Prompts `greet` (required `name`), `prompt_NNNN`, `dynamic_prompt_NNNN`;
//!   `completion/complete`; `logging/setLevel` → `{}` then one `notifications/message`.
//! * `ping` works at any time; other requests before `initialize` → -32600;
//!   unknown or undeclared methods → -32601; malformed lines → -32700 with id null.
//!   Incoming batches are answered with an array.
//!
//! # The stateless era (`--era stateless`, or per request with `--era both`)
//!
//! Field names as in the 2026-07-28 specification. `M` below is a valid request
//! `_meta`: `{"io.modelcontextprotocol/protocolVersion":"2026-07-28",
//! "io.modelcontextprotocol/clientCapabilities":{…}}`.
//!
//! * No session: every request must carry both `_meta` fields, else -32602 with
//!   `data.missing` (and `data.supported`); a version outside `--stateless-versions`
//!   gets -32022 `{"supported":[…],"requested":V}`. With `--era stateless`,
//!   `initialize` gets -32022 naming the supported versions (a stateless-only
//!   server has no handshake); `ping`, `logging/setLevel`, `resources/(un)subscribe`
//!   get -32601 (removed in 2026-07-28); `notifications/initialized` is ignored.
//! * `server/discover` → `{"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{…}},
//!   "ttlMs":0,"cacheScope":"public","capabilities":{…},"instructions":…,"supportedVersions":["2026-07-28"]}`
//!   (with `--era both` the handshake versions follow).
//! * Every result starts with `"resultType":"complete"` and `_meta` serverInfo, the
//!   rest of the raw result left byte for byte; discover, the four lists and
//!   `resources/read` also carry `ttlMs` (`--ttl-ms`) and `cacheScope` (`--cache-scope`).
//!   A missing resource is -32602 (not -32002); `later` / `url_required` are tool
//!   errors (no server requests, no -32042).
//! * Multi-round-trip tools: `sample`, `elicit`, `roots` (and with `--host-tools`
//!   `ask`, `url_elicit`) send no request; they answer
//!   `{"resultType":"input_required","_meta":{…},"inputRequests":{"sampling"|"elicitation"|"roots"|"ask":
//!   {"method":…,"params":…}},"requestState":"ts1.…"}` with the params the
//!   handshake era would have sent (URL elicitation without `elicitationId`). The
//!   retry (new id, same `name`/`arguments`, `inputResponses` {key: result} and the
//!   exact `requestState`) completes with the handshake era's text: the result
//!   as compact JSON. A retry without the answer is asked again; `inputResponses`
//!   without `requestState`, an altered state, or one issued for another tool or
//!   other arguments → -32602. An input request the client did not declare the
//!   capability for (`sampling`, `roots`, `elicitation`, `elicitation.url`) →
//!   -32021 with `data.requiredCapabilities`.
//! * `subscriptions/listen` {notifications: {toolsListChanged, promptsListChanged,
//!   resourcesListChanged, resourceSubscriptions}} sends no response while open:
//!   first `notifications/subscriptions/acknowledged` with the granted subset
//!   (declared capabilities only; `resourceSubscriptions` needs `subscribe`), then
//!   one `notifications/resources/updated` per subscribed uri, then the
//!   list-changed timer's notifications, all with
//!   `_meta["io.modelcontextprotocol/subscriptionId"]` = the listen's id. The
//!   first listen starts the `--list-changed-after-ms` timer (there is no
//!   `notifications/initialized`); `notifications/cancelled` for its id ends it.
//!   `--chatter-ms` only prints stderr ticks (no `notifications/message` without a handshake).
//!
//! `--stateless-fault` kinds: `die-on-discover` (handshake era: exit 1 on
//! `server/discover` before `initialize`), `unsupported-version` (the first
//! stateless request gets -32022 whatever its version, then served),
//! `unsupported-version-always` (every one), `header-mismatch-once` (the first
//! `tools/call` / `resources/read` / `prompts/get` gets -32020; stdio has no
//! headers, so this stands in for an `Mcp-Name` mismatch), `input-required-forever`
//! (the multi-round-trip tools ask again on every retry, each round a new
//! `requestState`), `state-only` (each `tools/call` without `requestState` first
//! gets `input_required` with only a `requestState`), `listen-drops` (a listen gets
//! its acknowledgement, one notification, then `notifications/cancelled`
//! `{"requestId":ID}` and no result), `listen-closes` (the same, ended by the
//! result `{"resultType":"complete","_meta":{"io.modelcontextprotocol/subscriptionId":ID,…}}`).
//!
//! # Flags (each also settable as env var `MCPHOST_TS_<FLAG>`, e.g. `MCPHOST_TS_PAGE_SIZE=2`)
//!
//! | flag | effect |
//! |------|--------|
//! | `--protocol-version V` | answer `initialize` with exactly V (default: echo a known requested version, else 2025-11-25) |
//! | `--capabilities LIST` | declare only these of tools,resources,prompts,logging,completions,subscribe (default all; `none`) |
//! | `--tools N` / `--resources N` / `--prompts N` | add N generated list items |
//! | `--batch` | send responses (with a companion `notifications/message`), notifications and server requests as batch arrays |
//! | `--string-ids` | echo numeric request ids as strings |
//! | `--page-size N` | paginate all four lists with opaque cursors |
//! | `--repeat-cursor` | buggy pagination: the same `nextCursor` forever |
//! | `--list-changed-after-ms MS` | after `notifications/initialized`, every MS add a tool/resource/prompt, emit list_changed, and log `added dynamic_NNNN sent_unix_us=T` on stderr |
//! | `--list-changed-count K` | stop that timer after K rounds |
//! | `--chatter-ms MS` | after `notifications/initialized`, every MS a stderr line `tick N` and (with logging) a `notifications/message` |
//! | `--garbage` | non-JSON lines on stdout at startup and before every message |
//! | `--json-logs` | a log line `{"id":ID,"level":"info",…}` (no `jsonrpc`) on stdout before every response |
//! | `--unknown-ids` | an extra response with an id nobody asked for before every response |
//! | `--crash-after N` | on the Nth request print `fatal: simulated crash` to stderr and exit 3 without answering |
//! | `--hang-after N` | never answer the Nth and later requests (keeps reading stdin) |
//! | `--hang-on METHOD` | never answer METHOD (`tools/call:NAME` for one tool); repeatable / comma-separated |
//! | `--hang` | never answer anything but `initialize` and `ping` |
//! | `--ignore-eof` | keep running after stdin EOF (and ignore stdout write errors) |
//! | `--ignore-sigterm` | ignore SIGTERM |
//! | `--spawn-child` | start a child of its own (a copy with `--ignore-eof`, and `--ignore-sigterm` if set) in its group |
//! | `--fail-tools-list N` | answer the first N `tools/list` requests with -32603 |
//! | `--huge-bytes N` | size of the `huge` tool's single-line response (default 1 MiB), streamed |
//! | `--huge-id-first` | put `jsonrpc`/`id` first in the `huge` response (default: last) |
//! | `--stderr-lines N` | print N numbered stderr lines at startup |
//! | `--stderr-flood` | keep spamming stderr |
//! | `--delay-ms MS` | delay every response by MS (order preserved) |
//! | `--exit-on-initialized` | exit 0 on `notifications/initialized` |
//! | `--log-requests FILE` | append every received line to FILE |
//! | `--link-tool` | also list the `link` tool |
//! | `--sandbox-probe` | also list `sandbox_probe` (tests of `sandbox`) |
//! | `--host-tools` | also list `ask`, `later`, `url_elicit`, `url_required` |
//! | `--no-withdraw` | a cancelled tool call does not withdraw the request it sent the client: it waits on for the answer |
//! | `--collide-ids` | the server's own requests take the lowest id of a client request in flight, and each answered one is followed by a late `notifications/cancelled` for it |
//! | `--scripted-tools` | also list `log` and `error` |
//! | `--hidden-text` | also list the tool `hidden` (hidden text in its description and schema, and in its result), the prompt `hidden`, the resource `test://hidden` and the template `test://hidden/{id}` |
//! | `--era ERA` | `handshake` (default), `stateless` (2026-07-28 only) or `both` (per request) |
//! | `--stateless-fault KIND` | a 2026-07-28-era fault (above); repeatable / comma-separated |
//! | `--stateless-versions LIST` | stateless versions accepted and listed (default 2026-07-28) |
//! | `--ttl-ms MS` / `--cache-scope public\|private` | caching hints of stateless cacheable results (default 0, public) |

// No production function over 100 lines of code (docs/architecture.md).
#![warn(clippy::too_many_lines)]

macro_rules! log {
    ($($arg:tt)*) => {
        $crate::log_line(format_args!($($arg)*))
    };
}

mod catalog;
mod cli;
mod output;
mod probe;
mod server;

use std::io::{self, BufRead, Write};
use std::process::ExitCode;
use std::thread;

use clap::Parser;

/// Writes one diagnostic line to stderr (never panics, unlike `eprintln!`).
fn log_line(args: std::fmt::Arguments<'_>) {
    let _ = writeln!(io::stderr().lock(), "mcphost-testserver: {args}");
}

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    if let Err(e) = cli.validate() {
        use clap::CommandFactory;
        cli::Cli::command()
            .error(clap::error::ErrorKind::ArgumentConflict, e)
            .exit();
    }
    let ignore_eof = cli.ignore_eof;
    let server = match server::Server::new(cli) {
        Ok(s) => s,
        Err(e) => {
            log!("startup failed: {e}");
            return ExitCode::from(2);
        }
    };
    server.startup();

    let mut stdin = io::stdin().lock();
    let mut buf = Vec::with_capacity(64 * 1024);
    loop {
        buf.clear();
        match stdin.read_until(b'\n', &mut buf) {
            Ok(0) => break,
            Ok(_) => server.on_line(&buf),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                log!("stdin read failed: {e}");
                break;
            }
        }
    }

    if ignore_eof {
        log!("stdin closed; staying alive (--ignore-eof)");
        loop {
            thread::park();
        }
    }
    log!("stdin closed; exiting");
    server.flush();
    ExitCode::SUCCESS
}
