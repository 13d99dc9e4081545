//! Legacy HTTP+SSE (2024-11-05): one long GET event stream carries every
//! server message; client messages are POSTed to the `endpoint` it names.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use reqwest::header::{ACCEPT, CONTENT_TYPE};
use tracing::{debug, info, warn};
use url::Url;

use super::sse::{Event, EventStream, SseError, error_chain};
use super::{
    BodyKind, DEFAULT_RETRY, KIND_SSE, OutMsg, Shared, auth_message, body_kind, is_auth_status,
    response_ids, same_id,
};
use crate::{CloseReason, TransportEvent};
use mcphost_protocol::Id;

/// Open the event stream and start reading it. The error says why, and
/// whether it was a 401/403.
pub(super) async fn start(shared: &Arc<Shared>) -> Result<(), (String, bool)> {
    let stream = open(shared).await?;
    let task = shared.clone();
    shared.spawn(async move { read_events(&task, stream).await });
    Ok(())
}

/// GET the event stream and wait for its `endpoint` event, within the init
/// timeout (it is part of the handshake).
async fn open(shared: &Arc<Shared>) -> Result<EventStream, (String, bool)> {
    tokio::time::timeout(shared.init_timeout, open_unbounded(shared))
        .await
        .ok()
        .unwrap_or_else(|| {
            Err((
                format!(
                    "GET {} gave no event stream with an endpoint event within {:?} (the init timeout)",
                    super::redact_url(shared.url.as_str()),
                    shared.init_timeout
                ),
                false,
            ))
        })
}

async fn open_unbounded(shared: &Arc<Shared>) -> Result<EventStream, (String, bool)> {
    let resp = shared
        .send(
            shared
                .http
                .get(shared.url.clone())
                .header(ACCEPT, "text/event-stream"),
        )
        .await
        .map_err(|e| (shared.cannot_reach(&e), false))?;
    let status = resp.status();
    if is_auth_status(status) {
        let what = shared.status_error(resp).await;
        return Err((auth_message(&what, ""), true));
    }
    if !status.is_success() {
        return Err((shared.status_error(resp).await, false));
    }
    if body_kind(&resp) != BodyKind::EventStream {
        return Err((
            format!(
                "GET {} did not answer with an event stream",
                super::redact_url(shared.url.as_str())
            ),
            false,
        ));
    }
    let mut stream = EventStream::new(resp, shared.limit);
    let endpoint = loop {
        match stream.next().await {
            Some(Ok(Event::Endpoint(uri))) => break uri,
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err((e.to_string(), false)),
            None => {
                let e = "the event stream ended before its endpoint event";
                return Err((e.to_owned(), false));
            }
        }
    };
    let endpoint = resolve_endpoint(&shared.url, endpoint.trim()).map_err(|e| (e, false))?;
    info!(endpoint = %super::redact_url(endpoint.as_str()), "legacy HTTP+SSE transport");
    shared.state().endpoint = Some(endpoint);
    shared.kind.store(KIND_SSE, Ordering::SeqCst);
    Ok(stream)
}

/// The endpoint is resolved against the SSE URL, and must stay on its
/// origin: our headers (credentials) go wherever it points.
fn resolve_endpoint(base: &Url, uri: &str) -> Result<Url, String> {
    let url = base
        .join(uri)
        .map_err(|e| format!("the endpoint event {uri:?} is not a URL: {e}"))?;
    if url.origin() != base.origin() {
        return Err(format!(
            "the endpoint event points to another origin ({}), which mcphost refuses",
            url.origin().ascii_serialization()
        ));
    }
    Ok(url)
}

/// Why an event stream ended.
struct Ended {
    reason: String,
    /// An event over the size limit broke it.
    oversized: Option<usize>,
    /// It delivered at least one message: it worked until it broke.
    delivered: bool,
}

