//! The stateless 2026-07-28 revision: per-request `_meta` checks, `server/discover`,
//! `resultType` and caching hints on results, multi-round-trip requests
//! (`input_required` instead of server→client requests) and `subscriptions/listen`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::{
    Handled, INSTRUCTIONS, INVALID_PARAMS, METHOD_NOT_FOUND, Outcome, RESOURCE_NOT_FOUND,
    SUPPORTED_VERSIONS, Server, id_key, invalid_params, ok, ok_raw, text_result,
};
use crate::cli::{Era, StatelessFault};
use crate::output::{Payload, Reply, RpcError, notification};

pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

pub const HEADER_MISMATCH: i64 = -32020;
pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// Methods only the stateless era has (with --era both they select it even without `_meta`).
const STATELESS_ONLY: &[&str] = &["server/discover", "subscriptions/listen"];
/// Methods 2026-07-28 removed.
const REMOVED: &[&str] = &[
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];
/// Results that carry `ttlMs` and `cacheScope`.
const CACHEABLE: &[&str] = &[
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];
/// The methods whose `Mcp-Name` header a mismatch would be about.
const NAMED: &[&str] = &["tools/call", "resources/read", "prompts/get"];
/// Tools that need the client (sampling, elicitation, roots, ...): multi-round-trip.
const MRTR_TOOLS: &[&str] = &["sample", "elicit", "roots", "ask", "url_elicit"];

/// Whether a request is a stateless one (for --era both).
pub fn is_stateless(method: &str, params: &Value) -> bool {
    STATELESS_ONLY.contains(&method) || protocol_version(params).is_some()
}

fn protocol_version(params: &Value) -> Option<&str> {
    params.get("_meta")?.get(META_PROTOCOL_VERSION)?.as_str()
}

/// One open `subscriptions/listen` stream: what it was granted.
#[derive(Debug, Clone)]
pub struct Listen {
    /// The listen request's id as it appears on the wire (the subscription id).
    wire_id: Value,
    tools: bool,
    prompts: bool,
    resources: bool,
}

fn tagged(method: &str, sub: &Value, mut params: Map<String, Value>) -> String {
    params.insert("_meta".into(), json!({ META_SUBSCRIPTION_ID: sub }));
    notification(method, Value::Object(params))
}

fn server_info() -> Value {
    json!({"name": "mcphost-testserver", "version": env!("CARGO_PKG_VERSION")})
}

/// Inserts raw members `fields` (`"k":v,...`, no trailing comma) first into the
/// raw JSON object `raw`, leaving the rest byte for byte.
fn splice_front(raw: &str, fields: &str) -> String {
    let body = raw.trim_start().strip_prefix('{').unwrap_or(raw);
    let sep = if body.trim_start().starts_with('}') {
        ""
    } else {
        ","
    };
    format!("{{{fields}{sep}{body}")
}

// ---------------------------------------------------------------- requestState

/// Binds requestState to us (not secret: this is a test server; the MAC makes
/// an altered or foreign state detectable).
const STATE_KEY: &[u8] = b"mcphost-testserver requestState v1";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StateKind {
    /// --stateless-fault state-only: nothing asked yet.
    Shed,
    /// `inputRequests` were sent in round `round`.
    Asked,
}

