//! `mcphost-testserver`: a scriptable fault-injection MCP server over stdio.
//!
//! Speaks newline-delimited JSON-RPC 2.0 (one compact message per line) on
//! stdin/stdout and logs to stderr only. It is a normal MCP server for protocol
//! revisions 2024-11-05, 2025-03-26, 2025-06-18 and 2025-11-25, used by mcphost's
//! tests and benchmarks to produce the faults real servers won't. It deliberately
//! does not use the `mcphost` library.
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
//! | `--list-changed-after-ms MS` | after `notifications/initialized`, every MS add a tool/resource/prompt and emit list_changed |
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
//! | `--host-tools` | also list `ask`, `later`, `url_elicit`, `url_required` |

macro_rules! log {
    ($($arg:tt)*) => {
        $crate::log_line(format_args!($($arg)*))
    };
}

mod catalog;
mod cli;
mod output;
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
