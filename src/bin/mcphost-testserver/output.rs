//! Everything written to stdout: framing, batching, garbage, unknown ids and the
//! streamed `huge` response.

use std::io::{self, BufWriter, Write};

use serde_json::{Value, json};

/// Non-JSON lines printed with `--garbage`.
pub const GARBAGE: &[&str] = &[
    "hello from server",
    "{not json",
    "\x1b[1;32m*** mcphost-testserver \x1b[0;33mready\x1b[0m ***",
    "Listening on stdio...",
    "[1,2,",
    "}",
    "WARNING: this line is not JSON-RPC",
];

const HUGE_CHUNK: usize = 64 * 1024;

/// A JSON-RPC error object.
#[derive(Debug, Clone)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    pub fn to_value(&self) -> Value {
        let mut e = json!({"code": self.code, "message": self.message});
        if let (Some(d), Some(obj)) = (&self.data, e.as_object_mut()) {
            obj.insert("data".into(), d.clone());
        }
        e
    }
}

/// What a response carries.
#[derive(Debug)]
pub enum Payload {
    /// Raw JSON text of the `result` member (emitted verbatim).
    Result(String),
    Error(RpcError),
    /// A streamed tool result of at least this many bytes (whole line), and raw
    /// members (`"k":v,` with the trailing comma; empty for the handshake era)
    /// put first in its `result`.
    Huge(u64, String),
}

/// A response ready to be sent, plus notifications to send right after it.
#[derive(Debug)]
pub struct Reply {
    /// The id as it must appear on the wire (already stringified with --string-ids).
    pub id: Value,
    pub payload: Payload,
    /// Raw notification lines that follow the response.
    pub follow: Vec<String>,
}

/// Renders a (non-huge) response as one compact line (without newline).
pub fn render_response(id: &Value, payload: &Payload) -> String {
    match payload {
        Payload::Result(raw) => {
            let id = id.to_string();
            let mut s = String::with_capacity(32 + id.len() + raw.len());
            s.push_str("{\"jsonrpc\":\"2.0\",\"id\":");
            s.push_str(&id);
            s.push_str(",\"result\":");
            s.push_str(raw);
            s.push('}');
            s
        }
        Payload::Error(e) => format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{}}}"#, e.to_value()),
        Payload::Huge(..) => {
            // Never rendered in memory; callers stream it with `Out::huge`.
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": "internal: huge payload rendered in memory"}}).to_string()
        }
    }
}

/// A notification as one compact line.
pub fn notification(method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string()
}

/// The `notifications/message` that accompanies every response with --batch.
pub fn batch_companion(id: &Value) -> String {
    notification(
        "notifications/message",
        json!({"level": "info", "logger": "mcphost-testserver", "data": {"batchedWith": id}}),
    )
}

/// Buffered stdout plus the fault-injection counters that shape output.
pub struct Out<W: Write> {
    w: BufWriter<W>,
    garbage: bool,
    garbage_idx: usize,
    unknown_idx: u64,
}

impl<W: Write> Out<W> {
    pub fn new(inner: W, garbage: bool) -> Self {
        Out {
            w: BufWriter::with_capacity(HUGE_CHUNK, inner),
            garbage,
            garbage_idx: 0,
            unknown_idx: 0,
        }
    }

    /// Prints every garbage line once (startup).
    pub fn all_garbage(&mut self) -> io::Result<()> {
        for g in GARBAGE {
            self.w.write_all(g.as_bytes())?;
            self.w.write_all(b"\n")?;
        }
        self.w.flush()
    }

    fn begin_line(&mut self) -> io::Result<()> {
        if self.garbage {
            let g = GARBAGE[self.garbage_idx % GARBAGE.len()];
            self.garbage_idx = self.garbage_idx.wrapping_add(1);
            self.w.write_all(g.as_bytes())?;
            self.w.write_all(b"\n")?;
        }
        Ok(())
    }

    /// Writes one message line (preceded by garbage if enabled). Does not flush.
    pub fn line(&mut self, s: &str) -> io::Result<()> {
        self.begin_line()?;
        self.w.write_all(s.as_bytes())?;
        self.w.write_all(b"\n")
    }

    /// Writes a response nobody asked for (--unknown-ids).
    pub fn unknown_response(&mut self) -> io::Result<()> {
        let i = self.unknown_idx;
        self.unknown_idx = self.unknown_idx.wrapping_add(1);
        if i.is_multiple_of(2) {
            self.line(r#"{"jsonrpc":"2.0","id":999999,"result":{}}"#)
        } else {
            self.line(
                r#"{"jsonrpc":"2.0","id":"nobody-asked-for-this","error":{"code":-32603,"message":"response to a request nobody sent"}}"#,
            )
        }
    }

    /// Writes a log line that looks like a response to `id` (--json-logs).
    pub fn json_log(&mut self, id: &Value) -> io::Result<()> {
        self.line(&json!({"id": id, "level": "info", "msg": "answering"}).to_string())
    }

    /// Writes several messages, as one batch array line or as separate lines.
    pub fn messages(&mut self, msgs: &[String], as_batch: bool) -> io::Result<()> {
        if as_batch {
            let len = msgs.iter().map(|m| m.len() + 1).sum::<usize>() + 2;
            let mut s = String::with_capacity(len);
            s.push('[');
            for (i, m) in msgs.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                s.push_str(m);
            }
            s.push(']');
            self.line(&s)
        } else {
            msgs.iter().try_for_each(|m| self.line(m))
        }
    }

