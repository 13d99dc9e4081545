//! Newline framing with a hard per-message size limit.
//!
//! MCP over stdio is one JSON-RPC message per `\n`-terminated line.
//! [`BoundedLineCodec`] never holds much more than `max_bytes` of a line: past
//! the limit it drops bytes as they arrive, keeping only a small window from
//! each end so the message's `"id"` can still be recovered and the waiting
//! request failed instead of left hanging.

use bytes::{Buf, BufMut, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use mcphost_protocol::Id;

/// Bytes kept from each end of an oversized line to look for its `"id"`.
const WINDOW: usize = 512;

/// One decoded item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A complete line without its `\n` / `\r\n`; never empty or blank.
    Line(String),
    /// A line longer than `limit` bytes was dropped; `id` is its top-level
    /// JSON-RPC id when one was found near its start or end.
    Oversized { limit: usize, id: Option<Id> },
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FramingError {
    /// A newline inside a message would split it into two frames on the wire.
    #[error("outgoing message contains a newline")]
    EmbeddedNewline,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Decodes newline-delimited lines of at most `max_bytes` bytes (excluding the
/// line ending) and encodes `String`s as `line + "\n"`.
#[derive(Debug)]
pub struct BoundedLineCodec {
    max_bytes: usize,
    /// Prefix of the buffer already searched for `\n`, so long lines arriving
    /// in many reads are not rescanned from the start each time.
    scanned: usize,
    /// Set while dropping the rest of an oversized line.
    discarding: Option<Discard>,
}

impl BoundedLineCodec {
    pub fn new(max_bytes: usize) -> Self {
        Self {
            max_bytes,
            scanned: 0,
            discarding: None,
        }
    }

    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }
}

impl Decoder for BoundedLineCodec {
    type Item = Frame;
    type Error = FramingError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FramingError> {
        loop {
            if let Some(discard) = self.discarding.as_mut() {
                return Ok(match find_newline(buf) {
                    Some(end) => {
                        discard.push(&buf[..end]);
                        buf.advance(end + 1);
                        self.discarding.take().map(|d| d.finish(self.max_bytes))
                    }
                    None => {
                        discard.push(buf);
                        buf.clear();
                        None
                    }
                });
            }

            let Some(offset) = find_newline(&buf[self.scanned..]) else {
                // One spare byte: the line may still end in `\r\n`.
                if buf.len() > self.max_bytes.saturating_add(1) {
                    let mut discard = Discard::default();
                    discard.push(buf);
                    buf.clear();
                    self.scanned = 0;
                    self.discarding = Some(discard);
                } else {
                    self.scanned = buf.len();
                }
                return Ok(None);
            };
            let end = self.scanned + offset;
            self.scanned = 0;
            let line = buf.split_to(end + 1);
            let content = trim_cr(&line[..end]);
            if content.len() > self.max_bytes {
                // The windows see the raw bytes, `\r` included, as they do
                // when the line is dropped piecemeal: same id either way.
                let mut discard = Discard::default();
                discard.push(&line[..end]);
                return Ok(Some(discard.finish(self.max_bytes)));
            }
            if let Some(text) = to_text(content) {
                return Ok(Some(Frame::Line(text)));
            }
        }
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FramingError> {
        if let Some(frame) = self.decode(buf)? {
            return Ok(Some(frame));
        }
        // The stream ended inside a line: deliver what there is rather than
        // silently losing a last message written without its newline.
        if let Some(discard) = self.discarding.take() {
            return Ok(Some(discard.finish(self.max_bytes)));
        }
        self.scanned = 0;
        let rest = buf.split();
        let content = trim_cr(&rest);
        if content.len() > self.max_bytes {
            let mut discard = Discard::default();
            discard.push(&rest);
            return Ok(Some(discard.finish(self.max_bytes)));
        }
        Ok(to_text(content).map(Frame::Line))
    }
}

impl Encoder<String> for BoundedLineCodec {
    type Error = FramingError;

    fn encode(&mut self, line: String, dst: &mut BytesMut) -> Result<(), FramingError> {
        encode_line(&line, dst)
    }
}

/// Appends `line` and a `\n` to `dst`, refusing a line with a newline in it.
pub fn encode_line(line: &str, dst: &mut BytesMut) -> Result<(), FramingError> {
    if line.contains('\n') {
        return Err(FramingError::EmbeddedNewline);
    }
    dst.reserve(line.len() + 1);
    dst.put_slice(line.as_bytes());
    dst.put_u8(b'\n');
    Ok(())
}

fn find_newline(bytes: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', bytes)
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The line as text, or `None` when it is blank. Invalid UTF-8 is replaced
/// rather than fatal: the peer reports the frame as unparseable and goes on.
fn to_text(line: &[u8]) -> Option<String> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    Some(match std::str::from_utf8(line) {
        Ok(s) => s.to_owned(),
        Err(_) => {
            tracing::warn!(len = line.len(), "received a line that is not valid UTF-8");
            String::from_utf8_lossy(line).into_owned()
        }
    })
}

/// What is kept of an oversized line: its first and (rolling) last bytes.
#[derive(Debug, Default)]
struct Discard {
    head: Vec<u8>,
    tail: Vec<u8>,
}

impl Discard {
    fn push(&mut self, bytes: &[u8]) {
        if self.head.len() < WINDOW {
            let n = (WINDOW - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
        }
        if bytes.len() >= WINDOW {
            self.tail.clear();
            self.tail.extend_from_slice(&bytes[bytes.len() - WINDOW..]);
        } else {
            self.tail.extend_from_slice(bytes);
            let excess = self.tail.len().saturating_sub(WINDOW);
            self.tail.drain(..excess);
        }
    }

    fn finish(self, limit: usize) -> Frame {
        // Without `"jsonrpc":"2.0"` it is not JSON-RPC (say, a huge log
        // line), and its "id" must not fail one of our requests.
        let json_rpc = [
            value_from_head(&self.head, b"jsonrpc").map(|at| (&self.head, at)),
            value_from_tail(&self.tail, b"jsonrpc").map(|at| (&self.tail, at)),
        ]
        .into_iter()
        .flatten()
        .any(|(w, at)| w[at..].starts_with(b"\"2.0\""));
        let id = if !json_rpc {
            None
        } else {
            let head = value_from_head(&self.head, b"id").map(|at| id_value(&self.head, at));
            match head {
                Some(IdValue::Id(id)) => Some(id),
                Some(IdValue::NotAnId) => None,
                Some(IdValue::Cut) | None => value_from_tail(&self.tail, b"id").and_then(|at| {
                    match id_value(&self.tail, at) {
                        IdValue::Id(id) => Some(id),
                        IdValue::NotAnId | IdValue::Cut => None,
                    }
                }),
            }
        };
        Frame::Oversized { limit, id }
    }
}

/// A value after `"id":`.
enum IdValue {
    Id(Id),
    /// Present but not an integer or string (`null`, a float, …).
    NotAnId,
    /// Runs past the end of the window.
    Cut,
}

/// Scans forward from the start of a message for a top-level member `key`;
/// returns where its value starts (which may be past the window's end).
fn value_from_head(w: &[u8], key: &[u8]) -> Option<usize> {
    let mut i = skip_ws(w, 0);
    if w.get(i) != Some(&b'{') {
        return None;
    }
    let mut depth = 0usize;
    while i < w.len() {
        match w[i] {
            b'"' => {
                let end = string_end(w, i)?;
                if depth == 1 && &w[i + 1..end] == key {
                    let colon = skip_ws(w, end + 1);
                    if w.get(colon) == Some(&b':') {
                        return Some(skip_ws(w, colon + 1));
                    }
                }
                i = end;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return None;
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Scans backward from the end of a message for a top-level member `key`
/// (TypeScript SDK servers write `jsonrpc` and `id` last). Going backward
/// from outside any string, each unescaped quote toggles between string and
/// structure, so the nesting depth stays exact within the window.
fn value_from_tail(w: &[u8], key: &[u8]) -> Option<usize> {
    let mut i = w.len();
    while i > 0 && w[i - 1].is_ascii_whitespace() {
        i -= 1;
    }
    if i == 0 || w[i - 1] != b'}' {
        return None;
    }
    i -= 1;
    let mut depth = 1usize;
    while i > 0 {
        i -= 1;
        match w[i] {
            b'"' => {
                let start = string_start(w, i)?;
                if depth == 1 && &w[start + 1..i] == key {
                    let colon = skip_ws(w, i + 1);
                    if w.get(colon) == Some(&b':') {
                        return Some(skip_ws(w, colon + 1));
                    }
                }
                i = start;
            }
            b'}' | b']' => depth += 1,
            b'{' | b'[' => {
                depth -= 1;
                if depth == 0 {
                    return None;
                }
            }
            _ => {}
        }
    }
    None
}

fn id_value(w: &[u8], at: usize) -> IdValue {
    let end = match w.get(at) {
        None => return IdValue::Cut,
        Some(b'"') => match string_end(w, at) {
            None => return IdValue::Cut,
            Some(end) => end + 1,
        },
        Some(b'-' | b'0'..=b'9') => {
            let digits = at + usize::from(w[at] == b'-');
            let end = digits
                + w[digits..]
                    .iter()
                    .take_while(|b| b.is_ascii_digit())
                    .count();
            match w.get(end) {
                None => return IdValue::Cut,
                Some(b'.' | b'e' | b'E') => return IdValue::NotAnId,
                Some(_) => end,
            }
        }
        Some(_) => return IdValue::NotAnId,
    };
    std::str::from_utf8(&w[at..end])
        .ok()
        .and_then(Id::from_json)
        .map_or(IdValue::NotAnId, IdValue::Id)
}

fn skip_ws(w: &[u8], mut i: usize) -> usize {
    while w.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// Index of the quote closing the string that opens at `open`.
fn string_end(w: &[u8], open: usize) -> Option<usize> {
    let mut i = open + 1;
    while i < w.len() {
        match w[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// Index of the quote opening the string that closes at `close`.
fn string_start(w: &[u8], close: usize) -> Option<usize> {
    (0..close).rev().find(|&i| {
        w[i] == b'"' && w[..i].iter().rev().take_while(|&&b| b == b'\\').count() % 2 == 0
    })
}

/// Fuzzing entry point: the first byte picks the size limit, the second the
/// read size; the rest is the stream. Decoded in chunks, the frames must be
/// those of the same bytes decoded at once, and both must match the
/// reference: split at `\n`, drop one trailing `\r`, skip blank lines, and
/// anything longer than the limit is `Oversized`.
#[doc(hidden)]
pub fn fuzz_framing(data: &[u8]) {
    let [limit, chunk, stream @ ..] = data else {
        return;
    };
    let limit = usize::from(*limit) * 4;
    let chunk = usize::from(*chunk).max(1);
    let run = |chunk: usize| {
        let mut codec = BoundedLineCodec::new(limit);
        let mut buf = BytesMut::new();
        let mut frames = Vec::new();
        for part in stream.chunks(chunk) {
            buf.extend_from_slice(part);
            while let Ok(Some(f)) = codec.decode(&mut buf) {
                frames.push(f);
            }
            assert!(
                buf.len() <= limit + 1 + chunk,
                "buffer grew to {} past the {limit}-byte limit",
                buf.len()
            );
        }
        while let Ok(Some(f)) = codec.decode_eof(&mut buf) {
            frames.push(f);
        }
        frames
    };
    let chunked = run(chunk);
    assert_eq!(
        chunked,
        run(stream.len().max(1)),
        "chunking changed the frames"
    );
    let mut lines: Vec<&[u8]> = stream.split(|&b| b == b'\n').collect();
    if stream.ends_with(b"\n") {
        lines.pop();
    }
    let reference: Vec<Option<String>> = lines
        .into_iter()
        .map(trim_cr)
        .filter_map(|l| {
            if l.len() > limit {
                Some(None)
            } else {
                to_text(l).map(Some)
            }
        })
        .collect();
    let kinds: Vec<Option<String>> = chunked
        .iter()
        .map(|f| match f {
            Frame::Line(l) => Some(l.clone()),
            Frame::Oversized { limit: l, .. } => {
                assert_eq!(*l, limit);
                None
            }
        })
        .collect();
    assert_eq!(kinds, reference, "frames differ from the reference split");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_chunks(codec: &mut BoundedLineCodec, chunks: &[&[u8]]) -> Vec<Frame> {
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for chunk in chunks {
            buf.extend_from_slice(chunk);
            while let Some(f) = codec.decode(&mut buf).unwrap() {
                out.push(f);
            }
        }
        while let Some(f) = codec.decode_eof(&mut buf).unwrap() {
            out.push(f);
        }
        out
    }

    fn line(s: &str) -> Frame {
        Frame::Line(s.to_owned())
    }

    fn oversized(limit: usize, id: Option<Id>) -> Frame {
        Frame::Oversized { limit, id }
    }

    #[test]
    fn partial_lines_across_many_reads() {
        let input = b"{\"jsonrpc\":\"2.0\",\"id\":1}\n{\"a\":[1,2,3]}\nlast\n";
        let chunks: Vec<&[u8]> = input.chunks(1).collect();
        let frames = decode_chunks(&mut BoundedLineCodec::new(1024), &chunks);
        assert_eq!(
            frames,
            vec![
                line("{\"jsonrpc\":\"2.0\",\"id\":1}"),
                line("{\"a\":[1,2,3]}"),
                line("last")
            ]
        );
    }

    #[test]
    fn crlf_and_blank_lines() {
        let frames = decode_chunks(
            &mut BoundedLineCodec::new(1024),
            &[b"\n\r\n  \t\r\n{\"a\":1}\r", b"\n\n{\"b\":2}\r\n"],
        );
        assert_eq!(frames, vec![line("{\"a\":1}"), line("{\"b\":2}")]);
    }

    #[test]
    fn last_line_without_newline_is_delivered_at_eof() {
        let frames = decode_chunks(&mut BoundedLineCodec::new(1024), &[b"{\"a\":1}\n{\"b\""]);
        assert_eq!(frames, vec![line("{\"a\":1}"), line("{\"b\"")]);
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        let frames = decode_chunks(&mut BoundedLineCodec::new(1024), &[b"a\xffb\nok\n"]);
        assert_eq!(frames, vec![line("a\u{fffd}b"), line("ok")]);
    }

    #[test]
    fn line_exactly_at_limit_passes() {
        let frames = decode_chunks(&mut BoundedLineCodec::new(5), &[b"12345", b"\r\n123456\n"]);
        assert_eq!(frames, vec![line("12345"), oversized(5, None)]);
    }

    #[test]
    fn oversized_in_chunks_then_normal_line_with_bounded_buffer() {
        let mut codec = BoundedLineCodec::new(1000);
        let mut buf = BytesMut::new();
        let mut frames = Vec::new();
        buf.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":42,\"result\":\"");
        for _ in 0..1000 {
            buf.extend_from_slice(&[b'x'; 700]);
            while let Some(f) = codec.decode(&mut buf).unwrap() {
                frames.push(f);
            }
            assert!(buf.len() <= 1001 + 700, "buffer grew to {}", buf.len());
        }
        buf.extend_from_slice(b"\"}\n{\"next\":true}\n");
        while let Some(f) = codec.decode(&mut buf).unwrap() {
            frames.push(f);
        }
        assert_eq!(
            frames,
            vec![
                oversized(1000, Some(Id::number(42))),
                line("{\"next\":true}")
            ]
        );
    }

    #[test]
    fn id_recovered_from_suffix() {
        let big = "y".repeat(5000);
        let msg = format!(
            "{{\"result\":{{\"content\":[{{\"id\":7,\"text\":\"{big}\"}}]}},\"jsonrpc\":\"2.0\",\"id\":5}}\n{{}}\n"
        );
        let chunks: Vec<&[u8]> = msg.as_bytes().chunks(333).collect();
        let frames = decode_chunks(&mut BoundedLineCodec::new(100), &chunks);
        assert_eq!(
            frames,
            vec![oversized(100, Some(Id::number(5))), line("{}")]
        );
    }

    #[test]
    fn nested_ids_are_not_taken_for_the_message_id() {
        // Only nested "id"s near the start, and the message has none: a
        // notification must not be mistaken for a response.
        let big = "z".repeat(5000);
        let msg = format!(
            "{{\"jsonrpc\":\"2.0\",\"params\":{{\"id\":9,\"x\":\"{big}\",\"inner\":{{\"id\":3}}}},\"method\":\"n\"}}\n"
        );
        let frames = decode_chunks(&mut BoundedLineCodec::new(100), &[msg.as_bytes()]);
        assert_eq!(frames, vec![oversized(100, None)]);
    }

    #[test]
    fn no_id_anywhere() {
        let msg = format!("{}\n", "q".repeat(4000));
        let frames = decode_chunks(&mut BoundedLineCodec::new(100), &[msg.as_bytes()]);
        assert_eq!(frames, vec![oversized(100, None)]);
    }

    #[test]
    fn string_id_with_escapes_and_spacing() {
        let big = "w".repeat(3000);
        let msg =
            format!("{{ \"id\" : \"a\\\"b\" , \"jsonrpc\" : \"2.0\", \"result\":\"{big}\"}}\n");
        let frames = decode_chunks(&mut BoundedLineCodec::new(100), &[msg.as_bytes()]);
        assert_eq!(frames, vec![oversized(100, Some(Id::string("a\"b")))]);
    }

    #[test]
    fn null_id_in_head_means_none() {
        let big = "w".repeat(3000);
        let msg =
            format!("{{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":\"{big}\",\"x\":{{\"id\":4}}}}\n");
        let frames = decode_chunks(&mut BoundedLineCodec::new(100), &[msg.as_bytes()]);
        assert_eq!(frames, vec![oversized(100, None)]);
    }

    #[test]
    fn quotes_and_braces_inside_strings_do_not_confuse_the_tail_scan() {
        let big = "v".repeat(3000);
        // After the top-level id come a nested id and a string holding an
        // escaped quote, braces and a trailing backslash.
        let msg = format!(
            r#"{{"jsonrpc":"2.0","result":"{big}","id":"req-9","meta":{{"id":1}},"s":"a\\\"}}{{\\"}}"#
        ) + "\n";
        let parsed: serde_json::Value = serde_json::from_str(msg.trim_end()).unwrap();
        assert_eq!(parsed["s"], "a\\\"}{\\");
        let frames = decode_chunks(&mut BoundedLineCodec::new(100), &[msg.as_bytes()]);
        assert_eq!(frames, vec![oversized(100, Some(Id::string("req-9")))]);
    }

    #[test]
    fn nested_id_before_top_level_id_in_head() {
        let big = "n".repeat(3000);
        let msg = format!(
            "{{\"jsonrpc\":\"2.0\",\"meta\":{{\"id\":1}},\"id\":2,\"result\":\"{big}\"}}\n"
        );
        let frames = decode_chunks(&mut BoundedLineCodec::new(100), &[msg.as_bytes()]);
        assert_eq!(frames, vec![oversized(100, Some(Id::number(2)))]);
    }

    #[test]
    fn id_cut_at_head_window_falls_back_to_tail() {
        let pad = "p".repeat(WINDOW - 17);
        let big = "b".repeat(3000);
        let msg = format!(
            "{{\"pad\":\"{pad}\",\"id\":123456,\"result\":\"{big}\",\"jsonrpc\":\"2.0\"}}\n"
        );
        let frames = decode_chunks(&mut BoundedLineCodec::new(100), &[msg.as_bytes()]);
        // The head window ends inside the digits: claiming `12` would be wrong.
        assert_eq!(frames, vec![oversized(100, None)]);
    }

    #[test]
    fn batches_yield_no_id() {
        let big = "b".repeat(3000);
        let msg = format!("[{{\"id\":1,\"result\":\"{big}\"}},{{\"id\":2}}]\n");
        let frames = decode_chunks(&mut BoundedLineCodec::new(100), &[msg.as_bytes()]);
        assert_eq!(frames, vec![oversized(100, None)]);
    }

    #[test]
    fn last_line_just_over_the_limit_without_newline_is_oversized() {
        // One byte over: short of the discard threshold (which spares a
        // byte for `\r`), so only the end-of-stream path sees it.
        let frames = decode_chunks(&mut BoundedLineCodec::new(5), &[b"ok\n123456"]);
        assert_eq!(frames, vec![line("ok"), oversized(5, None)]);
    }

    #[test]
    fn oversized_at_eof_without_newline() {
        let msg = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":-3,\"x\":\"{}",
            "c".repeat(3000)
        );
        let frames = decode_chunks(&mut BoundedLineCodec::new(100), &[msg.as_bytes()]);
        assert_eq!(frames, vec![oversized(100, Some(Id::number(-3)))]);
    }

    #[test]
    fn oversized_json_log_line_without_jsonrpc_yields_no_id() {
        let big = "l".repeat(3000);
        for msg in [
            format!("{{\"id\":0,\"level\":\"info\",\"msg\":\"{big}\"}}\n"),
            format!("{{\"msg\":\"{big}\",\"level\":\"info\",\"id\":0}}\n"),
            format!("{{\"jsonrpc\":\"1.0\",\"id\":0,\"msg\":\"{big}\"}}\n"),
        ] {
            let frames = decode_chunks(&mut BoundedLineCodec::new(100), &[msg.as_bytes()]);
            assert_eq!(frames, vec![oversized(100, None)], "{}", &msg[..40]);
        }
        // An id past i64 is still an id.
        let msg = format!("{{\"jsonrpc\":\"2.0\",\"id\":12345678901234567890,\"x\":\"{big}\"}}\n");
        let frames = decode_chunks(&mut BoundedLineCodec::new(100), &[msg.as_bytes()]);
        assert_eq!(
            frames,
            vec![oversized(100, Id::from_json("12345678901234567890"))]
        );
    }

    #[test]
    fn encoder_appends_newline_and_refuses_embedded_ones() {
        let mut codec = BoundedLineCodec::new(10);
        let mut dst = BytesMut::new();
        codec.encode("{\"a\":1}".to_owned(), &mut dst).unwrap();
        assert_eq!(&dst[..], b"{\"a\":1}\n");
        let err = codec
            .encode("{\"a\":\n1}".to_owned(), &mut dst)
            .unwrap_err();
        assert!(matches!(err, FramingError::EmbeddedNewline));
        assert_eq!(&dst[..], b"{\"a\":1}\n");
    }
}
