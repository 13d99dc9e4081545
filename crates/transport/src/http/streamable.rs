//! Streamable HTTP: one POST per message, answers as JSON or SSE, sessions,
//! resumption by GET, and the optional standalone GET stream.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap};
use tracing::{debug, info, warn};

use super::sse::{Event, EventStream, SseError, error_chain};
use super::{
    BodyError, BodyKind, DEFAULT_RETRY, HttpMode, KIND_SSE, KIND_STREAMABLE, MAX_RESUME_ATTEMPTS,
    OutMsg, Shared, body_kind, deadline_after, is_auth_status, legacy, read_limited, response_ids,
    same_id, within,
};
use crate::{Stream, TransportEvent};
use mcphost_protocol::Id;

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";
const LAST_EVENT_ID: &str = "last-event-id";
/// How long an answered response stream is read on, hoping for its end.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// Which session headers a request carries.
#[derive(Clone, Copy)]
enum Headers {
    /// `initialize`: neither session nor revision.
    Fresh,
    Session,
}

/// Send one outgoing message. Requests run in their own task so a slow one
/// never holds the others; notifications and our answers are sent in order,
/// before anything after them (a request must not overtake `initialized`).
pub(super) async fn send(shared: &Arc<Shared>, msg: OutMsg) {
    if msg.method.as_deref() == Some("initialize") {
        return initialize(shared, msg).await;
    }
    remember_session_state(shared, &msg);
    if msg.requests.is_empty() {
        let sent = tokio::time::timeout(shared.send_timeout, post_other(shared, &msg)).await;
        if sent.is_err() {
            warn!(
                "sending {} took longer than {:?}; moved on",
                msg.method.as_deref().unwrap_or("a response"),
                shared.send_timeout
            );
        }
        match msg.method.as_deref() {
            // Servers drop what they send while no GET stream is open, so
            // the client's first requests wait until it is (or is refused).
            Some("notifications/initialized") => {
                let opened = start_get_stream(shared);
                let _ = tokio::time::timeout(shared.send_timeout, opened).await;
            }
            // The server was told; its stream for that request is no
            // longer ours to read (dropping it alone would not cancel).
            Some("notifications/cancelled") => {
                if let Some(id) = cancelled_request(&msg.text) {
                    let task = shared.state().in_flight.remove(&id);
                    if let Some(task) = task {
                        task.abort();
                    }
                }
            }
            _ => {}
        }
        return;
    }
    let task = shared.clone();
    let ids = msg.requests.clone();
    // Registered under the lock, so the task cannot finish (and deregister)
    // before it is registered.
    let mut st = shared.state();
    let handle = shared.spawn(async move {
        let ids = msg.requests.clone();
        post_request(&task, msg).await;
        let mut st = task.state();
        for id in &ids {
            st.in_flight.remove(id);
        }
    });
    for id in ids {
        st.in_flight.insert(id, handle.clone());
    }
}

/// Note what a renewed session must be told again.
pub(super) fn remember_session_state(shared: &Shared, msg: &OutMsg) {
    #[derive(serde::Deserialize)]
    struct Note {
        params: Params,
    }
    #[derive(serde::Deserialize)]
    struct Params {
        uri: String,
    }
    let uri = || {
        serde_json::from_str::<Note>(&msg.text)
            .ok()
            .map(|n| n.params.uri)
    };
    let (key, keep) = match msg.method.as_deref() {
        Some("logging/setLevel") => ("logging".to_owned(), true),
        Some("resources/subscribe") => match uri() {
            Some(u) => (format!("subscription {u}"), true),
            None => return,
        },
        Some("resources/unsubscribe") => match uri() {
            Some(u) => (format!("subscription {u}"), false),
            None => return,
        },
        _ => return,
    };
    let Some(id) = msg.requests.first() else {
        return;
    };
    let replay = &mut shared.state().replay;
    replay.retain(|(k, _, _)| *k != key);
    if keep {
        replay.push((key, id.clone(), msg.text.clone()));
    }
}

