//! Legacy HTTP+SSE (2024-11-05): one long GET event stream carries every
//! server message; client messages are POSTed to the `endpoint` it names.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use reqwest::header::{ACCEPT, CONTENT_TYPE};
use tracing::{debug, info};
use url::Url;

use super::sse::{Event, EventStream, SseError, error_chain};
use super::{BodyKind, KIND_SSE, OutMsg, Shared, auth_message, body_kind, is_auth_status};
use crate::transport::{CloseReason, TransportEvent};

/// GET the event stream and wait for its `endpoint` event. The error says
/// why, and whether it was a 401/403.
pub(super) async fn open(shared: &Arc<Shared>) -> Result<(), (String, bool)> {
    let resp = shared
        .http
        .get(shared.url.clone())
        .header(ACCEPT, "text/event-stream")
        .send()
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
    let endpoint = tokio::time::timeout(shared.send_timeout, async {
        loop {
            match stream.next().await {
                Some(Ok(Event::Endpoint(uri))) => return Ok(uri),
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e.to_string()),
                None => return Err("the event stream ended before its endpoint event".to_owned()),
            }
        }
    })
    .await
    .map_err(|_| {
        (
            format!("no endpoint event within {:?}", shared.send_timeout),
            false,
        )
    })?
    .map_err(|e| (e, false))?;
    let endpoint = resolve_endpoint(&shared.url, endpoint.trim()).map_err(|e| (e, false))?;
    info!(endpoint = %super::redact_url(endpoint.as_str()), "legacy HTTP+SSE transport");
    shared.state().endpoint = Some(endpoint);
    shared.kind.store(KIND_SSE, Ordering::SeqCst);
    let task = shared.clone();
    shared.spawn(async move { read_events(&task, stream).await });
    Ok(())
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

async fn read_events(shared: &Arc<Shared>, mut stream: EventStream) {
    let reason = loop {
        match stream.next().await {
            Some(Ok(Event::Message(data))) => {
                shared.emit(TransportEvent::Frame(data)).await;
            }
            Some(Ok(_)) => {}
            Some(Err(SseError::Oversized { limit })) => {
                shared
                    .emit(TransportEvent::Oversized { limit, id: None })
                    .await;
                break format!("an event exceeded the {limit}-byte message limit");
            }
            Some(Err(e)) => break e.to_string(),
            None => break "the server ended the event stream".to_owned(),
        }
    };
    shared.close(CloseReason::new(reason)).await;
}

/// POST one message to the endpoint. The answer comes on the event stream;
/// the POST itself only says whether the message was taken.
pub(super) async fn send(shared: &Arc<Shared>, msg: OutMsg) {
    let Some(endpoint) = shared.state().endpoint.clone() else {
        return shared
            .fail(&msg.requests, "the legacy transport has no endpoint")
            .await;
    };
    let req = shared
        .http
        .post(endpoint)
        .header(CONTENT_TYPE, "application/json")
        .body(msg.text);
    let resp = match tokio::time::timeout(shared.send_timeout, req.send()).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            let reason = format!("the HTTP request failed: {}", error_chain(&e));
            return shared.fail(&msg.requests, &reason).await;
        }
        Err(_) => {
            let reason = format!(
                "the server did not take the message within {:?}",
                shared.send_timeout
            );
            return shared.fail(&msg.requests, &reason).await;
        }
    };
    let status = resp.status();
    if is_auth_status(status) {
        return shared.auth_failed(resp).await;
    }
    if !status.is_success() {
        let reason = shared.status_error(resp).await;
        return shared.fail(&msg.requests, &reason).await;
    }
    debug!(%status, "message taken");
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