/// Deliver every message until the stream ends.
async fn read_until_end(shared: &Arc<Shared>, stream: &mut EventStream) -> Ended {
    let mut delivered = false;
    let (reason, oversized) = loop {
        match stream.next().await {
            Some(Ok(Event::Message(data))) => {
                delivered = true;
                let answered = response_ids(&data);
                shared
                    .state()
                    .awaiting
                    .retain(|w| !answered.iter().any(|a| same_id(a, w)));
                shared.emit(TransportEvent::Frame(data)).await;
            }
            Some(Ok(_)) => {}
            Some(Err(SseError::Oversized { limit })) => {
                break (
                    format!("an event exceeded the {limit}-byte message limit"),
                    Some(limit),
                );
            }
            Some(Err(e)) => break (e.to_string(), None),
            None => break ("the server ended the event stream".to_owned(), None),
        }
    };
    Ended {
        reason,
        oversized,
        delivered,
    }
}

/// Read the event stream. It carries every answer and the legacy session
/// lives and dies with it: when it ends, the requests whose answers were due
/// on it fail, and a new stream is opened and initialized as a new session,
/// so the server stays usable. A stream that ends before delivering
/// anything, or one that cannot be reopened, closes the connection.
async fn read_events(shared: &Arc<Shared>, mut stream: EventStream) {
    loop {
        let opened = tokio::time::Instant::now();
        let ended = read_until_end(shared, &mut stream).await;
        // Held until the new stream is up: messages sent meanwhile wait for
        // its endpoint instead of going to the dead one.
        let guard = shared.reinit.lock().await;
        shared.state().endpoint = None;
        let awaiting = std::mem::take(&mut shared.state().awaiting);
        match ended.oversized {
            // We cannot tell which answer it was: every one due fails.
            Some(limit) => {
                for id in awaiting {
                    shared
                        .emit(TransportEvent::Oversized {
                            limit,
                            id: Some(id),
                        })
                        .await;
                }
            }
            None => {
                let reason = format!(
                    "the legacy event stream carrying the answer ended: {}",
                    ended.reason
                );
                shared.fail(&awaiting, &reason).await;
            }
        }
        if !ended.delivered {
            return shared.close(CloseReason::new(ended.reason)).await;
        }
        warn!("{}; opening a new event stream", ended.reason);
        if let Some(pause) = DEFAULT_RETRY.checked_sub(opened.elapsed()) {
            tokio::time::sleep(pause).await;
        }
        match reconnect(shared).await {
            Ok(s) => stream = s,
            Err((e, auth_required)) => {
                let summary = format!("{}; opening a new event stream failed: {e}", ended.reason);
                return shared
                    .close(CloseReason {
                        summary,
                        auth_required,
                        ..CloseReason::default()
                    })
                    .await;
            }
        }
        drop(guard);
    }
}

/// A new event stream, initialized as a new session with the client's own
/// `initialize` (its answer goes to the client as a renewal), and told again
/// what the old session knew (resource subscriptions, the log level).
async fn reconnect(shared: &Arc<Shared>) -> Result<EventStream, (String, bool)> {
    let Some((id, body)) = shared.state().init.clone() else {
        return Err(("initialize was never sent".to_owned(), false));
    };
    let mut stream = open(shared).await?;
    let init = async {
        post(shared, body).await?;
        let answer = answer_on(shared, &mut stream, &id).await?;
        post(
            shared,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned(),
        )
        .await?;
        Ok::<_, String>(answer)
    };
    let answer = tokio::time::timeout(shared.init_timeout, init)
        .await
        .ok()
        .unwrap_or_else(|| Err("the new session was not initialized in time".to_owned()))
        .map_err(|e| (e, false))?;
    shared.renewed.send_replace(Some(answer.into()));
    let replay = shared.state().replay.clone();
    for (what, id, text) in replay {
        let restored = async {
            post(shared, text).await?;
            answer_on(shared, &mut stream, &id).await
        };
        let outcome = match tokio::time::timeout(shared.send_timeout, restored).await {
            Ok(Ok(_)) => "restored".to_owned(),
            Ok(Err(e)) => e,
            Err(_) => "sent, but not answered".to_owned(),
        };
        debug!("new legacy session: {what}: {outcome}");
    }
    Ok(stream)
}