/// The `requestId` of a `notifications/cancelled`.
pub(super) fn cancelled_request(text: &str) -> Option<Id> {
    #[derive(serde::Deserialize)]
    struct Note {
        params: Params,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Params {
        request_id: Id,
    }
    serde_json::from_str::<Note>(text)
        .ok()
        .map(|n| n.params.request_id)
}

fn build_post(shared: &Shared, body: &str, headers: Headers) -> reqwest::RequestBuilder {
    let mut req = shared
        .http
        .post(shared.url.clone())
        .header(ACCEPT, "application/json, text/event-stream")
        .header(CONTENT_TYPE, "application/json")
        .body(body.to_owned());
    if let Headers::Session = headers {
        req = with_session(shared, req);
    }
    req
}

fn with_session(shared: &Shared, mut req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    let st = shared.state();
    if let Some(s) = &st.session {
        req = req.header(SESSION_HEADER, s);
    }
    if let Some(v) = &st.version {
        req = req.header(VERSION_HEADER, v);
    }
    req
}

fn capture_session(shared: &Shared, headers: &HeaderMap) {
    if let Some(s) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) {
        let mut st = shared.state();
        if st.session.as_deref() != Some(s) {
            debug!("session {s}");
            st.session = Some(s.to_owned());
        }
    }
}

/// The handshake's `initialize`, every step of it (the POST, a fallback to
/// the legacy transport, the answer) within the init timeout.
async fn initialize(shared: &Arc<Shared>, msg: OutMsg) {
    let ids = msg.requests.clone();
    if let Some(id) = ids.first() {
        let mut st = shared.state();
        st.init = Some((id.clone(), msg.text.clone()));
        st.session = None;
        st.version = None;
    }
    let deadline = deadline_after(shared.init_timeout);
    let late = || {
        format!(
            "no answer to initialize within {:?} (the init timeout)",
            shared.init_timeout
        )
    };
    let resp = match within(
        deadline,
        shared.send(build_post(shared, &msg.text, Headers::Fresh)),
    )
    .await
    {
        Some(Ok(r)) => r,
        Some(Err(e)) => return shared.fail(&ids, &shared.cannot_reach(&e)).await,
        None => return shared.fail(&ids, &late()).await,
    };
    let status = resp.status();
    if shared.mode == HttpMode::Auto
        && matches!(
            status,
            StatusCode::BAD_REQUEST | StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED
        )
    {
        info!("initialize answered HTTP {status}: trying the legacy HTTP+SSE transport");
        let opened = within(deadline, legacy::start(shared))
            .await
            .unwrap_or_else(|| Err((late(), false)));
        if let Err((reason, auth)) = opened {
            let reason = format!(
                "neither transport answered: Streamable HTTP said HTTP {status}, and legacy HTTP+SSE failed: {reason}"
            );
            if auth {
                shared
                    .close(crate::CloseReason {
                        summary: reason,
                        auth_required: true,
                        ..Default::default()
                    })
                    .await;
            } else {
                shared.fail(&ids, &reason).await;
            }
            return;
        }
        return legacy::send(shared, msg).await;
    }
    if is_auth_status(status) {
        return shared.auth_failed(resp).await;
    }
    if !status.is_success() {
        let reason = shared.status_error(resp).await;
        return shared.fail(&ids, &reason).await;
    }
    if shared.kind.load(Ordering::SeqCst) != KIND_SSE {
        shared.kind.store(KIND_STREAMABLE, Ordering::SeqCst);
    }
    capture_session(shared, resp.headers());
    let task = shared.clone();
    shared.spawn(async move {
        if within(deadline, answer(&task, resp, ids.clone()))
            .await
            .is_none()
        {
            let reason = format!(
                "the server did not answer initialize within {:?} (the init timeout)",
                task.init_timeout
            );
            task.fail(&ids, &reason).await;
        }
    });
}

