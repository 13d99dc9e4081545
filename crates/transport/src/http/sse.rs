//! Server-sent events from a reqwest response, parsed by `sse-stream`, with a
//! size limit per event that the parser itself does not have.

use std::time::Duration;

use futures_util::{Stream, StreamExt};

/// One event, as MCP uses them.
#[derive(Debug)]
pub(super) enum Event {
    /// A `message` event (or one without a type) carrying data.
    Message(String),
    /// The legacy transport's `endpoint` event.
    Endpoint(String),
    /// Anything without data: priming events, `retry`, other types. Only its
    /// id and retry matter.
    Other,
}

#[derive(Debug, thiserror::Error)]
pub(super) enum SseError {
    #[error("an event exceeded the {limit}-byte message limit")]
    Oversized { limit: usize },
    #[error("the event stream broke: {0}")]
    Stream(String),
}

/// Reads events and remembers the stream's last event id and retry delay.
pub(super) struct EventStream {
    inner: std::pin::Pin<Box<dyn Stream<Item = Result<sse_stream::Sse, sse_stream::Error>> + Send>>,
    limit: usize,
    pub last_id: Option<String>,
    pub retry: Option<Duration>,
}

impl EventStream {
    pub fn new(resp: reqwest::Response, limit: usize) -> Self {
        Self::from_chunks(resp.bytes_stream(), limit)
    }

    fn from_chunks(
        chunks: impl Stream<Item = Result<bytes::Bytes, reqwest::Error>> + Send + 'static,
        limit: usize,
    ) -> Self {
        // Checked per chunk: the limit is exact to within one chunk.
        let mut pending = Pending::default();
        let bytes = chunks.map(move |chunk| {
            let chunk = chunk?;
            if pending.feed(&chunk) > limit {
                return Err(BodyError::Oversized(Oversized));
            }
            Ok::<_, BodyError>(chunk)
        });
        EventStream {
            inner: Box::pin(sse_stream::SseByteStream::new(bytes)),
            limit,
            last_id: None,
            retry: None,
        }
    }

    /// The next event, `None` at the end of the stream.
    pub async fn next(&mut self) -> Option<Result<Event, SseError>> {
        let item = self.inner.next().await?;
        let sse = match item {
            Ok(sse) => sse,
            Err(sse_stream::Error::Body(e))
                if matches!(e.downcast_ref(), Some(BodyError::Oversized(_))) =>
            {
                return Some(Err(SseError::Oversized { limit: self.limit }));
            }
            Err(e) => return Some(Err(SseError::Stream(error_chain(&e)))),
        };
        if let Some(ms) = sse.retry {
            self.retry = Some(Duration::from_millis(ms));
        }
        // An empty id resets the cursor (per the SSE spec).
        if let Some(id) = &sse.id {
            self.last_id = (!id.is_empty()).then(|| id.clone());
        }
        let data = sse.data.filter(|d| !d.trim().is_empty());
        Some(Ok(match (sse.event.as_deref(), data) {
            (None | Some("message"), Some(data)) => Event::Message(data),
            (Some("endpoint"), Some(data)) => Event::Endpoint(data),
            _ => Event::Other,
        }))
    }
}

/// The bytes of the event being read: every line since the last blank one,
/// except comments, which the parser drops. Keep-alive comments on a quiet
/// stream (a `subscriptions/listen` one may be quiet for days) therefore
/// never add up to the limit, with or without a blank line after each.
#[derive(Default)]
struct Pending {
    bytes: usize,
    /// After a line ending (or at the start): the next byte starts a line.
    line_start: bool,
    started: bool,
    in_comment: bool,
    /// The last byte was CR: an LF now completes the same line ending.
    after_cr: bool,
}