#[derive(Debug, PartialEq, Eq)]
struct RequestState {
    kind: StateKind,
    round: u64,
    digest: String,
    tool: String,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn mac(payload: &str) -> String {
    let mut h = Sha256::new();
    h.update(STATE_KEY);
    h.update(payload.as_bytes());
    hex(&h.finalize()[..16])
}

/// Digest of the arguments a state is bound to.
fn args_digest(args: Option<&Value>) -> String {
    let text = args.map_or_else(|| "null".to_owned(), Value::to_string);
    hex(&Sha256::digest(text.as_bytes())[..8])
}

fn encode_state(tool: &str, args: Option<&Value>, round: u64, kind: StateKind) -> String {
    let k = match kind {
        StateKind::Shed => "shed",
        StateKind::Asked => "asked",
    };
    let payload = format!("{k}|{round}|{}|{tool}", args_digest(args));
    format!("ts1.{}.{}", hex(payload.as_bytes()), mac(&payload))
}

fn decode_state(s: &str) -> Option<RequestState> {
    let mut parts = s.split('.');
    let (Some("ts1"), Some(p), Some(m), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let payload = String::from_utf8(unhex(p)?).ok()?;
    if mac(&payload) != m {
        return None;
    }
    let mut f = payload.splitn(4, '|');
    let kind = match f.next()? {
        "shed" => StateKind::Shed,
        "asked" => StateKind::Asked,
        _ => return None,
    };
    let round = f.next()?.parse().ok()?;
    let digest = f.next()?.to_owned();
    let tool = f.next()?.to_owned();
    Some(RequestState {
        kind,
        round,
        digest,
        tool,
    })
}

/// The raw `InputRequiredResult` (with serverInfo; never caching hints).
fn input_required(input_requests: Option<String>, state: &str) -> Handled {
    let mut s = format!(
        r#"{{"resultType":"input_required","_meta":{},"#,
        json!({ META_SERVER_INFO: server_info() })
    );
    if let Some(r) = input_requests {
        s.push_str(r#""inputRequests":"#);
        s.push_str(&r);
        s.push(',');
    }
    s.push_str(r#""requestState":"#);
    s.push_str(&Value::String(state.to_owned()).to_string());
    s.push('}');
    ok_raw(s)
}

/// The client capability an input request needs and `caps` lacks, as
/// `requiredCapabilities`.
fn missing_capability(caps: &Map<String, Value>, method: &str, params: &Value) -> Option<Value> {
    match method {
        "sampling/createMessage" if !caps.contains_key("sampling") => Some(json!({"sampling": {}})),
        "roots/list" if !caps.contains_key("roots") => Some(json!({"roots": {}})),
        "elicitation/create" => {
            let url = params.get("mode").and_then(Value::as_str) == Some("url");
            match caps.get("elicitation") {
                None => Some(if url {
                    json!({"elicitation": {"url": {}}})
                } else {
                    json!({"elicitation": {}})
                }),
                Some(e) if url && e.get("url").is_none() => {
                    Some(json!({"elicitation": {"url": {}}}))
                }
                // `{}` means form mode only; an explicit set without `form` lacks it.
                Some(Value::Object(e)) if !url && !e.is_empty() && !e.contains_key("form") => {
                    Some(json!({"elicitation": {"form": {}}}))
                }
                Some(_) => None,
            }
        }
        _ => None,
    }
}

impl Server {
    /// The versions listed in `server/discover` and -32022 errors.
    fn supported_versions(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .cfg
            .stateless_versions
            .iter()
            .map(|s| s.trim().to_owned())
            .collect();
        if self.cfg.era == Era::Both {
            v.extend(SUPPORTED_VERSIONS.iter().rev().map(|s| (*s).to_owned()));
        }
        v
    }

    fn unsupported_version(&self, requested: Option<&str>, why: &str) -> RpcError {
        let supported = self.supported_versions();
        RpcError::new(
            UNSUPPORTED_PROTOCOL_VERSION,
            format!(
                "Unsupported protocol version{}: this server supports {}{why}",
                requested.map_or_else(String::new, |r| format!(" {r}")),
                supported.join(", ")
            ),
        )
        .with_data(json!({"supported": supported, "requested": requested}))
    }

    /// `resultType`, serverInfo and (for cacheable methods) caching hints on a
    /// successful result; errors pass through.
    pub(super) fn decorate(&self, handled: Handled, method: &str) -> Handled {
        let mut fields = format!(
            r#""resultType":"complete","_meta":{}"#,
            json!({ META_SERVER_INFO: server_info() })
        );
        if CACHEABLE.contains(&method) {
            fields.push_str(&format!(
                r#","ttlMs":{},"cacheScope":"{}""#,
                self.cfg.ttl_ms,
                self.cfg.cache_scope.as_str()
            ));
        }
        handled.map(|o| Outcome {
            payload: match o.payload {
                Payload::Result(raw) => Payload::Result(splice_front(&raw, &fields)),
                Payload::Huge(n, _) => Payload::Huge(n, format!("{fields},")),
                e @ Payload::Error(_) => e,
            },
            follow: o.follow,
        })
    }

    /// A request of the stateless era: `_meta` checked on every request, no session.
    pub(super) fn on_stateless_request(
        self: &Arc<Self>,
        id: Value,
        wire_id: Value,
        method: &str,
        params: Value,
        batch: Option<&mut Vec<Reply>>,
    ) {
        match self.check_stateless(method, &params) {
            Ok(()) => {}
            Err(e) => return self.deliver(Reply::error(wire_id, e), batch),
        }
        self.start_chatter();
        if let Err(err) = self.check_capability(method) {
            return self.deliver(Reply::error(wire_id, err), batch);
        }
        let handled = match method {
            "server/discover" => self.decorate(
                ok(json!({
                    "supportedVersions": self.supported_versions(),
                    "capabilities": self.server_capabilities(),
                    "instructions": INSTRUCTIONS,
                })),
                method,
            ),
            m if REMOVED.contains(&m) => Err(RpcError::new(
                METHOD_NOT_FOUND,
                format!("Method not found: {m} (not part of 2026-07-28)"),
            )),
            "subscriptions/listen" => return self.listen(&id, wire_id, &params, batch),
            "tools/call" => return self.stateless_call(id, wire_id, params, batch),
            "resources/read" => {
                // 2026-07-28 replaced -32002 with -32602.
                let h = self.read_resource(&params).map_err(|mut e| {
                    if e.code == RESOURCE_NOT_FOUND {
                        e.code = INVALID_PARAMS;
                    }
                    e
                });
                self.decorate(h, method)
            }
            _ => {
                let h = self.handle(method, &params);
                self.decorate(h, method)
            }
        };
        self.deliver(Reply::from_handled(wire_id, handled), batch);
    }

    /// The checks every stateless request passes before it is served.
    fn check_stateless(&self, method: &str, params: &Value) -> Result<(), RpcError> {
        if method == "initialize" {
            // A stateless-only server names what it speaks (versioning: backward compatibility).
            let requested = params.get("protocolVersion").and_then(Value::as_str);
            return Err(self.unsupported_version(
                requested,
                " (2026-07-28 has no initialize: send server/discover or requests with _meta)",
            ));
        }
        let meta = params.get("_meta");
        let version = meta
            .and_then(|m| m.get(META_PROTOCOL_VERSION))
            .and_then(Value::as_str);
        let caps = meta.and_then(|m| m.get(META_CLIENT_CAPABILITIES));
        let mut missing = Vec::new();
        if version.is_none() {
            missing.push(META_PROTOCOL_VERSION);
        }
        if !caps.is_some_and(Value::is_object) {
            missing.push(META_CLIENT_CAPABILITIES);
        }
        if !missing.is_empty() {
            return Err(invalid_params(format!(
                "Invalid params: {method} lacks the required _meta field(s) {}",
                missing.join(", ")
            ))
            .with_data(json!({"missing": missing, "supported": self.supported_versions()})));
        }
        let version = version.unwrap_or_default();
        if self.cfg.fault(StatelessFault::UnsupportedVersionAlways) {
            return Err(self.unsupported_version(
                Some(version),
                " (--stateless-fault unsupported-version-always)",
            ));
        }
        if self.cfg.fault(StatelessFault::UnsupportedVersion)
            && !self.version_refused.swap(true, Ordering::SeqCst)
        {
            return Err(
                self.unsupported_version(Some(version), " (--stateless-fault unsupported-version)")
            );
        }
        if !self
            .cfg
            .stateless_versions
            .iter()
            .any(|v| v.trim() == version)
        {
            return Err(self.unsupported_version(Some(version), ""));
        }
        if self.cfg.fault(StatelessFault::HeaderMismatchOnce)
            && NAMED.contains(&method)
            && !self.mismatch_sent.swap(true, Ordering::SeqCst)
        {
            let name = params
                .get(if method == "resources/read" {
                    "uri"
                } else {
                    "name"
                })
                .and_then(Value::as_str)
                .unwrap_or_default();
            return Err(RpcError::new(
                HEADER_MISMATCH,
                format!(
                    "Header mismatch: Mcp-Name header value does not match body value '{name}' \
                     (simulated on stdio by --stateless-fault header-mismatch-once)"
                ),
            ));
        }
        Ok(())
    }

    /// `tools/call` in the stateless era.
    fn stateless_call(
        self: &Arc<Self>,
        id: Value,
        wire_id: Value,
        params: Value,
        batch: Option<&mut Vec<Reply>>,
    ) {
        let handled = self.stateless_call_inner(&id, &wire_id, &params);
        if let Some(h) = handled {
            self.deliver(Reply::from_handled(wire_id, h), batch);
        }
    }

    /// `None` when the call went to its own thread (`slow`).
    fn stateless_call_inner(
        self: &Arc<Self>,
        id: &Value,
        wire_id: &Value,
        params: &Value,
    ) -> Option<Handled> {
        let name = match params.get("name").and_then(Value::as_str) {
            Some(n) => n,
            None => return Some(Err(invalid_params("missing or non-string `name`"))),
        };
        let args = params.get("arguments");
        let state = match params.get("requestState") {
            None => None,
            Some(Value::String(s)) => match decode_state(s) {
                Some(st) if st.tool == name && st.digest == args_digest(args) => Some(st),
                Some(st) => {
                    return Some(Err(invalid_params(format!(
                        "Invalid params: this requestState was issued for another request \
                         (tools/call {} with other arguments), not for tools/call {name}",
                        st.tool
                    ))));
                }
                None => {
                    return Some(Err(invalid_params(
                        "Invalid params: requestState failed verification \
                         (not issued by this server, or altered)",
                    )));
                }
            },
            Some(other) => {
                return Some(Err(invalid_params(format!(
                    "Invalid params: requestState must be a string, got {other}"
                ))));
            }
        };
        if state.is_none() && self.cfg.fault(StatelessFault::StateOnly) {
            log!("tools/call {name}: requestState only (--stateless-fault state-only)");
            return Some(input_required(
                None,
                &encode_state(name, args, 0, StateKind::Shed),
            ));
        }
        let asked = state.filter(|s| s.kind == StateKind::Asked);
        let host_tool = name == "ask" || name == "url_elicit";
        if MRTR_TOOLS.contains(&name) && (!host_tool || self.cfg.host_tools) {
            return Some(self.mrtr(name, params, asked.as_ref()));
        }
        let h = match name {
            "slow" => {
                self.spawn_blocking(id.clone(), wire_id.clone(), params.clone(), true);
                return None;
            }
            "later" | "url_required" if self.cfg.host_tools => text_result(
                &format!(
                    "{name}: not available in 2026-07-28 (a server must not send requests, \
                     and -32042 is gone)"
                ),
                true,
            ),
            _ => self.call_tool(params),
        };
        Some(self.decorate(h, "tools/call"))
    }

    /// The input request a client-needing tool makes: (key, method, raw params).
    fn input_request(name: &str, args: Option<&Value>) -> (&'static str, String, Option<String>) {
        let arg = |k: &str| args.and_then(|a| a.get(k));
        let s = |k: &str, d: &'static str| arg(k).and_then(Value::as_str).unwrap_or(d).to_owned();
        match name {
            "sample" => {
                let req = json!({
                    "messages": [{"role": "user", "content": {"type": "text", "text": s("prompt", "Say hello.")}}],
                    "systemPrompt": "You are being called by mcphost-testserver.",
                    "maxTokens": arg("maxTokens").and_then(Value::as_u64).unwrap_or(100)
                });
                (
                    "sampling",
                    "sampling/createMessage".into(),
                    Some(req.to_string()),
                )
            }
            "elicit" | "url_elicit" => {
                let message = if name == "elicit" {
                    s("message", "Please provide your name.")
                } else {
                    s("message", "Please open this page.")
                };
                let url_mode =
                    name == "url_elicit" || arg("mode").and_then(Value::as_str) == Some("url");
                // As the handshake mode's, minus `elicitationId` (gone in 2026-07-28).
                let req = if url_mode {
                    json!({"mode": "url", "message": message, "url": s("url", "https://example.com/authorize")})
                } else {
                    let schema = arg("requestedSchema").cloned().unwrap_or_else(|| {
                        json!({
                            "type": "object",
                            "properties": {"name": {"type": "string", "description": "Your name"}},
                            "required": ["name"]
                        })
                    });
                    json!({"message": message, "requestedSchema": schema})
                };
                (
                    "elicitation",
                    "elicitation/create".into(),
                    Some(req.to_string()),
                )
            }
            "roots" => ("roots", "roots/list".into(), None),
            // `ask`: any method, its params sent verbatim.
            _ => (
                "ask",
                s("method", "ping"),
                arg("params").and_then(Value::as_str).map(str::to_owned),
            ),
        }
    }

    /// A multi-round-trip tool: asks with `input_required`, completes once the
    /// retry carries the answer and a valid requestState.
    fn mrtr(&self, name: &str, params: &Value, asked: Option<&RequestState>) -> Handled {
        let args = params.get("arguments");
        let (key, method, req_params) = Self::input_request(name, args);
        let caps = params
            .pointer("/_meta/io.modelcontextprotocol~1clientCapabilities")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let parsed = req_params
            .as_deref()
            .and_then(|p| serde_json::from_str::<Value>(p).ok())
            .unwrap_or(Value::Null);
        if let Some(required) = missing_capability(&caps, &method, &parsed) {
            let what = match required.pointer("/elicitation").and_then(Value::as_object) {
                Some(e) if e.contains_key("url") => "elicitation.url",
                Some(e) if e.contains_key("form") => "elicitation.form",
                Some(_) => "elicitation",
                None => required
                    .as_object()
                    .and_then(|o| o.keys().next())
                    .map_or("?", String::as_str),
            };
            return Err(RpcError::new(
                MISSING_REQUIRED_CLIENT_CAPABILITY,
                format!(
                    "Server requires the {what} client capability for this request \
                     (tool {name} asks {method})"
                ),
            )
            .with_data(json!({"requiredCapabilities": required})));
        }
        let responses = params.get("inputResponses");
        match (asked, responses) {
            (None, Some(_)) => {
                return Err(invalid_params(
                    "Invalid params: inputResponses without the requestState of the \
                     input_required result (echo it exactly)",
                ));
            }
            (Some(_), Some(r)) if !r.is_object() => {
                return Err(invalid_params(format!(
                    "Invalid params: inputResponses must be an object, got {r}"
                )));
            }
            (Some(st), Some(Value::Object(r))) => match r.get(key) {
                Some(v) if !v.is_object() => {
                    return Err(invalid_params(format!(
                        "Invalid params: inputResponses.{key} must be a result object, got {v}"
                    )));
                }
                Some(v) if !self.cfg.fault(StatelessFault::InputRequiredForever) => {
                    log!("tools/call {name}: completed in round {}", st.round);
                    return self.decorate(text_result(&v.to_string(), false), "tools/call");
                }
                Some(_) => log!(
                    "tools/call {name}: asking again (round {}; --stateless-fault input-required-forever)",
                    st.round + 1
                ),
                None => log!("tools/call {name}: inputResponses lacks `{key}`; asking again"),
            },
            _ => {}
        }
        let round = asked.map_or(0, |s| s.round).saturating_add(1);
        let method_json = Value::String(method).to_string();
        let request = match req_params {
            Some(p) => format!(r#"{{"{key}":{{"method":{method_json},"params":{p}}}}}"#),
            None => format!(r#"{{"{key}":{{"method":{method_json}}}}}"#),
        };
        input_required(
            Some(request),
            &encode_state(name, args, round, StateKind::Asked),
        )
    }

    /// `subscriptions/listen`: acknowledges what it grants, then (from the
    /// list-changed timer) sends tagged notifications until cancelled.
    fn listen(
        self: &Arc<Self>,
        id: &Value,
        wire_id: Value,
        params: &Value,
        batch: Option<&mut Vec<Reply>>,
    ) {
        let Some(filter) = params.get("notifications").and_then(Value::as_object) else {
            let err = invalid_params(
                "Invalid params: subscriptions/listen needs a `notifications` filter object",
            );
            return self.deliver(Reply::error(wire_id, err), batch);
        };
        let caps = self.cfg.capabilities;
        let wants = |k: &str| filter.get(k).and_then(Value::as_bool) == Some(true);
        let listen = Listen {
            wire_id: wire_id.clone(),
            tools: caps.tools && wants("toolsListChanged"),
            prompts: caps.prompts && wants("promptsListChanged"),
            resources: caps.resources && wants("resourcesListChanged"),
        };
        let uris: Option<Vec<String>> = (caps.resources && caps.subscribe)
            .then(|| {
                filter
                    .get("resourceSubscriptions")
                    .and_then(Value::as_array)
            })
            .flatten()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            });
        let mut granted = Map::new();
        for (on, k) in [
            (listen.tools, "toolsListChanged"),
            (listen.prompts, "promptsListChanged"),
            (listen.resources, "resourcesListChanged"),
        ] {
            if on {
                granted.insert(k.into(), Value::Bool(true));
            }
        }
        if let Some(u) = &uris {
            granted.insert("resourceSubscriptions".into(), json!(u));
        }
        let mut ack = Map::new();
        ack.insert("notifications".into(), Value::Object(granted));
        let mut lines = vec![tagged(
            "notifications/subscriptions/acknowledged",
            &wire_id,
            ack,
        )];
        let updated = |uri: &str| {
            let mut p = Map::new();
            p.insert("uri".into(), json!(uri));
            tagged("notifications/resources/updated", &wire_id, p)
        };
        let uris = uris.unwrap_or_default();
        let drops = self.cfg.fault(StatelessFault::ListenDrops);
        if drops || self.cfg.fault(StatelessFault::ListenCloses) {
            // Exactly one notification after the acknowledgement, then the end.
            let one = uris
                .first()
                .map(|u| updated(u))
                .or_else(|| listen.list_changed().into_iter().next());
            lines.extend(one);
            log!(
                "subscriptions/listen {wire_id}: ending after one notification (--stateless-fault)"
            );
            if drops {
                lines.push(notification(
                    "notifications/cancelled",
                    json!({"requestId": wire_id, "reason": "subscription dropped (--stateless-fault listen-drops)"}),
                ));
                return self.send_notifications(&lines);
            }
            self.send_notifications(&lines);
            let result = format!(
                r#"{{"resultType":"complete","_meta":{}}}"#,
                json!({ META_SUBSCRIPTION_ID: wire_id, META_SERVER_INFO: server_info() })
            );
            return self.deliver(
                Reply {
                    id: wire_id,
                    payload: Payload::Result(result),
                    follow: Vec::new(),
                },
                batch,
            );
        }
        lines.extend(uris.iter().map(|u| updated(u)));
        log!("subscriptions/listen {wire_id} open");
        self.listens.lock().insert(id_key(id), listen);
        self.send_notifications(&lines);
        self.start_list_changed();
    }

    /// Tagged list_changed notifications for every open listen (one timer round).
    pub(super) fn listen_list_changed(&self) -> Vec<String> {
        self.listens
            .lock()
            .values()
            .flat_map(Listen::list_changed)
            .collect()
    }
}

impl Listen {
    fn list_changed(&self) -> Vec<String> {
        [
            (self.tools, "tools"),
            (self.resources, "resources"),
            (self.prompts, "prompts"),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, what)| {
            tagged(
                &format!("notifications/{what}/list_changed"),
                &self.wire_id,
                Map::new(),
            )
        })
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use parking_lot::Mutex;
    use std::io::{self, Write};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use clap::Parser;
    use serde_json::{Value, json};

    use super::*;
    use crate::catalog::LOSSLESS_RESULT;
    use crate::cli::Cli;

    /// Collects what the server writes.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A server in this process, fed lines and read back line by line.
    struct Ts {
        server: Arc<Server>,
        buf: Buf,
        /// Lines already handed out by `next`.
        read: usize,
    }

    impl Ts {
        fn new(args: &[&str]) -> Ts {
            let mut all = vec!["ts"];
            all.extend_from_slice(args);
            let cli = Cli::try_parse_from(all).unwrap();
            cli.validate().unwrap();
            let buf = Buf::default();
            let server = Server::with_output(cli, Box::new(buf.clone())).unwrap();
            Ts {
                server,
                buf,
                read: 0,
            }
        }

        fn send(&self, v: &Value) {
            self.server.on_line(v.to_string().as_bytes());
        }

        fn raw_lines(&self) -> Vec<String> {
            let bytes = self.buf.0.lock().clone();
            String::from_utf8(bytes)
                .unwrap()
                .lines()
                .map(str::to_owned)
                .collect()
        }

        /// The next unread line matching `pred` (earlier unread ones are skipped), within 5 s.
        fn wait(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                let lines = self.raw_lines();
                while self.read < lines.len() {
                    let v = parse(&lines[self.read]);
                    self.read += 1;
                    if pred(&v) {
                        return v;
                    }
                }
                assert!(Instant::now() < deadline, "no {what} in {lines:#?}");
                std::thread::sleep(Duration::from_millis(5));
            }
        }

        fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
            self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
            self.wait(&format!("response {id}"), |v| {
                v["id"] == id && v.get("method").is_none()
            })
        }

        /// Lines written after the ones read so far, after `ms` of quiet.
        fn rest_after(&mut self, ms: u64) -> Vec<Value> {
            std::thread::sleep(Duration::from_millis(ms));
            let lines = self.raw_lines();
            let rest = lines[self.read..].iter().map(|l| parse(l)).collect();
            self.read = lines.len();
            rest
        }
    }

    /// A line as a Value (the `lossless` tool's `1e400` does not fit one: made 1).
    fn parse(line: &str) -> Value {
        serde_json::from_str(&line.replace("1e400", "1")).unwrap()
    }

    fn meta(caps: Value) -> Value {
        json!({META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: caps})
    }

    fn call(name: &str, args: Value, caps: Value) -> Value {
        json!({"name": name, "arguments": args, "_meta": meta(caps)})
    }

    fn all_caps() -> Value {
        json!({"sampling": {}, "elicitation": {"form": {}, "url": {}}, "roots": {}})
    }

    #[test]
    fn discover_answer_shape() {
        let mut ts = Ts::new(&["--era", "stateless"]);
        let r = ts.request(1, "server/discover", json!({"_meta": meta(json!({}))}));
        let res = &r["result"];
        assert_eq!(res["resultType"], "complete");
        assert_eq!(res["supportedVersions"], json!(["2026-07-28"]));
        assert_eq!(res["capabilities"]["tools"], json!({"listChanged": true}));
        assert_eq!(
            res["capabilities"]["resources"],
            json!({"subscribe": true, "listChanged": true})
        );
        assert_eq!(res["_meta"][META_SERVER_INFO]["name"], "mcphost-testserver");
        assert_eq!(
            (res["ttlMs"].clone(), res["cacheScope"].clone()),
            (json!(0), json!("public"))
        );
        assert!(res["instructions"].as_str().unwrap().contains("echo"));
        assert!(res.get("protocolVersion").is_none() && res.get("serverInfo").is_none());

        let mut ts = Ts::new(&[
            "--era",
            "both",
            "--ttl-ms",
            "60000",
            "--cache-scope",
            "private",
            "--capabilities",
            "tools",
        ]);
        let res =
            ts.request(1, "server/discover", json!({"_meta": meta(json!({}))}))["result"].clone();
        assert_eq!(
            res["supportedVersions"],
            json!([
                "2026-07-28",
                "2025-11-25",
                "2025-06-18",
                "2025-03-26",
                "2024-11-05"
            ])
        );
        assert_eq!(
            (res["ttlMs"].clone(), res["cacheScope"].clone()),
            (json!(60000), json!("private"))
        );
        assert_eq!(res["capabilities"], json!({"tools": {"listChanged": true}}));
    }

    #[test]
    fn stateless_requests_are_served_without_initialize() {
        let mut ts = Ts::new(&["--era", "stateless", "--ttl-ms", "5000"]);
        let r = ts.request(
            1,
            "tools/call",
            call("echo", json!({"text": "hi"}), json!({})),
        );
        assert_eq!(r["result"]["resultType"], "complete");
        assert_eq!(r["result"]["content"][0]["text"], "hi");
        assert_eq!(
            r["result"]["_meta"][META_SERVER_INFO]["name"],
            "mcphost-testserver"
        );
        assert!(
            r["result"].get("ttlMs").is_none(),
            "tools/call is not cacheable"
        );

        // The raw result stays byte for byte behind the spliced members.
        ts.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call("lossless", json!({}), json!({}))}));
        let line = ts
            .raw_lines()
            .into_iter()
            .find(|l| l.contains(r#""id":2"#))
            .unwrap();
        assert!(line.contains(&LOSSLESS_RESULT[1..]), "{line}");
        assert!(
            line.starts_with(
                r#"{"jsonrpc":"2.0","id":2,"result":{"resultType":"complete","_meta":"#
            )
        );

        for (id, method, params) in [
            (3, "tools/list", json!({})),
            (4, "resources/list", json!({})),
            (5, "resources/templates/list", json!({})),
            (6, "prompts/list", json!({})),
            (7, "resources/read", json!({"uri": "test://static/1"})),
        ] {
            let mut p = params;
            p["_meta"] = meta(json!({}));
            let r = ts.request(id, method, p);
            assert_eq!(r["result"]["resultType"], "complete", "{method}");
            assert_eq!(r["result"]["ttlMs"], 5000, "{method}");
            assert_eq!(r["result"]["cacheScope"], "public", "{method}");
        }
        let r = ts.request(
            8,
            "prompts/get",
            json!({"name": "greet", "arguments": {"name": "Al"}, "_meta": meta(json!({}))}),
        );
        assert_eq!(r["result"]["messages"][0]["content"]["text"], "Hello, Al!");
        assert!(r["result"].get("ttlMs").is_none());

        // 2026-07-28 changes: -32602 for a missing resource, no ping / setLevel / subscribe.
        let r = ts.request(
            9,
            "resources/read",
            json!({"uri": "nope://x", "_meta": meta(json!({}))}),
        );
        assert_eq!(
            (
                r["error"]["code"].clone(),
                r["error"]["data"]["uri"].clone()
            ),
            (json!(-32602), json!("nope://x"))
        );
        for (id, m) in [
            (10, "ping"),
            (11, "logging/setLevel"),
            (12, "resources/subscribe"),
        ] {
            let r = ts.request(id, m, json!({"_meta": meta(json!({}))}));
            assert_eq!(r["error"]["code"], -32601, "{m}");
        }

        let r = ts.request(
            13,
            "tools/call",
            call("huge", json!({"bytes": 1000}), json!({})),
        );
        assert_eq!(r["result"]["resultType"], "complete");
        let r = ts.request(14, "tools/call", call("slow", json!({"ms": 10}), json!({})));
        assert_eq!(r["result"]["resultType"], "complete");
        assert_eq!(r["result"]["content"][0]["text"], "slept 10 ms");
    }

    #[test]
    fn initialize_and_bare_requests_are_refused_when_stateless() {
        let mut ts = Ts::new(&["--era", "stateless"]);
        let r = ts.request(1, "initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}));
        assert_eq!(r["error"]["code"], UNSUPPORTED_PROTOCOL_VERSION);
        assert_eq!(
            r["error"]["data"],
            json!({"supported": ["2026-07-28"], "requested": "2025-11-25"})
        );
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("2026-07-28")
        );

        let r = ts.request(2, "tools/list", json!({}));
        assert_eq!(r["error"]["code"], -32602);
        assert_eq!(
            r["error"]["data"]["missing"],
            json!([META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES])
        );
        let r = ts.request(
            3,
            "tools/list",
            json!({"_meta": {META_PROTOCOL_VERSION: "2026-07-28"}}),
        );
        assert_eq!(
            r["error"]["data"]["missing"],
            json!([META_CLIENT_CAPABILITIES])
        );
        let r = ts.request(4, "ping", json!(null));
        assert_eq!(r["error"]["code"], -32602);
    }

    #[test]
    fn unsupported_version_lists_the_supported_ones() {
        let mut ts = Ts::new(&["--era", "stateless"]);
        let p =
            json!({"_meta": {META_PROTOCOL_VERSION: "2025-11-25", META_CLIENT_CAPABILITIES: {}}});
        let r = ts.request(1, "server/discover", p);
        assert_eq!(r["error"]["code"], -32022);
        assert_eq!(
            r["error"]["data"],
            json!({"supported": ["2026-07-28"], "requested": "2025-11-25"})
        );

        // Only versions the client cannot speak, every time.
        let mut ts = Ts::new(&["--era", "stateless", "--stateless-versions", "2099-01-01"]);
        for id in 1..=3 {
            let r = ts.request(id, "server/discover", json!({"_meta": meta(json!({}))}));
            assert_eq!(r["error"]["data"]["supported"], json!(["2099-01-01"]));
            assert_eq!(r["error"]["data"]["requested"], "2026-07-28");
        }

        // Refused once, then served: the client retries with a listed version.
        let mut ts = Ts::new(&[
            "--era",
            "stateless",
            "--stateless-fault",
            "unsupported-version",
            "--stateless-versions",
            "2026-01-01,2026-07-28",
        ]);
        let r = ts.request(1, "server/discover", json!({"_meta": meta(json!({}))}));
        assert_eq!(r["error"]["code"], -32022);
        assert_eq!(
            r["error"]["data"]["supported"],
            json!(["2026-01-01", "2026-07-28"])
        );
        let r = ts.request(2, "server/discover", json!({"_meta": meta(json!({}))}));
        assert_eq!(
            r["result"]["supportedVersions"],
            json!(["2026-01-01", "2026-07-28"])
        );

        let mut ts = Ts::new(&[
            "--era",
            "both",
            "--stateless-fault",
            "unsupported-version-always",
        ]);
        for id in 1..=3 {
            let r = ts.request(id, "tools/list", json!({"_meta": meta(json!({}))}));
            assert_eq!(r["error"]["code"], -32022);
        }
    }

    #[test]
    fn header_mismatch_once_then_served() {
        let mut ts = Ts::new(&[
            "--era",
            "stateless",
            "--stateless-fault",
            "header-mismatch-once",
        ]);
        let r = ts.request(1, "server/discover", json!({"_meta": meta(json!({}))}));
        assert_eq!(
            r["result"]["resultType"], "complete",
            "discover is not a named request"
        );
        let r = ts.request(2, "tools/list", json!({"_meta": meta(json!({}))}));
        assert!(r.get("result").is_some());
        let r = ts.request(
            3,
            "tools/call",
            call("echo", json!({"text": "a"}), json!({})),
        );
        assert_eq!(r["error"]["code"], HEADER_MISMATCH);
        assert!(r["error"]["message"].as_str().unwrap().contains("'echo'"));
        for id in 4..=5 {
            let r = ts.request(
                id,
                "tools/call",
                call("echo", json!({"text": "a"}), json!({})),
            );
            assert_eq!(r["result"]["content"][0]["text"], "a");
        }
    }

    /// What the handshake mode makes of a client answering `tool`'s request with `answer`:
    /// (the request's params, the tool's result).
    fn handshake_round_trip(tool: &str, args: Value, answer: &Value) -> (Value, Value) {
        let mut ts = Ts::new(&[]);
        ts.request(1, "initialize", json!({"protocolVersion": "2025-11-25", "capabilities": all_caps(), "clientInfo": {"name": "c", "version": "1"}}));
        ts.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": tool, "arguments": args}}));
        let req = ts.wait("server request", |v| {
            v.get("method").is_some() && v.get("id").is_some()
        });
        ts.send(&json!({"jsonrpc": "2.0", "id": req["id"], "result": answer}));
        let r = ts.wait("tool result", |v| v["id"] == 2 && v.get("method").is_none());
        (
            req.get("params").cloned().unwrap_or(Value::Null),
            r["result"].clone(),
        )
    }

    #[test]
    fn input_required_round_trip_matches_the_handshake() {
        let cases = [
            (
                "sample",
                json!({"prompt": "hey"}),
                "sampling",
                "sampling/createMessage",
                json!({"role": "assistant", "content": {"type": "text", "text": "hello"}, "model": "m", "stopReason": "endTurn"}),
            ),
            (
                "elicit",
                json!({"message": "Who?"}),
                "elicitation",
                "elicitation/create",
                json!({"action": "accept", "content": {"name": "octocat"}}),
            ),
            (
                "roots",
                json!({}),
                "roots",
                "roots/list",
                json!({"roots": [{"uri": "file:///tmp", "name": "tmp"}]}),
            ),
        ];
        for (tool, args, key, method, answer) in cases {
            let (hs_params, hs_result) = handshake_round_trip(tool, args.clone(), &answer);
            let mut ts = Ts::new(&["--era", "stateless"]);
            let r = ts.request(1, "tools/call", call(tool, args.clone(), all_caps()));
            let res = &r["result"];
            assert_eq!(res["resultType"], "input_required", "{tool}");
            assert_eq!(res["inputRequests"][key]["method"], method);
            assert_eq!(
                res["inputRequests"][key]
                    .get("params")
                    .cloned()
                    .unwrap_or(Value::Null),
                hs_params,
                "{tool}: the request the handshake sends"
            );
            assert!(
                res.get("ttlMs").is_none(),
                "interim results carry no caching hints"
            );
            let state = res["requestState"].as_str().unwrap().to_owned();

            let mut retry = call(tool, args, all_caps());
            retry["inputResponses"] = json!({key: answer});
            retry["requestState"] = json!(state);
            let r = ts.request(2, "tools/call", retry);
            assert_eq!(r["result"]["resultType"], "complete", "{tool}: {r}");
            assert_eq!(r["result"]["content"], hs_result["content"], "{tool}");
            assert_eq!(r["result"]["isError"], false);
        }
    }

    #[test]
    fn bad_request_state_is_a_clear_error() {
        let mut ts = Ts::new(&["--era", "stateless"]);
        let r = ts.request(
            1,
            "tools/call",
            call("sample", json!({"prompt": "a"}), all_caps()),
        );
        let state = r["result"]["requestState"].as_str().unwrap().to_owned();
        let answer = json!({"sampling": {"role": "assistant", "content": {"type": "text", "text": "x"}, "model": "m"}});

        let mut p = call("sample", json!({"prompt": "a"}), all_caps());
        p["inputResponses"] = answer.clone();
        let r = ts.request(2, "tools/call", p.clone());
        assert_eq!(r["error"]["code"], -32602);
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("without the requestState")
        );

        let mut altered = state.clone();
        let last = altered.pop().unwrap();
        altered.push(if last == '0' { '1' } else { '0' });
        for (id, bad) in [(3, json!(altered)), (4, json!("opaque?")), (5, json!(7))] {
            p["requestState"] = bad;
            let r = ts.request(id, "tools/call", p.clone());
            assert_eq!(r["error"]["code"], -32602, "{r}");
        }
        p["requestState"] = json!(state);
        p["arguments"] = json!({"prompt": "other"});
        let r = ts.request(6, "tools/call", p.clone());
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("issued for another request"),
            "{r}"
        );
        let mut e = call("elicit", json!({"prompt": "a"}), all_caps());
        e["requestState"] = json!(state);
        let r = ts.request(7, "tools/call", e);
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("tools/call sample"),
            "{r}"
        );

        // A retry lacking the answer is asked again (spec: re-request missing input).
        p["arguments"] = json!({"prompt": "a"});
        p["inputResponses"] = json!({"unrelated": {}});
        let r = ts.request(8, "tools/call", p);
        assert_eq!(r["result"]["resultType"], "input_required");
    }

    #[test]
    fn undeclared_client_capability_is_32021() {
        let mut ts = Ts::new(&["--era", "stateless"]);
        for (id, tool, args, caps, required) in [
            (1, "sample", json!({}), json!({}), json!({"sampling": {}})),
            (
                2,
                "roots",
                json!({}),
                json!({"sampling": {}}),
                json!({"roots": {}}),
            ),
            (
                3,
                "elicit",
                json!({}),
                json!({}),
                json!({"elicitation": {}}),
            ),
            (
                4,
                "elicit",
                json!({"mode": "url"}),
                json!({"elicitation": {}}),
                json!({"elicitation": {"url": {}}}),
            ),
        ] {
            let r = ts.request(id, "tools/call", call(tool, args, caps));
            assert_eq!(
                r["error"]["code"], MISSING_REQUIRED_CLIENT_CAPABILITY,
                "{tool}"
            );
            assert_eq!(
                r["error"]["data"]["requiredCapabilities"], required,
                "{tool}"
            );
        }
        let r = ts.request(
            5,
            "tools/call",
            call(
                "elicit",
                json!({"mode": "url", "url": "https://x.example"}),
                json!({"elicitation": {"url": {}}}),
            ),
        );
        let req = &r["result"]["inputRequests"]["elicitation"]["params"];
        assert_eq!(
            *req,
            json!({"mode": "url", "message": "Please provide your name.", "url": "https://x.example"})
        );
    }

    #[test]
    fn input_required_forever_never_completes() {
        let mut ts = Ts::new(&[
            "--era",
            "stateless",
            "--stateless-fault",
            "input-required-forever",
        ]);
        let mut p = call("elicit", json!({}), all_caps());
        let mut states = Vec::new();
        for id in 1..=6 {
            let r = ts.request(id, "tools/call", p.clone());
            assert_eq!(r["result"]["resultType"], "input_required", "round {id}");
            assert!(r["result"]["inputRequests"]["elicitation"].is_object());
            let s = r["result"]["requestState"].as_str().unwrap().to_owned();
            assert!(!states.contains(&s), "each round has its own state");
            states.push(s.clone());
            p["requestState"] = json!(s);
            p["inputResponses"] =
                json!({"elicitation": {"action": "accept", "content": {"name": "n"}}});
        }
        // Other tools still complete.
        let r = ts.request(
            7,
            "tools/call",
            call("echo", json!({"text": "a"}), json!({})),
        );
        assert_eq!(r["result"]["resultType"], "complete");
    }

    #[test]
    fn state_only_then_served() {
        let mut ts = Ts::new(&["--era", "stateless", "--stateless-fault", "state-only"]);
        let mut p = call("echo", json!({"text": "a"}), json!({}));
        let r = ts.request(1, "tools/call", p.clone());
        assert_eq!(r["result"]["resultType"], "input_required");
        assert!(r["result"].get("inputRequests").is_none());
        p["requestState"] = r["result"]["requestState"].clone();
        let r = ts.request(2, "tools/call", p);
        assert_eq!(r["result"]["content"][0]["text"], "a");

        // A client-needing tool: shed, then asked, then done.
        let mut p = call("roots", json!({}), all_caps());
        let r = ts.request(3, "tools/call", p.clone());
        p["requestState"] = r["result"]["requestState"].clone();
        let r = ts.request(4, "tools/call", p.clone());
        assert_eq!(
            r["result"]["inputRequests"]["roots"]["method"],
            "roots/list"
        );
        p["requestState"] = r["result"]["requestState"].clone();
        p["inputResponses"] = json!({"roots": {"roots": []}});
        let r = ts.request(5, "tools/call", p);
        assert_eq!(r["result"]["content"][0]["text"], r#"{"roots":[]}"#);
    }

    #[test]
    fn listen_acknowledges_then_tags_notifications() {
        let mut ts = Ts::new(&[
            "--era",
            "stateless",
            "--capabilities",
            "tools,resources,subscribe",
            "--list-changed-after-ms",
            "30",
            "--list-changed-count",
            "2",
        ]);
        ts.send(&json!({"jsonrpc": "2.0", "id": "L1", "method": "subscriptions/listen", "params": {
            "_meta": meta(json!({})),
            "notifications": {"toolsListChanged": true, "promptsListChanged": true, "resourceSubscriptions": ["test://static/2"]}
        }}));
        let ack = ts.wait("ack", |v| v.get("method").is_some());
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
        assert_eq!(ack["params"]["_meta"][META_SUBSCRIPTION_ID], "L1");
        assert_eq!(
            ack["params"]["notifications"],
            json!({"toolsListChanged": true, "resourceSubscriptions": ["test://static/2"]}),
            "no prompts capability: not granted"
        );
        let upd = ts.wait("updated", |v| v.get("method").is_some());
        assert_eq!(upd["method"], "notifications/resources/updated");
        assert_eq!(
            upd["params"],
            json!({"_meta": {META_SUBSCRIPTION_ID: "L1"}, "uri": "test://static/2"})
        );
        let changed = ts.wait("list_changed", |v| v.get("method").is_some());
        assert_eq!(changed["method"], "notifications/tools/list_changed");
        assert_eq!(changed["params"]["_meta"][META_SUBSCRIPTION_ID], "L1");
        let r = ts.request(2, "tools/list", json!({"_meta": meta(json!({}))}));
        assert!(r.to_string().contains("dynamic_0001"));
        // No response to the listen itself while it is open.
        assert!(ts.raw_lines().iter().all(|l| !l.contains(r#""id":"L1""#)));

        // Cancelled by the client: silent from then on.
        let mut ts = Ts::new(&["--era", "both", "--list-changed-after-ms", "40"]);
        ts.send(&json!({"jsonrpc": "2.0", "id": 9, "method": "subscriptions/listen", "params": {"_meta": meta(json!({})), "notifications": {"toolsListChanged": true}}}));
        ts.wait("ack", |v| {
            v["method"] == "notifications/subscriptions/acknowledged"
        });
        ts.wait("list_changed", |v| {
            v["method"] == "notifications/tools/list_changed"
        });
        ts.send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}}));
        std::thread::sleep(Duration::from_millis(20));
        let rest = ts.rest_after(150);
        assert!(
            rest.len() <= 1,
            "at most one round raced the cancel: {rest:?}"
        );

        let mut ts = Ts::new(&["--era", "stateless"]);
        let r = ts.request(1, "subscriptions/listen", json!({"_meta": meta(json!({}))}));
        assert_eq!(r["error"]["code"], -32602);
    }

    #[test]
    fn listen_drops_and_closes() {
        for (fault, graceful) in [("listen-drops", false), ("listen-closes", true)] {
            let mut ts = Ts::new(&["--era", "stateless", "--stateless-fault", fault]);
            ts.send(&json!({"jsonrpc": "2.0", "id": 4, "method": "subscriptions/listen", "params": {"_meta": meta(json!({})), "notifications": {"toolsListChanged": true}}}));
            let ack = ts.wait("ack", |_| true);
            assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
            let one = ts.wait("one", |_| true);
            assert_eq!(one["method"], "notifications/tools/list_changed");
            assert_eq!(one["params"]["_meta"][META_SUBSCRIPTION_ID], 4);
            let end = ts.wait("end", |_| true);
            if graceful {
                assert_eq!(end["id"], 4);
                assert_eq!(end["result"]["resultType"], "complete");
                assert_eq!(end["result"]["_meta"][META_SUBSCRIPTION_ID], 4);
            } else {
                assert_eq!(end["method"], "notifications/cancelled");
                assert_eq!(end["params"]["requestId"], 4);
            }
            assert!(ts.rest_after(50).is_empty(), "{fault}");
            assert!(ts.server.listens.lock().is_empty());
        }
    }

    #[test]
    fn die_on_discover_before_initialize_only() {
        let ts = Ts::new(&["--stateless-fault", "die-on-discover"]);
        ts.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta(json!({}))}}));
        assert_eq!(*ts.server.died.lock(), Some(1));
        assert!(ts.raw_lines().is_empty(), "died without answering");

        let mut ts = Ts::new(&["--stateless-fault", "die-on-discover"]);
        ts.request(1, "initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}));
        let r = ts.request(2, "server/discover", json!({"_meta": meta(json!({}))}));
        assert_eq!(r["error"]["code"], -32601);
        assert_eq!(*ts.server.died.lock(), None);

        // Without the fault a handshake server refuses the probe as the
        // TypeScript SDK does: method not found.
        let mut ts = Ts::new(&[]);
        let r = ts.request(1, "server/discover", json!({"_meta": meta(json!({}))}));
        assert_eq!(r["error"]["code"], -32601);
    }

    #[test]
    fn both_eras_side_by_side() {
        let mut ts = Ts::new(&["--era", "both"]);
        let r = ts.request(1, "tools/list", json!({}));
        assert_eq!(
            r["error"]["code"], -32600,
            "a bare request before initialize is legacy"
        );
        let r = ts.request(2, "server/discover", json!({"_meta": meta(json!({}))}));
        assert_eq!(r["result"]["resultType"], "complete");
        let r = ts.request(3, "initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}));
        assert_eq!(r["result"]["protocolVersion"], "2025-06-18");
        let r = ts.request(4, "tools/list", json!({}));
        assert!(
            r["result"].get("resultType").is_none(),
            "handshake results stay as they were"
        );
        let r = ts.request(5, "tools/list", json!({"_meta": meta(json!({}))}));
        assert_eq!(r["result"]["resultType"], "complete");
        let r = ts.request(6, "ping", json!(null));
        assert_eq!(r["result"], json!({}));
    }

    #[test]
    fn stateless_requests_are_logged_verbatim() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("requests.log");
        let ts = Ts::new(&[
            "--era",
            "stateless",
            "--log-requests",
            log.to_str().unwrap(),
        ]);
        let line = r#"{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"x-order":{"b":1,"a":2}},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"}}}}"#;
        ts.server.on_line(format!("{line}\n").as_bytes());
        assert_eq!(std::fs::read_to_string(&log).unwrap(), format!("{line}\n"));
    }

    #[test]
    fn request_state_encoding() {
        let args = json!({"a": 1});
        let s = encode_state("sample", Some(&args), 3, StateKind::Asked);
        let d = decode_state(&s).unwrap();
        assert_eq!(
            (d.kind, d.round, d.tool.as_str()),
            (StateKind::Asked, 3, "sample")
        );
        assert_eq!(d.digest, args_digest(Some(&args)));
        assert_ne!(args_digest(Some(&args)), args_digest(None));
        assert!(decode_state(&s.replace("ts1.", "ts2.")).is_none());
        assert!(decode_state("").is_none());
        assert_eq!(splice_front("{}", r#""a":1"#), r#"{"a":1}"#);
        assert_eq!(splice_front(r#"{"b":2}"#, r#""a":1"#), r#"{"a":1,"b":2}"#);
    }
}
