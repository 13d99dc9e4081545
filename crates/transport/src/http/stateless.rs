//! Streamable HTTP of the stateless revision (2026-07-28): every request is
//! its own POST with its metadata mirrored into headers, answered with JSON
//! or with an SSE stream scoped to it. No session, no GET stream, no
//! resumption; closing a request's response stream is its cancellation.
//!
//! An [`Outbound`](crate::Outbound) with `stateless` set takes this
//! path. Nothing here touches the session, the negotiated revision or the
//! `initialize` kept for renewals, so a failed probe (`server/discover` to a
//! handshake-only server) leaves the connection as it was for the
//! `initialize` that follows, legacy HTTP+SSE fallback included.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use base64::Engine as _;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::value::RawValue;
use tracing::debug;

use super::sse::{Event, EventStream, SseError, error_chain};
use super::{
    BodyError, BodyKind, KIND_SSE, KIND_STREAMABLE, KIND_UNDETECTED, OutMsg, Shared, body_kind,
    is_auth_status, read_limited, redact_url, response_ids, same_id, snippet, status_message,
    streamable,
};
use crate::{StatelessHeaders, Stream, TransportEvent};
use mcphost_protocol::Id;

const POST_ACCEPT: &str = "application/json, text/event-stream";
const PROTOCOL_VERSION: &str = "mcp-protocol-version";
const METHOD: &str = "mcp-method";
const NAME: &str = "mcp-name";
const PARAM_PREFIX: &str = "mcp-param-";
const SENTINEL_PREFIX: &str = "=?base64?";
const SENTINEL_SUFFIX: &str = "?=";

use mcphost_protocol::error_codes::{
    HEADER_MISMATCH, METHOD_NOT_FOUND, MISSING_CAPABILITY, UNSUPPORTED_VERSION,
};

/// A header value per the spec's Value Encoding: as it is when every
/// character is visible ASCII, space or tab, with no whitespace at either
/// end; otherwise (and for a value that looks like the sentinel itself)
/// `=?base64?{base64 of its UTF-8}?=`.
pub(super) fn encode_header_value(v: &str) -> String {
    let safe = v.bytes().all(|b| matches!(b, 0x21..=0x7e | b' ' | b'\t'));
    let padded = v.starts_with([' ', '\t']) || v.ends_with([' ', '\t']);
    // Overlapping ends ("=?base64?=") count too: encoding is never wrong.
    let sentinel = v.starts_with(SENTINEL_PREFIX) && v.ends_with(SENTINEL_SUFFIX);
    if safe && !padded && !sentinel {
        return v.to_owned();
    }
    let b64 = base64::engine::general_purpose::STANDARD.encode(v.as_bytes());
    format!("{SENTINEL_PREFIX}{b64}{SENTINEL_SUFFIX}")
}

/// Send one message of the stateless revision. A request runs in its own
/// task, registered so that `notifications/cancelled` can end it.
pub(super) async fn send(shared: &Arc<Shared>, msg: OutMsg, headers: &StatelessHeaders) {
    if shared.kind.load(Ordering::SeqCst) == KIND_SSE {
        let reason = "the legacy HTTP+SSE transport (2024-11-05) cannot carry requests of revision 2026-07-28";
        return shared.fail(&msg.requests, reason).await;
    }
    let req = match build(shared, &msg.text, headers) {
        Ok(r) => r,
        Err(e) => return shared.fail(&msg.requests, &e).await,
    };
    let id = match msg.requests.as_slice() {
        [] => return notify(shared, req, &headers.method).await,
        [id] => id.clone(),
        more => {
            let reason = "revision 2026-07-28 has no batches: one request per POST";
            return shared.fail(more, reason).await;
        }
    };
    let task = shared.clone();
    let key = id.clone();
    // Registered under the lock, so the task cannot finish (and deregister)
    // before it is registered.
    let mut st = shared.state();
    let handle = shared.spawn(async move {
        exchange(&task, req, key.clone()).await;
        task.state().stateless.remove(&key);
    });
    st.stateless.insert(id, handle);
}