impl Pending {
    /// The most the event being read held while this chunk was read.
    fn feed(&mut self, chunk: &[u8]) -> usize {
        if !self.started {
            self.started = true;
            self.line_start = true;
        }
        let mut peak = self.bytes;
        for &b in chunk {
            peak = peak.max(self.bytes);
            if b == b'\n' && self.after_cr {
                self.after_cr = false;
                continue;
            }
            self.after_cr = b == b'\r';
            if b == b'\r' || b == b'\n' {
                if self.line_start && !self.in_comment {
                    self.bytes = 0; // a blank line ends the event
                } else if !self.in_comment {
                    self.bytes = self.bytes.saturating_add(1);
                }
                self.in_comment = false;
                self.line_start = true;
                continue;
            }
            if self.line_start && b == b':' {
                self.in_comment = true;
            }
            self.line_start = false;
            if !self.in_comment {
                self.bytes = self.bytes.saturating_add(1);
            }
        }
        peak.max(self.bytes)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("event over the size limit")]
struct Oversized;

#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error(transparent)]
    Http(#[from] reqwest::Error),
    #[error(transparent)]
    Oversized(#[from] Oversized),
}

/// The cause at the bottom of an error's chain: reqwest's own message
/// ("error sending request for url …") hides it ("Connection refused").
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut last = e;
    while let Some(cause) = last.source() {
        last = cause;
    }
    last.to_string()
}

/// Fuzzing entry point: the first byte picks the size limit, the second the
/// chunk size; the rest is the body. Events are read until the stream ends or
/// fails; none may carry blank data, a data longer than the limit allows, or
/// an id with a line break.
#[doc(hidden)]
pub fn fuzz_sse(data: &[u8]) {
    let [limit, chunk, body @ ..] = data else {
        return;
    };
    let limit = usize::from(*limit) * 16;
    let chunk = usize::from(*chunk).max(1);
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().build() else {
        return;
    };
    let chunks: Vec<Result<bytes::Bytes, reqwest::Error>> = body
        .chunks(chunk)
        .map(|c| Ok(bytes::Bytes::copy_from_slice(c)))
        .collect();
    rt.block_on(async {
        let mut events = EventStream::from_chunks(futures_util::stream::iter(chunks), limit);
        while let Some(ev) = events.next().await {
            match ev {
                Ok(Event::Message(d) | Event::Endpoint(d)) => {
                    assert!(!d.trim().is_empty(), "an event with blank data");
                    assert!(
                        d.len() <= limit + chunk,
                        "{} bytes passed the limit",
                        d.len()
                    );
                }
                Ok(Event::Other) => {}
                Err(_) => break,
            }
            if let Some(id) = &events.last_id {
                assert!(!id.contains(['\n', '\r']), "event id with a line break");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the event being read holds after these chunks.
    fn feed_all(chunks: &[&str]) -> usize {
        let mut p = Pending::default();
        for c in chunks {
            p.feed(c.as_bytes());
        }
        p.bytes
    }

    #[test]
    fn keep_alive_comments_never_add_up() {
        // The spec's own example (`:\r\n`, no blank line), Python's
        // (`: ping\r\n\r\n`), LF only, split anywhere.
        for ping in [":\r\n", ": ping\r\n\r\n", ":\n", ": keep-alive\n\n", "\r\n"] {
            let many: Vec<&str> = std::iter::repeat_n(ping, 10_000).collect();
            assert_eq!(feed_all(&many), 0, "{ping:?}");
            let split: Vec<String> = ping.repeat(50).chars().map(String::from).collect();
            let split: Vec<&str> = split.iter().map(String::as_str).collect();
            assert_eq!(feed_all(&split), 0, "{ping:?} byte by byte");
        }
    }

    #[test]
    fn an_event_counts_its_lines_until_a_blank_one() {
        assert_eq!(feed_all(&["data: abc\n"]), 10);
        assert_eq!(feed_all(&["data: abc\n", ": note\n", "data: d"]), 17);
        assert_eq!(feed_all(&["data: abc\r", "\n", "\r\n"]), 0);
        assert_eq!(feed_all(&["data: abc\r\n\r\nid: 1"]), 5);
        // A colon inside a line is no comment.
        assert_eq!(feed_all(&["data: a:b\n"]), 10);
        // A whole event in one chunk: its size is what counts.
        let mut p = Pending::default();
        assert_eq!(p.feed(b": c\ndata: abcd\n\n: c\n"), 11);
        assert_eq!(p.bytes, 0);
    }

    #[tokio::test]
    async fn a_quiet_stream_outlives_the_limit_and_a_big_event_does_not() {
        let mut body: Vec<Result<bytes::Bytes, reqwest::Error>> = Vec::new();
        for _ in 0..1000 {
            body.push(Ok(bytes::Bytes::from_static(b":\r\n")));
        }
        body.push(Ok(bytes::Bytes::from_static(b"data: {\"ok\":1}\n\n")));
        body.push(Ok(bytes::Bytes::from(format!(
            "data: {}\n\n",
            "x".repeat(100)
        ))));
        let mut s = EventStream::from_chunks(futures_util::stream::iter(body), 64);
        assert!(matches!(s.next().await, Some(Ok(Event::Message(d))) if d == r#"{"ok":1}"#));
        let next = s.next().await;
        assert!(
            matches!(next, Some(Err(SseError::Oversized { limit: 64 }))),
            "{next:?}"
        );
    }
}