async fn post_other(shared: &Arc<Shared>, msg: &OutMsg) {
    let what = msg.method.as_deref().unwrap_or("a response");
    match post(shared, &msg.text, &[]).await {
        // Any 2xx will do; a body here would answer nothing we asked.
        Ok(_) => {}
        Err(Failure::Auth(resp)) => shared.auth_failed(resp).await,
        Err(Failure::Unreachable(e)) => warn!("sending {what}: {}", shared.cannot_reach(&e)),
        Err(Failure::Reason(e)) => warn!("sending {what}: {e}"),
    }
}

async fn post_request(shared: &Arc<Shared>, msg: OutMsg) {
    let ids = msg.requests.clone();
    match post(shared, &msg.text, &ids).await {
        Ok(Posted::Stream(resp)) => answer(shared, resp, ids).await,
        Ok(Posted::Answer(text)) => deliver_json(shared, text, ids).await,
        Err(Failure::Auth(resp)) => shared.auth_failed(resp).await,
        Err(Failure::Unreachable(e)) => {
            shared.fail(&ids, &shared.cannot_reach(&e)).await;
            shared.unreachable(&e).await;
        }
        Err(Failure::Reason(e)) => shared.fail(&ids, &e).await,
    }
}

enum Failure {
    /// 401/403, for [`Shared::auth_failed`] to read the challenge from.
    Auth(reqwest::Response),
    Unreachable(reqwest::Error),
    Reason(String),
}

/// What a POST brought back.
enum Posted {
    /// A 2xx, its body still to read.
    Stream(reqwest::Response),
    /// An HTTP error whose body is the server's JSON-RPC answer to our
    /// request: delivered as it is, like any answer.
    Answer(String),
}

/// POST with the session; when the server has lost the session, renew it
/// and POST once more.
async fn post(shared: &Arc<Shared>, text: &str, requests: &[Id]) -> Result<Posted, Failure> {
    for attempt in 0..2 {
        let sent = shared.session();
        let resp = match shared
            .send(build_post(shared, text, Headers::Session))
            .await
        {
            Ok(r) => r,
            Err(e) if e.is_connect() => return Err(Failure::Unreachable(e)),
            Err(e) => {
                let reason = format!("the HTTP request failed: {}", error_chain(&e));
                return Err(Failure::Reason(reason));
            }
        };
        let status = resp.status();
        if status.is_success() {
            if sent.is_some() {
                shared.state().accepted = sent;
            }
            return Ok(Posted::Stream(resp));
        }
        if is_auth_status(status) {
            return Err(Failure::Auth(resp));
        }
        let url = super::redact_url(resp.url().as_str());
        let body = read_limited(resp, shared.limit).await.unwrap_or_default();
        let established = sent.is_some() && shared.state().accepted == sent;
        let verdict = judge(status, &body, sent.is_some(), established, requests);
        let error = || super::status_message(status, &url, &super::snippet(&body));
        match (verdict, sent) {
            (Verdict::Answer, _) => return Ok(Posted::Answer(body)),
            (Verdict::SessionLost, Some(stale)) if attempt == 0 => {
                renew_session(shared, &stale)
                    .await
                    .map_err(Failure::Reason)?;
            }
            (Verdict::SessionLost, _) => {
                return Err(Failure::Reason(format!(
                    "the server lost the session again right after it was renewed: {}",
                    error()
                )));
            }
            (Verdict::Error, _) => return Err(Failure::Reason(error())),
        }
    }
    Err(Failure::Reason(
        "the server lost the session again right after it was renewed".to_owned(),
    ))
}

/// How to take an HTTP error status on a POST.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Renew the session and send again.
    SessionLost,
    /// The body is the server's JSON-RPC answer to our request.
    Answer,
    /// Anything else fails the request, quoting the body.
    Error,
}