/// A message without `stateless` that this revision takes instead of the
/// handshake path: `notifications/cancelled` for a request in flight here
/// (its exchange is aborted: closing the stream is the cancellation, and
/// nothing is POSTed), and, on a connection that only ever spoke this
/// revision, any notification or answer (none is defined on this wire; a
/// server's request on a response stream gets no answer either).
pub(super) fn takes(shared: &Shared, msg: &OutMsg) -> bool {
    if msg.method.as_deref() == Some("notifications/cancelled")
        && let Some(id) = streamable::cancelled_request(&msg.text)
    {
        let task = shared.state().stateless.remove(&id);
        if let Some(task) = task {
            task.abort();
            debug!(%id, "cancelled: its response stream is closed");
            return true;
        }
    }
    if !msg.requests.is_empty() {
        return false;
    }
    let st = shared.state();
    if st.stateless_answered && st.init.is_none() {
        debug!(
            "not sent: {} (revision 2026-07-28 takes no client notifications or answers over HTTP)",
            msg.method.as_deref().unwrap_or("a response")
        );
        return true;
    }
    false
}

fn build(
    shared: &Shared,
    body: &str,
    h: &StatelessHeaders,
) -> Result<reqwest::RequestBuilder, String> {
    let value = |what: &str, v: &str| {
        HeaderValue::from_str(v).map_err(|_| format!("{what} {v:?} is not a valid header value"))
    };
    let mut req = shared
        .http
        .post(shared.url.clone())
        .header(ACCEPT, POST_ACCEPT)
        .header(CONTENT_TYPE, "application/json")
        .header(
            PROTOCOL_VERSION,
            value("MCP-Protocol-Version", &h.protocol_version)?,
        )
        .header(METHOD, value("Mcp-Method", &h.method)?);
    if let Some(name) = &h.name {
        req = req.header(NAME, value("Mcp-Name", &encode_header_value(name))?);
    }
    for (name, v) in &h.params {
        let key = HeaderName::from_bytes(format!("{PARAM_PREFIX}{name}").as_bytes())
            .map_err(|_| format!("Mcp-Param-{name} is not a valid header name"))?;
        req = req.header(key, value("Mcp-Param", &encode_header_value(v))?);
    }
    Ok(req.body(body.to_owned()))
}

/// A notification with headers (the client sends none today): any 2xx.
async fn notify(shared: &Arc<Shared>, req: reqwest::RequestBuilder, method: &str) {
    match tokio::time::timeout(shared.send_timeout, shared.send(req)).await {
        Ok(Ok(r)) if is_auth_status(r.status()) => shared.auth_failed(r).await,
        Ok(Ok(r)) if !r.status().is_success() => {
            debug!("sending {method}: {}", shared.status_error(r).await);
        }
        Ok(Ok(_)) => {}
        Ok(Err(e)) => debug!("sending {method}: {}", shared.cannot_reach(&e)),
        Err(_) => debug!(
            "sending {method} took longer than {:?}",
            shared.send_timeout
        ),
    }
}

