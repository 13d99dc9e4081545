//! `--sandbox-probe`: the `sandbox_probe` tool, which tries what a sandbox
//! must refuse (read, write, TCP connect, and a read by a child process)
//! and reports each outcome. Each refusal is also a stderr line, as a real
//! server's would be.

use serde_json::{Value, json};
use std::time::Duration;

pub fn tool() -> String {
    json!({
        "name": "sandbox_probe",
        "description": "Tries each operation and reports ok or the OS error: read files, write files, TCP connect, UDP send, Unix-socket connect, read files through a child process (cat).",
        "inputSchema": {
            "type": "object",
            "properties": {
                "read": {"type": "array", "items": {"type": "string"}},
                "write": {"type": "array", "items": {"type": "string"}},
                "connect": {"type": "array", "items": {"type": "string"}},
                "childRead": {"type": "array", "items": {"type": "string"}},
                "udp": {"type": "array", "items": {"type": "string"}},
                "unix": {"type": "array", "items": {"type": "string"}}
            }
        }
    })
    .to_string()
}

/// The tools list with the probe appended when asked for.
pub fn with_probe(mut tools: Vec<String>, probe: bool) -> Vec<String> {
    if probe {
        tools.push(tool());
    }
    tools
}

/// A `tools/call` of the probe.
pub fn is_call(params: &Value) -> bool {
    params.get("name").and_then(Value::as_str) == Some("sandbox_probe")
}

/// `structuredContent.results`: one `{op, target, ok, error?}` per attempt.
pub fn call(args: Option<&Value>) -> Value {
    let list = |k: &str| -> Vec<String> {
        args.and_then(|a| a.get(k))
            .and_then(Value::as_array)
            .map(|v| {
                v.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut results = Vec::new();
    let mut record = |op: &str, target: &str, outcome: Result<(), String>| {
        if let Err(e) = &outcome {
            eprintln!("sandbox_probe: {op} {target}: {e}");
        }
        results.push(match outcome {
            Ok(()) => json!({"op": op, "target": target, "ok": true}),
            Err(e) => json!({"op": op, "target": target, "ok": false, "error": e}),
        });
    };
    for p in list("read") {
        record(
            "read",
            &p,
            std::fs::read(&p).map(drop).map_err(|e| e.to_string()),
        );
    }
    for p in list("write") {
        record(
            "write",
            &p,
            std::fs::write(&p, "probe").map_err(|e| e.to_string()),
        );
    }
    for addr in list("connect") {
        let outcome = addr
            .parse()
            .map_err(|e: std::net::AddrParseError| e.to_string())
            .and_then(|a| {
                std::net::TcpStream::connect_timeout(&a, Duration::from_secs(5))
                    .map(drop)
                    .map_err(|e| e.to_string())
            });
        record("connect", &addr, outcome);
    }
    for addr in list("udp") {
        let outcome = std::net::UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.send_to(b"probe", &addr))
            .map(drop)
            .map_err(|e| e.to_string());
        record("udp", &addr, outcome);
    }
    for p in list("unix") {
        let outcome = std::os::unix::net::UnixStream::connect(&p)
            .map(drop)
            .map_err(|e| e.to_string());
        record("unix", &p, outcome);
    }
    for p in list("childRead") {
        let outcome = std::process::Command::new("cat")
            .arg(&p)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| e.to_string())
            .and_then(|o| {
                if o.status.success() {
                    Ok(())
                } else {
                    Err(String::from_utf8_lossy(&o.stderr).trim().to_owned())
                }
            });
        record("childRead", &p, outcome);
    }
    let ok = results.iter().all(|r| r["ok"] == true);
    json!({
        "content": [{"type": "text", "text": Value::Array(results.clone()).to_string()}],
        "structuredContent": {"results": results, "allOk": ok}
    })
}