/// Decide what an HTTP error to a POST means.
///
/// - A body that is a JSON-RPC response to our request is the server's
///   answer: it goes to the caller as it is, code, message and `data`
///   intact, unless one of the two lost-session rules below takes it.
/// - The spec's rule for a lost session: 404 to a request that carried our
///   session id, unless the body answers it with a code outside the range
///   servers keep for themselves (-32099 … -32000): a -32601 in a 404 is
///   "method not found", not "session expired".
/// - server-everything (2026.8.31) answers an unknown session with 400 and
///   `{"code":-32000,"message":"Bad Request: No valid session ID provided"}`
///   addressed to our request. We take a 400 as a lost session only when
///   its body is a JSON-RPC error in the server-defined range (which the
///   SDKs use for transport-level rejections: they did not process our
///   message) and the session was established, i.e. this server already
///   accepted a request of ours on it: our headers, revision and framing
///   are then known to be acceptable, so what changed is the session. No
///   substring of the message is read. A wrong guess costs one renewal, as
///   the request is sent again only once.
fn judge(
    status: StatusCode,
    body: &str,
    sent_session: bool,
    established: bool,
    requests: &[Id],
) -> Verdict {
    #[derive(serde::Deserialize)]
    struct Reply {
        #[serde(default)]
        jsonrpc: Option<String>,
        #[serde(default)]
        id: Option<Id>,
        #[serde(default)]
        error: Option<Code>,
        #[serde(default)]
        result: Option<serde::de::IgnoredAny>,
    }
    #[derive(serde::Deserialize)]
    struct Code {
        code: i64,
    }
    let reply = serde_json::from_str::<Reply>(body).ok();
    let code = reply
        .as_ref()
        .and_then(|r| r.error.as_ref())
        .map(|e| e.code);
    let server_defined = code.is_some_and(|c| (-32099..=-32000).contains(&c));
    let answer = reply.as_ref().is_some_and(|r| {
        r.jsonrpc.as_deref() == Some("2.0")
            && (r.error.is_some() || r.result.is_some())
            && r.id
                .as_ref()
                .is_some_and(|id| requests.iter().any(|q| same_id(q, id)))
    });
    // An answer with a spec-defined code is no lost session even in a 404.
    let spec_answer = answer && !server_defined;
    if status == StatusCode::NOT_FOUND && sent_session && !spec_answer {
        return Verdict::SessionLost;
    }
    if status == StatusCode::BAD_REQUEST && sent_session && established && server_defined {
        return Verdict::SessionLost;
    }
    if answer {
        Verdict::Answer
    } else {
        Verdict::Error
    }
}

/// Deliver the answer to a POST: one JSON body, or an event stream that may
/// carry server requests and notifications before the responses.
async fn answer(shared: &Arc<Shared>, resp: reqwest::Response, ids: Vec<Id>) {
    match body_kind(&resp) {
        BodyKind::Json => match read_limited(resp, shared.limit).await {
            Ok(text) => deliver_json(shared, text, ids).await,
            Err(BodyError::Oversized) => shared.oversized(ids).await,
            Err(BodyError::Http(e)) => {
                let reason = format!("reading the response failed: {}", error_chain(&e));
                shared.fail(&ids, &reason).await;
            }
            Err(BodyError::NotUtf8) => shared.fail(&ids, "the response is not UTF-8").await,
        },
        BodyKind::EventStream => {
            read_stream(shared, EventStream::new(resp, shared.limit), ids).await
        }
        // 202 to a request: the answer may come on the GET stream.
        BodyKind::Empty => {
            if !ids.is_empty() {
                debug!("request answered {} with no body", "2xx");
            }
        }
        BodyKind::Other(ct) => {
            let reason = format!(
                "the server answered with Content-Type {ct:?}, which is neither JSON nor an event stream"
            );
            shared.fail(&ids, &reason).await;
        }
    }
}

/// A JSON answer is the whole answer: a request it does not answer never
/// will be, so fail it now, not at its timeout.
pub(super) async fn deliver_json(shared: &Arc<Shared>, text: String, ids: Vec<Id>) {
    let on = post_stream(&ids);
    let answered = response_ids(&text);
    let missed: Vec<Id> = ids
        .into_iter()
        .filter(|id| !answered.iter().any(|a| same_id(a, id)))
        .collect();
    if missed.is_empty() {
        return deliver(shared, text, on).await;
    }
    let reason = if serde_json::from_str::<serde::de::IgnoredAny>(&text).is_err() {
        format!(
            "the server's JSON answer is not valid JSON: {:?}",
            super::snippet(&text)
        )
    } else {
        format!(
            "the server's JSON answer holds no response to this request: {:?}",
            super::snippet(&text)
        )
    };
    if !text.trim().is_empty() {
        deliver(shared, text, on).await;
    }
    shared.fail(&missed, &reason).await;
}

