//! Server-sent events from a reqwest response, parsed by `sse-stream`, with a
//! size limit per event that the parser itself does not have.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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
    since_event: Arc<AtomicUsize>,
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
        let since_event = Arc::new(AtomicUsize::new(0));
        let counter = since_event.clone();
        // Counting whole chunks: the limit is exact to within one chunk.
        let bytes = chunks.map(move |chunk| {
            let chunk = chunk?;
            let seen = counter.fetch_add(chunk.len(), Ordering::Relaxed) + chunk.len();
            if seen > limit {
                return Err(BodyError::Oversized(Oversized));
            }
            Ok::<_, BodyError>(chunk)
        });
        EventStream {
            inner: Box::pin(sse_stream::SseByteStream::new(bytes)),
            since_event,
            limit,
            last_id: None,
            retry: None,
        }
    }

    /// The next event, `None` at the end of the stream.
    pub async fn next(&mut self) -> Option<Result<Event, SseError>> {
        let item = self.inner.next().await?;
        self.since_event.store(0, Ordering::Relaxed);
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
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
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