/// Read the stream up to the answer to our own request `id`, which is not
/// delivered; other messages are.
async fn answer_on(
    shared: &Arc<Shared>,
    stream: &mut EventStream,
    id: &Id,
) -> Result<String, String> {
    loop {
        match stream.next().await {
            Some(Ok(Event::Message(data))) => {
                if response_ids(&data).iter().any(|a| same_id(a, id)) {
                    return Ok(data);
                }
                shared.emit(TransportEvent::Frame(data)).await;
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e.to_string()),
            None => return Err("the new event stream ended at once".to_owned()),
        }
    }
}

/// POST one message of our own to the endpoint.
async fn post(shared: &Shared, text: String) -> Result<(), String> {
    let Some(endpoint) = shared.state().endpoint.clone() else {
        return Err("the legacy transport has no endpoint".to_owned());
    };
    let resp = shared
        .send(
            shared
                .http
                .post(endpoint)
                .header(CONTENT_TYPE, "application/json")
                .body(text),
        )
        .await
        .map_err(|e| format!("the HTTP request failed: {}", error_chain(&e)))?;
    if resp.status().is_success() {
        Ok(())
    } else {
        Err(shared.status_error(resp).await)
    }
}

/// POST one message to the endpoint. The answer comes on the event stream;
/// the POST itself only says whether the message was taken.
pub(super) async fn send(shared: &Arc<Shared>, msg: OutMsg) {
    // A new event stream being opened: wait for its endpoint.
    drop(shared.reinit.lock().await);
    super::streamable::remember_session_state(shared, &msg);
    if msg.method.as_deref() == Some("initialize")
        && let Some(id) = msg.requests.first()
    {
        // Kept to initialize the next event stream's session.
        shared.state().init = Some((id.clone(), msg.text.clone()));
    }
    if msg.method.as_deref() == Some("notifications/cancelled")
        && let Some(id) = super::streamable::cancelled_request(&msg.text)
    {
        // No longer waited for.
        shared.state().awaiting.retain(|w| !same_id(w, &id));
    }
    let Some(endpoint) = shared.state().endpoint.clone() else {
        return shared
            .fail(&msg.requests, "the legacy transport has no endpoint")
            .await;
    };
    shared.state().awaiting.extend(msg.requests.iter().cloned());
    let req = shared
        .http
        .post(endpoint)
        .header(CONTENT_TYPE, "application/json")
        .body(msg.text);
    let failed = match tokio::time::timeout(shared.send_timeout, shared.send(req)).await {
        Ok(Ok(resp)) => {
            let status = resp.status();
            if is_auth_status(status) {
                return shared.auth_failed(resp).await;
            }
            if status.is_success() {
                debug!(%status, "message taken");
                return;
            }
            shared.status_error(resp).await
        }
        Ok(Err(e)) => format!("the HTTP request failed: {}", error_chain(&e)),
        Err(_) => format!(
            "the server did not take the message within {:?}",
            shared.send_timeout
        ),
    };
    shared
        .state()
        .awaiting
        .retain(|w| !msg.requests.iter().any(|r| same_id(r, w)));
    shared.fail(&msg.requests, &failed).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_resolves_relative_and_stays_on_origin() {
        let base = Url::parse("http://127.0.0.1:9/sse").unwrap();
        assert_eq!(
            resolve_endpoint(&base, "/messages?sessionId=1")
                .unwrap()
                .as_str(),
            "http://127.0.0.1:9/messages?sessionId=1"
        );
        assert_eq!(
            resolve_endpoint(&base, "messages").unwrap().as_str(),
            "http://127.0.0.1:9/messages"
        );
        let e = resolve_endpoint(&base, "http://evil.example/steal").unwrap_err();
        assert!(e.contains("another origin"), "{e}");
    }
}