/// The server speaks this revision: `kind()` says so from now on.
fn spoken(shared: &Shared) {
    let _ = shared.kind.compare_exchange(
        KIND_UNDETECTED,
        KIND_STREAMABLE,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    shared.state().stateless_answered = true;
}

/// One request's POST and its answer.
async fn exchange(shared: &Arc<Shared>, req: reqwest::RequestBuilder, id: Id) {
    let ids = [id.clone()];
    let resp = match shared.send(req).await {
        Ok(r) => r,
        Err(e) if e.is_connect() => {
            shared.fail(&ids, &shared.cannot_reach(&e)).await;
            return shared.unreachable(&e).await;
        }
        Err(e) => {
            let reason = format!("the HTTP request failed: {}", error_chain(&e));
            return shared.fail(&ids, &reason).await;
        }
    };
    let status = resp.status();
    if is_auth_status(status) {
        return shared.auth_failed(resp).await;
    }
    if status.is_success() {
        spoken(shared);
        return match body_kind(&resp) {
            BodyKind::EventStream => read_stream(shared, resp, id).await,
            BodyKind::Json => match read_limited(resp, shared.limit).await {
                Ok(text) => match error_answer(&text, &id) {
                    Some((frame, _)) => emit(shared, frame, &id).await,
                    None => streamable::deliver_json(shared, text, vec![id]).await,
                },
                Err(BodyError::Oversized) => shared.oversized(vec![id]).await,
                Err(BodyError::Http(e)) => {
                    let reason = format!("reading the response failed: {}", error_chain(&e));
                    shared.fail(&ids, &reason).await;
                }
                Err(BodyError::NotUtf8) => shared.fail(&ids, "the response is not UTF-8").await,
            },
            BodyKind::Empty => {
                let reason = format!(
                    "the server answered HTTP {status} with no body; in revision 2026-07-28 a request is answered on its own POST"
                );
                shared.fail(&ids, &reason).await;
            }
            BodyKind::Other(ct) => {
                let reason = format!(
                    "the server answered with Content-Type {ct:?}, which is neither JSON nor an event stream"
                );
                shared.fail(&ids, &reason).await;
            }
        };
    }
    let url = redact_url(resp.url().as_str());
    let body = read_limited(resp, shared.limit).await.unwrap_or_default();
    match error_answer(&body, &id) {
        Some((frame, code)) => {
            if is_stateless_error(status, code) {
                spoken(shared);
            }
            debug!(%id, code, "HTTP {status} with a JSON-RPC error: delivered as the answer");
            emit(shared, frame, &id).await;
        }
        None => {
            let reason = status_message(status, &url, &snippet(&body));
            shared.fail(&ids, &reason).await;
        }
    }
}

async fn emit(shared: &Shared, frame: String, id: &Id) {
    shared
        .emit(TransportEvent::FrameOn(frame, Stream::Request(id.clone())))
        .await;
}

/// An error only a server of this revision sends (see Backward
/// Compatibility): a recognised stateless error in a 400, or `-32601` in a 404.
/// Any other error leaves the transport undetected for the handshake.
fn is_stateless_error(status: StatusCode, code: i64) -> bool {
    matches!(
        code,
        HEADER_MISMATCH | MISSING_CAPABILITY | UNSUPPORTED_VERSION
    ) || (status == StatusCode::NOT_FOUND && code == METHOD_NOT_FOUND)
}

/// A body that is a JSON-RPC error response to request `id`, as a frame,
/// with its code. A server that could not read the id answers with
/// `"id": null` or none: ours is put in; nothing else changes, the error
/// object stays byte for byte. An answer to another id is not ours.
fn error_answer(body: &str, id: &Id) -> Option<(String, i64)> {
    #[derive(Deserialize)]
    struct Reply {
        #[serde(default)]
        jsonrpc: Option<String>,
        #[serde(default)]
        id: Option<Box<RawValue>>,
        #[serde(default)]
        error: Option<Code>,
        #[serde(default)]
        result: Option<serde::de::IgnoredAny>,
    }
    #[derive(Deserialize)]
    struct Code {
        code: i64,
    }
    let reply: Reply = serde_json::from_str(body).ok()?;
    if reply.jsonrpc.as_deref() != Some("2.0") || reply.result.is_some() {
        return None;
    }
    let code = reply.error?.code;
    match reply.id {
        Some(theirs) => {
            let theirs = Id::from_json(theirs.get())?;
            same_id(&theirs, id).then(|| (body.to_owned(), code))
        }
        None => {
            let obj = RawValue::from_string(body.to_owned()).ok()?;
            let ours = RawValue::from_string(id.as_json().to_owned()).ok()?;
            let frame = mcphost_protocol::set_fields(Some(&obj), [("id".to_owned(), ours)]).ok()?;
            Some((frame.get().to_owned(), code))
        }
    }
}

/// Read a request's event stream until its response. Nothing resumes a
/// stream of this revision: one that ends first fails the request. No
/// deadline here: a `subscriptions/listen` stream stays open as long as the
/// server keeps it (comments keep it alive and never reach the peer).
async fn read_stream(shared: &Arc<Shared>, resp: reqwest::Response, id: Id) {
    let mut stream = EventStream::new(resp, shared.limit);
    let on = Some(Stream::Request(id.clone()));
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::Message(data)) => {
                let done = response_ids(&data).iter().any(|a| same_id(a, &id));
                emit(shared, data, &id).await;
                if done {
                    return streamable::drain(shared, stream, on).await;
                }
            }
            // Priming events, ids and `retry` are for resumption, which this
            // revision does not have.
            Ok(_) => {}
            Err(SseError::Oversized { .. }) => return shared.oversized(vec![id]).await,
            Err(e) => {
                let reason = format!("the response stream broke before the response: {e}");
                return shared.fail(&[id], &reason).await;
            }
        }
    }
    let reason = "the server closed the response stream without answering (revision 2026-07-28 streams are not resumed)";
    shared.fail(&[id], reason).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_encoding_table() {
        // streamable-http.mdx, Value Encoding, "Encoding examples", exactly.
        let table = [
            ("us-west1", "us-west1"),
            ("Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?="),
            (" padded ", "=?base64?IHBhZGRlZCA=?="),
            ("line1\nline2", "=?base64?bGluZTEKbGluZTI=?="),
            ("=?base64?literal?=", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="),
        ];
        for (plain, encoded) in table {
            assert_eq!(encode_header_value(plain), encoded, "{plain:?}");
        }
    }

    #[test]
    fn encoding_edges() {
        let b64 = |s: &str| {
            format!(
                "=?base64?{}?=",
                base64::engine::general_purpose::STANDARD.encode(s)
            )
        };
        // Inner spaces and tabs are header-safe; at either end they are not.
        for plain in ["a b", "a\tb", "", "file:///p/x.json", "~!#$%&'*+-.^_`|"] {
            assert_eq!(encode_header_value(plain), plain, "{plain:?}");
        }
        for odd in [
            "\tx",
            "x\t",
            " x",
            "x ",
            "a\rb",
            "\u{7f}",
            "é",
            "a\0b",
            "=?base64??=",
            "=?base64?=",
        ] {
            assert_eq!(encode_header_value(odd), b64(odd), "{odd:?}");
        }
        // Only the exact, lower-case sentinel needs escaping.
        for plain in ["=?BASE64?x?=", "=?base64?x", "x=?base64?x?="] {
            assert_eq!(encode_header_value(plain), plain, "{plain:?}");
        }
        // Every encoded value is a valid header value.
        for v in ["\n", "世界", "\u{1}"] {
            assert!(HeaderValue::from_str(&encode_header_value(v)).is_ok());
        }
    }

    #[test]
    fn error_bodies_become_answers_to_the_request() {
        let me = Id::number(7);
        let err = r#"{"code":-32022,"message":"Unsupported protocol version","data":{"supported":["2026-07-28"],"n":1.10}}"#;
        // Ours: as it is.
        let body = format!(r#"{{"jsonrpc":"2.0","id":7,"error":{err}}}"#);
        assert_eq!(error_answer(&body, &me), Some((body.clone(), -32022)));
        // `null` or no id: ours put in, the error object byte for byte.
        for body in [
            format!(r#"{{"jsonrpc":"2.0","id":null,"error":{err}}}"#),
            format!(r#"{{"jsonrpc":"2.0","error":{err}}}"#),
        ] {
            let (frame, code) = error_answer(&body, &me).unwrap();
            assert_eq!(code, -32022);
            assert!(frame.contains(&format!(r#""error":{err}"#)), "{frame}");
            let v: serde_json::Value = serde_json::from_str(&frame).unwrap();
            assert_eq!(v["id"], 7, "{frame}");
        }
        // Another id, no "jsonrpc", a result, not JSON: not an answer.
        for body in [
            format!(r#"{{"jsonrpc":"2.0","id":8,"error":{err}}}"#),
            format!(r#"{{"id":7,"error":{err}}}"#),
            r#"{"jsonrpc":"2.0","id":7,"result":{}}"#.to_owned(),
            "<html>Bad Request</html>".to_owned(),
            String::new(),
        ] {
            assert_eq!(error_answer(&body, &me), None, "{body}");
        }
    }

    #[test]
    fn stateless_errors() {
        let bad = StatusCode::BAD_REQUEST;
        for c in [-32020, -32021, -32022] {
            assert!(is_stateless_error(bad, c));
        }
        assert!(is_stateless_error(StatusCode::NOT_FOUND, -32601));
        // A handshake server's session errors do not say "stateless".
        for c in [-32000, -32600, -32601, -32602] {
            assert!(!is_stateless_error(bad, c), "{c}");
        }
    }
}