/// Hand a frame to the peer, noting the negotiated revision on the way;
/// `on` is the stream it came on, which ties server requests to our calls.
async fn deliver(shared: &Arc<Shared>, data: String, on: Option<Stream>) {
    note_version(shared, &data);
    shared
        .emit(match on {
            Some(stream) => TransportEvent::FrameOn(data, stream),
            None => TransportEvent::Frame(data),
        })
        .await;
}

/// The stream of the POST that carried these requests (one per POST).
fn post_stream(ids: &[Id]) -> Option<Stream> {
    ids.first().cloned().map(Stream::Request)
}

fn note_version(shared: &Shared, data: &str) {
    let mut st = shared.state();
    if st.version.is_some() {
        return;
    }
    let Some((init_id, _)) = &st.init else { return };
    if let Some(v) = answered_version(data, init_id) {
        st.version = Some(v);
    }
}

/// The revision in an answer to the `initialize` with this id.
pub(super) fn answered_version(data: &str, init_id: &Id) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct InitResponse {
        id: Id,
        result: InitResult,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct InitResult {
        protocol_version: String,
    }
    serde_json::from_str::<InitResponse>(data)
        .ok()
        .filter(|r| same_id(&r.id, init_id))
        .map(|r| r.result.protocol_version)
}

/// Read a POST's event stream until every request it carried is answered,
/// resuming by GET with `Last-Event-ID` when it breaks.
async fn read_stream(shared: &Arc<Shared>, mut stream: EventStream, mut pending: Vec<Id>) {
    // Resumptions in a row that made no progress. A new event id is
    // progress (a server may close each stream after a priming event to
    // make us poll): the request's own deadline (the peer cancels it, which
    // ends this task) is the limit then, not a count.
    let mut attempts = 0u32;
    let mut seen = stream.last_id.clone();
    let on = post_stream(&pending);
    loop {
        while let Some(ev) = stream.next().await {
            if stream.last_id != seen {
                seen = stream.last_id.clone();
                attempts = 0;
            }
            match ev {
                Ok(Event::Message(data)) => {
                    attempts = 0;
                    let answered = response_ids(&data);
                    pending.retain(|p| !answered.iter().any(|a| same_id(a, p)));
                    deliver(shared, data, on.clone()).await;
                    if pending.is_empty() {
                        return drain(shared, stream, on).await;
                    }
                }
                Ok(_) => {}
                Err(SseError::Oversized { .. }) => {
                    return shared.oversized(pending).await;
                }
                Err(e @ SseError::Stream(_)) => {
                    debug!("response stream broke: {e}");
                    break;
                }
            }
        }
        if pending.is_empty() {
            return;
        }
        // A disconnect is not a cancellation: resume where the stream was.
        let Some(last) = stream.last_id.clone() else {
            let reason = "the server closed the response stream before answering, and gave no event id to resume from";
            return shared.fail(&pending, reason).await;
        };
        if attempts >= MAX_RESUME_ATTEMPTS {
            let reason = format!(
                "the response stream broke and {MAX_RESUME_ATTEMPTS} attempts to resume it (GET with Last-Event-ID {last:?}) delivered nothing"
            );
            return shared.fail(&pending, &reason).await;
        }
        attempts += 1;
        let retry = stream.retry.unwrap_or(DEFAULT_RETRY);
        tokio::time::sleep(retry).await;
        debug!(last_event_id = %last, ?retry, "resuming the response stream");
        match get(shared, Some(&last)).await {
            Ok(resp) if resp.status().is_success() && body_kind(&resp) == BodyKind::EventStream => {
                stream = EventStream::new(resp, shared.limit);
                stream.last_id = Some(last);
                stream.retry = Some(retry);
            }
            Ok(resp) if is_auth_status(resp.status()) => return shared.auth_failed(resp).await,
            Ok(resp) if resp.status().is_client_error() => {
                let e = shared.status_error(resp).await;
                let reason =
                    format!("the response stream broke and the server refused to resume it: {e}");
                return shared.fail(&pending, &reason).await;
            }
            Ok(resp) => {
                let e = shared.status_error(resp).await;
                debug!("resuming failed: {e}");
                stream.last_id = Some(last);
            }
            Err(e) => {
                debug!("resuming failed: {}", error_chain(&e));
                stream.last_id = Some(last);
            }
        }
    }
}

