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
        let since_event = Arc::new(AtomicUsize::new(0));
        let counter = since_event.clone();
        // Counting whole chunks: the limit is exact to within one chunk.
        let bytes = resp.bytes_stream().map(move |chunk| {
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