    /// Streams a single-line tool result of at least `min_bytes` bytes (the whole
    /// line, newline excluded) without holding it in memory.
    ///
    /// With `batch`, the line is an array `[companion, response]`. `extra`
    /// (raw `"k":v,` members) opens the `result` object.
    pub fn huge(
        &mut self,
        id: &Value,
        min_bytes: u64,
        extra: &str,
        id_first: bool,
        batch: bool,
    ) -> io::Result<()> {
        let id_s = id.to_string();
        let (head, tail) = if batch {
            (format!("[{},", batch_companion(id)), "]")
        } else {
            (String::new(), "")
        };
        let prefix = if id_first {
            format!(
                r#"{head}{{"jsonrpc":"2.0","id":{id_s},"result":{{{extra}"content":[{{"type":"text","text":""#
            )
        } else {
            format!(r#"{head}{{"result":{{{extra}"content":[{{"type":"text","text":""#)
        };
        let suffix = if id_first {
            format!(r#""}}],"isError":false}}}}{tail}"#)
        } else {
            format!(r#""}}],"isError":false}},"jsonrpc":"2.0","id":{id_s}}}{tail}"#)
        };
        let overhead = (prefix.len() + suffix.len()) as u64;
        let mut remaining = min_bytes.saturating_sub(overhead);

        // A repeating printable pattern (no characters that need escaping).
        let pattern = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_";
        let chunk: Vec<u8> = pattern.iter().copied().cycle().take(HUGE_CHUNK).collect();

        self.begin_line()?;
        self.w.write_all(prefix.as_bytes())?;
        while remaining > 0 {
            let n = usize::try_from(remaining).map_or(HUGE_CHUNK, |r| r.min(HUGE_CHUNK));
            self.w.write_all(&chunk[..n])?;
            remaining -= n as u64;
        }
        self.w.write_all(suffix.as_bytes())?;
        self.w.write_all(b"\n")
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }

    #[cfg(test)]
    pub fn written(&mut self) -> &W {
        let _ = self.w.flush();
        self.w.get_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_result_is_embedded_verbatim() {
        let raw = crate::catalog::LOSSLESS_RESULT;
        let line = render_response(&json!(5), &Payload::Result(raw.to_owned()));
        assert_eq!(
            line,
            format!(r#"{{"jsonrpc":"2.0","id":5,"result":{raw}}}"#)
        );
        let line = render_response(&json!("5"), &Payload::Result("{}".into()));
        assert_eq!(line, r#"{"jsonrpc":"2.0","id":"5","result":{}}"#);
    }

    #[test]
    fn error_rendering() {
        let e = RpcError::new(-32002, "Resource not found").with_data(json!({"uri": "x"}));
        let line = render_response(&Value::Null, &Payload::Error(e));
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["id"], Value::Null);
        assert_eq!(v["error"]["code"], -32002);
        assert_eq!(v["error"]["data"]["uri"], "x");
    }

    fn huge_line(min: u64, id_first: bool, batch: bool) -> String {
        let mut out = Out::new(Vec::new(), false);
        out.huge(&json!(5), min, "", id_first, batch).unwrap();
        String::from_utf8(out.written().clone()).unwrap()
    }

    #[test]
    fn huge_is_one_valid_line_of_at_least_n_bytes() {
        for min in [0, 10, 1000, 200_000] {
            for id_first in [false, true] {
                let s = huge_line(min, id_first, false);
                assert!(s.ends_with('\n') && s.matches('\n').count() == 1);
                let line = s.trim_end();
                assert!(line.len() as u64 >= min);
                if min >= 1000 {
                    assert!(line.len() as u64 <= min + 1, "{} vs {min}", line.len());
                }
                let v: Value = serde_json::from_str(line).unwrap();
                assert_eq!(v["id"], 5);
                assert_eq!(v["result"]["isError"], false);
                if id_first {
                    assert!(line.starts_with(r#"{"jsonrpc":"2.0","id":5,"#));
                } else {
                    assert!(line.ends_with(r#","jsonrpc":"2.0","id":5}"#));
                }
            }
        }
        let s = huge_line(100_000, false, true);
        let v: Value = serde_json::from_str(s.trim_end()).unwrap();
        assert_eq!(v[1]["id"], 5);
        assert_eq!(v[0]["method"], "notifications/message");
    }

    #[test]
    fn huge_extra_members_open_the_result() {
        let mut out = Out::new(Vec::new(), false);
        out.huge(&json!(5), 2000, r#""resultType":"complete","#, false, false)
            .unwrap();
        let s = String::from_utf8(out.written().clone()).unwrap();
        assert!(s.starts_with(r#"{"result":{"resultType":"complete","content":[{"#));
        let v: Value = serde_json::from_str(s.trim_end()).unwrap();
        assert_eq!(v["result"]["resultType"], "complete");
        assert!(s.trim_end().len() >= 2000);
    }

    #[test]
    fn garbage_precedes_lines() {
        let mut out = Out::new(Vec::new(), true);
        out.line("{}").unwrap();
        out.messages(&["{\"a\":1}".into(), "{\"b\":2}".into()], true)
            .unwrap();
        let s = String::from_utf8(out.written().clone()).unwrap();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(
            lines,
            [GARBAGE[0], "{}", GARBAGE[1], r#"[{"a":1},{"b":2}]"#]
        );
    }
}