/// Read an answered stream to its end, which servers reach right after the
/// response: a connection whose body was not read to the end cannot go back
/// to the pool, and the next request would pay for a new one. Anything
/// still sent is delivered; a server that keeps the stream open is left.
pub(super) async fn drain(shared: &Arc<Shared>, mut stream: EventStream, on: Option<Stream>) {
    let rest = async {
        while let Some(Ok(ev)) = stream.next().await {
            if let Event::Message(data) = ev {
                deliver(shared, data, on.clone()).await;
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_LIMIT, rest).await;
}

async fn get(
    shared: &Shared,
    last_event_id: Option<&str>,
) -> Result<reqwest::Response, reqwest::Error> {
    let mut req = with_session(
        shared,
        shared
            .http
            .get(shared.url.clone())
            .header(ACCEPT, "text/event-stream"),
    );
    if let Some(id) = last_event_id {
        req = req.header(LAST_EVENT_ID, id);
    }
    shared.send(req).await
}

/// The session expired (see [`judge`]): initialize again without it,
/// within the init timeout, then let the caller retry its request once.
async fn renew_session(shared: &Arc<Shared>, stale: &str) -> Result<(), String> {
    let _one_at_a_time = shared.reinit.lock().await;
    if shared.session().as_deref() != Some(stale) {
        return Ok(()); // another request already renewed it
    }
    let Some((id, body)) = shared.state().init.clone() else {
        return Err("the session expired before initialize was sent".to_owned());
    };
    info!("the session expired; initializing a new one");
    {
        let mut st = shared.state();
        st.session = None;
        st.accepted = None;
        if let Some(h) = st.get_stream.take() {
            h.abort();
        }
    }
    let expired = |e: String| format!("the session expired and initializing a new one failed: {e}");
    let answer = tokio::time::timeout(shared.init_timeout, reinitialize(shared, &id, &body))
        .await
        .ok()
        .unwrap_or_else(|| {
            Err(format!(
                "no answer within {:?} (the init timeout)",
                shared.init_timeout
            ))
        })
        .map_err(expired)?;
    shared.renewed.send_replace(Some(answer.into()));
    // The new session knows nothing of our subscriptions or log level.
    let replay = shared.state().replay.clone();
    for (what, id, text) in replay {
        let outcome = match shared
            .send(build_post(shared, &text, Headers::Session))
            .await
        {
            Ok(r) if r.status().is_success() => {
                if swallow_answer(shared, r, &id).await.is_some() {
                    "restored".to_owned()
                } else {
                    "sent, but not answered".to_owned()
                }
            }
            Ok(r) => shared.status_error(r).await,
            Err(e) => error_chain(&e),
        };
        debug!("renewed session: {what}: {outcome}");
    }
    // Not awaited: the request being retried goes first.
    drop(start_get_stream(shared));
    Ok(())
}

/// Send our `initialize` again, then `initialized`; the server's answer.
async fn reinitialize(shared: &Arc<Shared>, id: &Id, body: &str) -> Result<String, String> {
    let resp = shared
        .send(build_post(shared, body, Headers::Fresh))
        .await
        .map_err(|e| error_chain(&e))?;
    if !resp.status().is_success() {
        return Err(shared.status_error(resp).await);
    }
    capture_session(shared, resp.headers());
    // Our `initialize` answered already; this answer is for the client to
    // take up, not a response to deliver.
    let answer = swallow_answer(shared, resp, id)
        .await
        .ok_or_else(|| "the server did not answer the new initialize".to_owned())?;
    // `initialized` already belongs to the new session: a redeployed server
    // may refuse the old revision's header.
    if let Some(v) = answered_version(&answer, id) {
        shared.state().version = Some(v);
    }
    let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    match shared
        .send(build_post(shared, note, Headers::Session))
        .await
    {
        Ok(r) if r.status().is_success() => Ok(answer),
        Ok(r) => Err(shared.status_error(r).await),
        Err(e) => Err(error_chain(&e)),
    }
}

/// Read the answer to a request we sent on our own, without delivering it:
/// the frame holding the response to `id`.
async fn swallow_answer(shared: &Shared, resp: reqwest::Response, id: &Id) -> Option<String> {
    let answers = |data: &str| response_ids(data).iter().any(|a| same_id(a, id));
    match body_kind(&resp) {
        BodyKind::Json => read_limited(resp, shared.limit)
            .await
            .ok()
            .filter(|t| answers(t)),
        BodyKind::EventStream => {
            let mut s = EventStream::new(resp, shared.limit);
            let found = async {
                while let Some(Ok(ev)) = s.next().await {
                    if let Event::Message(data) = ev
                        && answers(&data)
                    {
                        return Some(data);
                    }
                }
                None
            };
            tokio::time::timeout(shared.send_timeout, found)
                .await
                .ok()
                .flatten()
        }
        _ => None,
    }
}

/// Open the optional GET stream for messages unrelated to our requests.
/// Any 4xx means the server offers none: said once, never retried.
/// The receiver resolves once the first GET has an answer, whatever it is.
fn start_get_stream(shared: &Arc<Shared>) -> tokio::sync::oneshot::Receiver<()> {
    let (opened_tx, opened) = tokio::sync::oneshot::channel();
    if shared.kind.load(Ordering::SeqCst) != KIND_STREAMABLE {
        return opened;
    }
    let task = shared.clone();
    let handle = shared.tasks.spawn({
        let stop = shared.stop.clone();
        let span = shared.span.clone();
        tracing::Instrument::instrument(
            async move {
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = get_stream(&task, opened_tx) => {}
                }
            },
            span,
        )
    });
    if let Some(old) = shared.state().get_stream.replace(handle.abort_handle()) {
        old.abort();
    }
    opened
}

async fn get_stream(shared: &Arc<Shared>, opened: tokio::sync::oneshot::Sender<()>) {
    let mut opened = Some(opened);
    let mut last: Option<String> = None;
    let mut retry = DEFAULT_RETRY;
    let mut failures = 0u32;
    loop {
        let resp = get(shared, last.as_deref()).await;
        if let Some(tx) = opened.take() {
            let _ = tx.send(());
        }
        match resp {
            Ok(resp) if resp.status().is_success() && body_kind(&resp) == BodyKind::EventStream => {
                if failures > 0 || last.is_some() {
                    debug!("standalone stream reopened");
                }
                let mut s = EventStream::new(resp, shared.limit);
                s.last_id = last.clone();
                let mut delivered = false;
                while let Some(ev) = s.next().await {
                    match ev {
                        Ok(Event::Message(data)) => {
                            delivered = true;
                            deliver(shared, data, Some(Stream::Standalone)).await;
                        }
                        Ok(_) => {}
                        Err(SseError::Oversized { limit }) => {
                            shared
                                .emit(TransportEvent::Oversized { limit, id: None })
                                .await;
                            break;
                        }
                        Err(e) => {
                            debug!("standalone stream broke: {e}");
                            break;
                        }
                    }
                }
                last = s.last_id.clone();
                retry = s.retry.unwrap_or(retry);
                failures = if delivered { 0 } else { failures + 1 };
            }
            Ok(resp) if resp.status().is_client_error() => {
                info!(
                    "no standalone event stream (GET answered HTTP {}); server messages arrive on responses only",
                    resp.status()
                );
                return;
            }
            Ok(resp) => {
                failures += 1;
                let e = shared.status_error(resp).await;
                if failures == 1 {
                    warn!("standalone event stream: {e}; retrying with backoff");
                }
            }
            Err(e) => {
                failures += 1;
                if failures == 1 {
                    warn!(
                        "standalone event stream: {}; retrying with backoff",
                        error_chain(&e)
                    );
                }
            }
        }
        // The server's `retry` is a floor; repeated failures back off.
        let backoff = retry.saturating_mul(2u32.saturating_pow(failures.min(5)));
        tokio::time::sleep(backoff.min(Duration::from_secs(30)).max(retry)).await;
    }
}

/// DELETE the session on shutdown; 405 means the server keeps it.
pub(super) async fn end_session(shared: &Arc<Shared>) {
    if shared.session().is_none() {
        return;
    }
    let req = with_session(shared, shared.http.delete(shared.url.clone()));
    match tokio::time::timeout(
        shared.send_timeout.min(Duration::from_secs(5)),
        shared.send(req),
    )
    .await
    {
        Ok(Ok(r)) if r.status().is_success() || r.status() == StatusCode::METHOD_NOT_ALLOWED => {
            debug!("session ended (HTTP {})", r.status());
        }
        Ok(Ok(r)) => debug!("DELETE of the session answered HTTP {}", r.status()),
        Ok(Err(e)) => debug!("DELETE of the session failed: {}", error_chain(&e)),
        Err(_) => debug!("DELETE of the session timed out"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> [Id; 1] {
        [Id::number(7)]
    }

    fn verdict(status: u16, body: &str, established: bool) -> Verdict {
        let status = StatusCode::from_u16(status).unwrap();
        judge(status, body, true, established, &me())
    }

    #[test]
    fn lost_sessions_and_answers() {
        // The spec's 404, as the TypeScript and Python SDKs send it.
        let ts =
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}"#;
        let py = r#"{"jsonrpc":"2.0","id":"server-error","error":{"code":-32600,"message":"Not Found"}}"#;
        for body in [ts, py, "Not Found", ""] {
            assert_eq!(verdict(404, body, true), Verdict::SessionLost, "{body}");
        }
        // A 404 without our session id is just an error.
        let s = StatusCode::NOT_FOUND;
        assert_eq!(judge(s, "Not Found", false, false, &me()), Verdict::Error);
        // A 404 that answers the request is that answer.
        let mnf =
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"Method not found"}}"#;
        assert_eq!(verdict(404, mnf, true), Verdict::Answer);
        // server-everything's 400, on an established session only.
        let ev = r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":7}"#;
        assert_eq!(verdict(400, ev, true), Verdict::SessionLost);
        // Before that, it is the server's answer, kept whole.
        assert_eq!(verdict(400, ev, false), Verdict::Answer);
        // A server's own error code in a 500 is its answer too, not a string.
        let own = r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32050,"message":"busy","data":{"retry":12345678901234567890}}}"#;
        assert_eq!(verdict(500, own, true), Verdict::Answer);
        assert_eq!(verdict(503, own, false), Verdict::Answer);
        // A 400 that mentions a session is not a lost one.
        let arg =
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"bad session_name"}}"#;
        assert_eq!(verdict(400, arg, true), Verdict::Answer);
        assert_eq!(verdict(400, "invalid session header", true), Verdict::Error);
        // Without "jsonrpc":"2.0" it is no answer: the peer would drop it
        // as noise and the call would wait out its timeout.
        let bare = r#"{"id":7,"error":{"code":-32602,"message":"x"}}"#;
        assert_eq!(verdict(400, bare, true), Verdict::Error);
        assert_eq!(verdict(500, bare, false), Verdict::Error);
        // Another request's answer is not ours.
        let other = r#"{"jsonrpc":"2.0","id":8,"error":{"code":-32602,"message":"x"}}"#;
        assert_eq!(verdict(500, other, true), Verdict::Error);
        assert_eq!(
            verdict(500, &other.replace("8", "7"), true),
            Verdict::Answer
        );
    }
}
