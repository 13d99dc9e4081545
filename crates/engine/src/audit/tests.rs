use super::*;
use std::time::Duration;

fn caller(name: &str) -> Caller {
    Caller {
        name: name.to_owned(),
        version: Some("1.0".into()),
        session: 7,
    }
}

/// `record`'s line as the writer writes it, read back.
fn line_of(record: &Record) -> Value {
    let mut out = Vec::new();
    record.write_line(SystemTime::now(), &mut out).unwrap();
    assert!(!out.contains(&b'\n'), "one line");
    serde_json::from_slice(&out).unwrap()
}

/// A call's record on `target`.
fn called(target: &Target, args: &str, full: bool, outcome: Outcome, took: Duration) -> Record {
    Record::Call {
        method: "tools/call",
        caller: caller("app"),
        target: target.clone(),
        arguments: Some(args.to_owned()),
        full,
        outcome,
        took,
    }
}

#[test]
fn a_call_line_hashes_its_arguments_and_keeps_them_out_unless_full() {
    let target = Target {
        server: Some("ev".into()),
        name: "ev__echo".into(),
        own: Some("echo".into()),
    };
    let args = r#"{"message":"secret-text"}"#;
    let line = line_of(&called(
        &target,
        args,
        false,
        Outcome::Error(-32602),
        Duration::from_micros(1500),
    ));
    assert_eq!(
        line["host"],
        json!({"name": "app", "version": "1.0", "session": 7})
    );
    assert_eq!(line["server"], "ev");
    assert_eq!(line["name"], "ev__echo");
    assert_eq!(line["serverName"], "echo");
    assert_eq!(line["outcome"], "error");
    assert_eq!(line["code"], -32602);
    assert_eq!(line["ms"], 1.5);
    assert_eq!(line["args"]["bytes"], args.len());
    // sha256 of the exact bytes received.
    let hex: String = sha2::Sha256::digest(args.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(line["args"]["sha256"], hex);
    assert!(!line.to_string().contains("secret-text"));
    let full = line_of(&called(&target, args, true, Outcome::Ok, Duration::ZERO));
    assert_eq!(full["arguments"]["message"], "secret-text");
    assert!(full.get("code").is_none());
    let t = humantime::parse_rfc3339(full["time"].as_str().unwrap());
    assert!(t.is_ok(), "{}", full["time"]);
}

#[test]
fn an_answer_kind_is_the_elicitation_action_or_ok() {
    let raw = |s: &str| serde_json::value::RawValue::from_string(s.into()).unwrap();
    let e = mcphost_protocol::methods::ELICITATION_CREATE;
    assert_eq!(
        Answer::of_result(e, &raw(r#"{"action":"accept","content":{"x":1}}"#)),
        Answer::Accept
    );
    assert_eq!(
        Answer::of_result(e, &raw(r#"{"action":"decline"}"#)),
        Answer::Decline
    );
    assert_eq!(
        Answer::of_result(e, &raw(r#"{"action":"cancel"}"#)),
        Answer::Cancel
    );
    assert_eq!(
        Answer::of_result("sampling/createMessage", &raw(r#"{"role":"assistant"}"#)),
        Answer::Ok
    );
    let line = line_of(&Record::Request {
        method: e.into(),
        server: "ev".into(),
        host: None,
        answer: Answer::Decline,
        took: Duration::ZERO,
    });
    assert_eq!(line["answeredBy"], "fallback");
    assert_eq!(line["answer"], "decline");
}

/// A server request's record, `n` its server's name.
fn asked(n: u32) -> Record {
    Record::Request {
        method: "roots/list".into(),
        server: n.to_string(),
        host: None,
        answer: Answer::Ok,
        took: Duration::ZERO,
    }
}

fn write_lines(path: &std::path::Path, lines: &[Value]) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(path, text).unwrap();
}

fn at(time: &str, server: &str, host: &str) -> Value {
    json!({"time": time, "kind": "call", "server": server, "host": {"name": host, "session": 1}})
}

#[test]
fn a_query_reads_rotated_files_oldest_first_and_filters() {
    let dir = tempfile::tempdir().unwrap();
    write_lines(
        &dir.path().join("audit.jsonl.2"),
        &[at("2026-01-01T00:00:00.000Z", "a", "x")],
    );
    write_lines(
        &dir.path().join("audit.jsonl.1"),
        &[at("2026-01-02T00:00:00.000Z", "b", "y")],
    );
    let mut current = vec![at("2026-01-03T00:00:00.000Z", "a", "y")];
    current.push(json!({"not": "a record"}));
    write_lines(&dir.path().join(FILE), &current);
    std::fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join(FILE))
        .unwrap()
        .write_all(b"{torn\n")
        .unwrap();
    let all = query(dir.path(), &Filter::default()).unwrap();
    let times: Vec<_> = all
        .lines
        .iter()
        .map(|l| l["time"].as_str().unwrap())
        .collect();
    assert_eq!(
        times,
        [
            "2026-01-01T00:00:00.000Z",
            "2026-01-02T00:00:00.000Z",
            "2026-01-03T00:00:00.000Z"
        ]
    );
    assert_eq!(all.skipped, 2);
    let by = |f: Filter| query(dir.path(), &f).unwrap().lines.len();
    assert_eq!(
        by(Filter {
            server: Some("a".into()),
            ..Default::default()
        }),
        2
    );
    assert_eq!(
        by(Filter {
            host: Some("y".into()),
            ..Default::default()
        }),
        2
    );
    let since = humantime::parse_rfc3339("2026-01-02T00:00:00Z").unwrap();
    assert_eq!(
        by(Filter {
            since: Some(since),
            ..Default::default()
        }),
        2
    );
    let last = query(
        dir.path(),
        &Filter {
            limit: Some(1),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(last.lines[0]["time"], "2026-01-03T00:00:00.000Z");
}

#[test]
fn since_takes_a_duration_back_or_a_time() {
    let hour_ago = parse_since("1h").unwrap();
    let elapsed = SystemTime::now().duration_since(hour_ago).unwrap();
    assert!(elapsed >= Duration::from_secs(3600) && elapsed < Duration::from_secs(3700));
    assert!(parse_since("2026-01-02T00:00:00Z").is_ok());
    assert!(parse_since("yesterday-ish").unwrap_err().contains("since"));
}

#[test]
fn a_log_without_a_directory_records_nothing_and_is_off() {
    let log = AuditLog::new(None, Settings::default());
    assert_eq!(log.mode(), Mode::Off);
    log.record(asked(0));
}

/// The writer stuck on its file (a FIFO nobody reads yet: opening it for
/// writing blocks) while a call records line after line: the queue fills,
/// recording never waits, and once the writer can go on, a line says how
/// many were dropped; nothing is lost uncounted.
#[cfg(unix)]
#[test]
fn a_full_queue_drops_lines_without_waiting_and_says_how_many() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join(FILE);
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates the node.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let log = AuditLog::with_queue(Some(dir.path().to_owned()), Settings::default(), 2);
    let started = std::time::Instant::now();
    for i in 0..10 {
        log.record(asked(i));
    }
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "recording waited"
    );
    // Now read: the writer's open completes and it drains the queue.
    let mut reader = std::fs::File::open(&fifo).unwrap();
    let flushing = {
        let log = log.clone();
        std::thread::spawn(move || log.flush(Duration::from_secs(10)))
    };
    flushing.join().unwrap();
    let mut buf = vec![0u8; 65536];
    // Everything written is in the pipe now (far under its buffer).
    let n = reader.read(&mut buf).unwrap();
    let lines: Vec<Value> = std::str::from_utf8(&buf[..n])
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let written = lines.iter().filter(|l| l["kind"] == "request").count();
    let dropped: Vec<u64> = lines
        .iter()
        .filter(|l| l["kind"] == "dropped")
        .map(|l| l["count"].as_u64().unwrap())
        .collect();
    assert_eq!(dropped.len(), 1, "{lines:?}");
    assert!(
        written <= 3,
        "a queue of 2 and the line being written: {lines:?}"
    );
    assert_eq!(written as u64 + dropped[0], 10, "{lines:?}");
}
