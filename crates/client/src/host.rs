//! The host behind a client: who answers sampling, elicitation and roots.

use std::sync::Arc;

use indexmap::IndexMap;
use serde::Deserialize;
use serde_json::value::RawValue;
use tracing::{info, warn};

use mcphost_jsonrpc::{IncomingRequest, Relation, RequestHandler};
use mcphost_protocol::capabilities::{ElicitationCap, Empty, SamplingCap};
use mcphost_protocol::{
    ClientCapabilities, ErrorObject, error_codes, methods, raw_field, set_fields, to_raw,
};
use mcphost_transport::BoxFuture;

/// One server→client request (`sampling/createMessage`,
/// `elicitation/create`, `roots/list`) for a [`Host`] to answer.
#[derive(Debug)]
pub struct HostRequest {
    /// The asking server's config name.
    pub server: String,
    pub method: String,
    /// Exactly as the server sent them.
    pub params: Option<Box<RawValue>>,
    /// Which of our calls caused it, as far as the transport can tell.
    pub relation: Relation,
    /// Which instance asks: whose roots a `roots/list` may get.
    pub asker: Asker,
}

/// Who sends a server request. A `roots/list` is answered with the roots
/// of the host(s) the asker serves, not those of whoever's call was in
/// flight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Asker {
    /// A handshake-era server every session shares.
    #[default]
    Shared,
    /// A session's own instance (`share: per-session`).
    Session(u64),
    /// A stateless (2026-07-28) server inside one request's
    /// `input_required` round: it asks for that request alone.
    Request,
}

/// Answers server→client requests. Only what [`Host::capabilities`] enables
/// is advertised, and anything else is refused with -32601 before it gets here.
pub trait Host: Send + Sync + 'static {
    fn capabilities(&self) -> ClientCapabilities;
    /// The capabilities of the client whose call `origin` is: what a
    /// request of the stateless revision declares for itself.
    fn capabilities_for(&self, origin: Option<&mcphost_jsonrpc::Origin>) -> ClientCapabilities {
        let _ = origin;
        self.capabilities()
    }
    fn handle(
        &self,
        request: HostRequest,
    ) -> BoxFuture<'static, Result<Box<RawValue>, ErrorObject>>;
}

/// A host with no client capabilities.
pub struct NoHost;

impl Host for NoHost {
    fn capabilities(&self) -> ClientCapabilities {
        ClientCapabilities::default()
    }
    fn handle(&self, r: HostRequest) -> BoxFuture<'static, Result<Box<RawValue>, ErrorObject>> {
        Box::pin(std::future::ready(Err(ErrorObject::method_not_found(
            &r.method,
        ))))
    }
}

/// What a [`PolicyHost`] answers to `elicitation/create`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElicitationPolicy {
    /// `{"action":"decline"}`: the user said no.
    Decline,
    /// `{"action":"cancel"}`: the user dismissed the form.
    Cancel,
    /// `{"action":"accept","content":{…}}` with each property's schema
    /// `default` (SEP-1034). A form with a required property that has no
    /// usable default cannot be filled without a person, so it is answered
    /// with `cancel` instead of an accept the server would have to reject.
    AcceptDefaults,
}

impl ElicitationPolicy {
    /// The flag spelling: `decline`, `cancel`, `accept-defaults`.
    pub fn as_str(self) -> &'static str {
        match self {
            ElicitationPolicy::Decline => "decline",
            ElicitationPolicy::Cancel => "cancel",
            ElicitationPolicy::AcceptDefaults => "accept-defaults",
        }
    }
}

/// What a [`PolicyHost`] answers to `sampling/createMessage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SamplingPolicy {
    /// The spec's "user rejected sampling request" error (code -1).
    Decline,
}

impl SamplingPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            SamplingPolicy::Decline => "decline",
        }
    }
}

/// A host with no person behind it: answers server→client requests by fixed
/// policies, for scripts, CI and the conformance suite.
///
/// It advertises only what a policy is set for: `elicitation: {"form": {}}`
/// with an elicitation policy (form mode only; the explicit spelling of what
/// 2025-11-25 reads `{}` as, and still a plain object for 2025-06-18
/// servers), `sampling: {}` with a sampling policy, and never `roots`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicyHost {
    pub elicitation: Option<ElicitationPolicy>,
    pub sampling: Option<SamplingPolicy>,
}

impl PolicyHost {
    pub fn new(elicitation: Option<ElicitationPolicy>, sampling: Option<SamplingPolicy>) -> Self {
        PolicyHost {
            elicitation,
            sampling,
        }
    }

    /// The answer to one `elicitation/create`: an `ElicitResult`, or an
    /// error (-32602 for a mode other than form, or params that are not an
    /// elicitation request; -32601 without an elicitation policy).
    pub fn elicit(
        &self,
        server: &str,
        params: Option<&RawValue>,
    ) -> Result<Box<RawValue>, ErrorObject> {
        let Some(policy) = self.elicitation else {
            return Err(ErrorObject::method_not_found(methods::ELICITATION_CREATE));
        };
        let params = params.ok_or_else(|| invalid_params("elicitation/create without params"))?;
        let mode: Option<String> = raw_field(params, "mode")
            .map_err(|e| invalid_params(format!("elicitation/create: {e}")))?;
        if let Some(mode) = mode.filter(|m| m != "form") {
            return Err(invalid_params(format!(
                "elicitation mode {mode:?} is not supported (this client declared form mode only)"
            )));
        }
        let answer = match policy {
            ElicitationPolicy::Decline => ElicitAnswer::Decline,
            ElicitationPolicy::Cancel => ElicitAnswer::Cancel,
            ElicitationPolicy::AcceptDefaults => {
                let schema: FormSchema = raw_field(params, "requestedSchema")
                    .map_err(|e| invalid_params(format!("elicitation/create: {e}")))?
                    .ok_or_else(|| invalid_params("elicitation/create without requestedSchema"))?;
                match schema.defaults() {
                    Ok(content) => ElicitAnswer::Accept(content),
                    Err(missing) => {
                        warn!(
                            server,
                            property = %missing,
                            "elicitation answered with cancel: required property has no usable default"
                        );
                        ElicitAnswer::Cancel
                    }
                }
            }
        };
        info!(
            server,
            policy = policy.as_str(),
            action = answer.action(),
            "answered elicitation/create"
        );
        answer.into_raw()
    }

    /// These policies, with `decline` where none is set: the fallback when
    /// capabilities are advertised whether or not a host can answer.
    pub fn or_decline(self) -> PolicyHost {
        PolicyHost {
            elicitation: self.elicitation.or(Some(ElicitationPolicy::Decline)),
            sampling: self.sampling.or(Some(SamplingPolicy::Decline)),
        }
    }

    /// The answer to `method` from `server`.
    pub fn answer(
        &self,
        server: &str,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<Box<RawValue>, ErrorObject> {
        match method {
            methods::ELICITATION_CREATE => self.elicit(server, params),
            methods::SAMPLING_CREATE_MESSAGE => self.sample(server),
            other => Err(ErrorObject::method_not_found(other)),
        }
    }

    /// The answer to one `sampling/createMessage`.
    pub fn sample(&self, server: &str) -> Result<Box<RawValue>, ErrorObject> {
        match self.sampling {
            Some(SamplingPolicy::Decline) => {
                info!(server, "declined sampling/createMessage (policy)");
                Err(ErrorObject::new(
                    error_codes::USER_REJECTED,
                    "User rejected sampling request",
                ))
            }
            None => Err(ErrorObject::method_not_found(
                methods::SAMPLING_CREATE_MESSAGE,
            )),
        }
    }
}

impl Host for PolicyHost {
    fn capabilities(&self) -> ClientCapabilities {
        ClientCapabilities {
            roots: None,
            sampling: self.sampling.map(|_| SamplingCap::default()),
            elicitation: self.elicitation.map(|_| ElicitationCap {
                form: Some(Empty::default()),
                url: None,
            }),
        }
    }

    fn handle(&self, r: HostRequest) -> BoxFuture<'static, Result<Box<RawValue>, ErrorObject>> {
        Box::pin(std::future::ready(self.answer(
            &r.server,
            &r.method,
            r.params.as_deref(),
        )))
    }
}

fn invalid_params(message: impl Into<String>) -> ErrorObject {
    ErrorObject::new(error_codes::INVALID_PARAMS, message)
}

enum ElicitAnswer {
    Accept(Box<RawValue>),
    Decline,
    Cancel,
}

impl ElicitAnswer {
    fn action(&self) -> &'static str {
        match self {
            ElicitAnswer::Accept(_) => "accept",
            ElicitAnswer::Decline => "decline",
            ElicitAnswer::Cancel => "cancel",
        }
    }

    fn into_raw(self) -> Result<Box<RawValue>, ErrorObject> {
        let action = to_raw(self.action()).map_err(internal)?;
        let mut fields = vec![("action".to_owned(), action)];
        if let ElicitAnswer::Accept(content) = self {
            fields.push(("content".to_owned(), content));
        }
        set_fields(None, fields).map_err(internal)
    }
}

fn internal(e: impl std::fmt::Display) -> ErrorObject {
    ErrorObject::new(error_codes::INTERNAL_ERROR, e.to_string())
}

/// The part of a form's `requestedSchema` that defaults are read from.
#[derive(Deserialize)]
struct FormSchema {
    #[serde(default)]
    properties: IndexMap<String, PropertySchema>,
    #[serde(default)]
    required: Vec<String>,
}

#[derive(Deserialize)]
struct PropertySchema {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    default: Option<Box<RawValue>>,
    #[serde(rename = "enum", default)]
    options: Option<Vec<String>>,
    #[serde(rename = "oneOf", default)]
    one_of: Option<Vec<ConstOption>>,
    #[serde(default)]
    items: Option<ItemsSchema>,
    #[serde(rename = "minItems", default)]
    min_items: Option<usize>,
    #[serde(rename = "maxItems", default)]
    max_items: Option<usize>,
}

#[derive(Deserialize)]
struct ItemsSchema {
    #[serde(rename = "enum", default)]
    options: Option<Vec<String>>,
    #[serde(rename = "anyOf", default)]
    any_of: Option<Vec<ConstOption>>,
}

#[derive(Deserialize)]
struct ConstOption {
    #[serde(rename = "const")]
    value: String,
}

/// Whether `value` is one of the allowed values (no list: anything goes).
fn allowed(value: &str, options: Option<&[String]>, consts: Option<&[ConstOption]>) -> bool {
    options.is_none_or(|o| o.iter().any(|x| x == value))
        && consts.is_none_or(|c| c.iter().any(|x| x.value == value))
}

impl FormSchema {
    /// `{name: default}` for every property with a usable default, in the
    /// schema's order and byte for byte as the server wrote them; the name
    /// of a required property without one as the error.
    fn defaults(&self) -> Result<Box<RawValue>, String> {
        let mut content = Vec::new();
        for (name, prop) in &self.properties {
            if let Some(value) = prop.usable_default() {
                content.push((name.clone(), value));
            }
        }
        if let Some(missing) = self
            .required
            .iter()
            .find(|r| !content.iter().any(|(name, _)| name == *r))
        {
            return Err(missing.clone());
        }
        set_fields(None, content).map_err(|e| e.to_string())
    }
}

impl PropertySchema {
    /// The schema's `default`, when it is a value of the property's type
    /// (and one of its options, for an enum).
    fn usable_default(&self) -> Option<Box<RawValue>> {
        let raw = self.default.as_ref()?;
        let value: serde_json::Value = serde_json::from_str(raw.get()).ok()?;
        let ok = match (self.kind.as_deref()?, &value) {
            ("string", serde_json::Value::String(s)) => {
                allowed(s, self.options.as_deref(), self.one_of.as_deref())
            }
            ("number", serde_json::Value::Number(_)) => true,
            ("integer", serde_json::Value::Number(n)) => {
                n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
            }
            ("boolean", serde_json::Value::Bool(_)) => true,
            ("array", serde_json::Value::Array(items)) => {
                let (options, consts) = match &self.items {
                    Some(i) => (i.options.as_deref(), i.any_of.as_deref()),
                    None => (None, None),
                };
                self.min_items.is_none_or(|m| items.len() >= m)
                    && self.max_items.is_none_or(|m| items.len() <= m)
                    && items
                        .iter()
                        .all(|item| item.as_str().is_some_and(|s| allowed(s, options, consts)))
            }
            _ => false,
        };
        ok.then(|| raw.clone())
    }
}

pub(crate) struct HostHandler {
    server: String,
    host: Arc<dyn Host>,
    caps: ClientCapabilities,
    turns: Arc<super::attribution::Turns>,
}

impl HostHandler {
    pub(crate) fn new(
        server: &str,
        host: Arc<dyn Host>,
        turns: Arc<super::attribution::Turns>,
    ) -> Self {
        let caps = host.capabilities();
        HostHandler {
            server: server.to_owned(),
            host,
            caps,
            turns,
        }
    }

    /// What `r` is known to belong to. The wire's word is final. Without
    /// it, a request that needs a person or a model belongs to the one
    /// session with calls in flight (turns keep it to one once the server
    /// has asked); with none in flight, or from a server seen asking
    /// outside its calls, to nobody.
    fn attribute(&self, r: &IncomingRequest) -> Relation {
        let asks = matches!(
            r.method.as_str(),
            methods::SAMPLING_CREATE_MESSAGE | methods::ELICITATION_CREATE
        );
        if r.by_wire || !asks {
            return r.relation.clone();
        }
        let learned = self.turns.learned();
        learned.saw_request(&self.server, r.relation == Relation::Unrelated);
        if learned.asks_outside_calls() {
            if r.relation != Relation::Unrelated {
                info!(
                    server = %self.server,
                    method = %r.method,
                    "this server has asked outside its calls before, so this request may not be the caller's: it goes to the fallback"
                );
            }
            learned.count_unattributed();
            return Relation::Unrelated;
        }
        if let Relation::Ambiguous(origins) = &r.relation {
            warn!(
                server = %self.server,
                method = %r.method,
                sessions = origins.len(),
                "calls of several sessions were in flight (the server had not asked before, so they were not taking turns): nobody's host is asked, the fallback answers"
            );
            learned.count_unattributed();
        }
        r.relation.clone()
    }
}

impl RequestHandler for HostHandler {
    fn handle(&self, r: IncomingRequest) -> BoxFuture<'static, Result<Box<RawValue>, ErrorObject>> {
        if !self.caps.handles(&r.method) {
            return Box::pin(std::future::ready(Err(ErrorObject::method_not_found(
                &r.method,
            ))));
        }
        let relation = self.attribute(&r);
        self.host.handle(HostRequest {
            server: self.server.clone(),
            method: r.method,
            params: r.params,
            relation,
            asker: Asker::Shared,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    fn caps(h: PolicyHost) -> String {
        serde_json::to_string(&h.capabilities()).unwrap()
    }

    fn elicit(policy: ElicitationPolicy, params: &str) -> Result<String, ErrorObject> {
        PolicyHost::new(Some(policy), None)
            .elicit("srv", Some(&raw(params)))
            .map(|r| r.get().to_owned())
    }

    fn accept_defaults(schema: &str) -> String {
        elicit(
            ElicitationPolicy::AcceptDefaults,
            &format!(r#"{{"message":"m","requestedSchema":{schema}}}"#),
        )
        .unwrap()
    }

    #[test]
    fn capabilities_follow_the_policies() {
        assert_eq!(caps(PolicyHost::default()), "{}");
        for p in [
            ElicitationPolicy::Decline,
            ElicitationPolicy::Cancel,
            ElicitationPolicy::AcceptDefaults,
        ] {
            assert_eq!(
                caps(PolicyHost::new(Some(p), None)),
                r#"{"elicitation":{"form":{}}}"#
            );
        }
        assert_eq!(
            caps(PolicyHost::new(None, Some(SamplingPolicy::Decline))),
            r#"{"sampling":{}}"#
        );
        let both = PolicyHost::new(
            Some(ElicitationPolicy::Cancel),
            Some(SamplingPolicy::Decline),
        );
        assert_eq!(caps(both), r#"{"sampling":{},"elicitation":{"form":{}}}"#);
        let c = both.capabilities();
        assert!(c.handles(methods::ELICITATION_CREATE));
        assert!(c.handles(methods::SAMPLING_CREATE_MESSAGE));
        assert!(!c.handles(methods::ROOTS_LIST));
    }

    #[test]
    fn decline_and_cancel_answer_without_content() {
        let p = r#"{"message":"Name?","requestedSchema":{"type":"object","properties":{"n":{"type":"string","default":"x"}}}}"#;
        assert_eq!(
            elicit(ElicitationPolicy::Decline, p).unwrap(),
            r#"{"action":"decline"}"#
        );
        assert_eq!(
            elicit(ElicitationPolicy::Cancel, p).unwrap(),
            r#"{"action":"cancel"}"#
        );
    }

    #[test]
    fn accept_defaults_fills_every_primitive_kind() {
        // The shape of the conformance suite's SEP-1034 client scenario.
        let got = accept_defaults(
            r#"{"type":"object","properties":{
                "name":{"type":"string","default":"John Doe"},
                "age":{"type":"integer","default":30},
                "score":{"type":"number","default":95.5},
                "status":{"type":"string","enum":["active","inactive"],"default":"active"},
                "verified":{"type":"boolean","default":true},
                "noDefault":{"type":"string"}
            },"required":[]}"#,
        );
        assert_eq!(
            got,
            r#"{"action":"accept","content":{"name":"John Doe","age":30,"score":95.5,"status":"active","verified":true}}"#
        );
    }

    #[test]
    fn accept_defaults_keeps_default_bytes_and_schema_order() {
        let got = accept_defaults(
            r#"{"type":"object","properties":{
                "z":{"type":"number","default":1.10},
                "big":{"type":"integer","default":12345678901234567890123},
                "a":{"type":"string","default":"caf\u00e9"}
            }}"#,
        );
        assert_eq!(
            got,
            r#"{"action":"accept","content":{"z":1.10,"big":12345678901234567890123,"a":"caf\u00e9"}}"#
        );
    }

    #[test]
    fn accept_defaults_handles_enum_variants() {
        let got = accept_defaults(
            r#"{"type":"object","properties":{
                "titled":{"type":"string","oneOf":[{"const":"h1","title":"One"},{"const":"h2","title":"Two"}],"default":"h2"},
                "legacy":{"type":"string","enum":["p1","p2"],"enumNames":["Cats","Dogs"],"default":"p1"},
                "multi":{"type":"array","items":{"type":"string","enum":["G","P"]},"default":["G","P"]},
                "multiTitled":{"type":"array","items":{"anyOf":[{"const":"f1","title":"Tuna"}]},"default":["f1"]}
            }}"#,
        );
        assert_eq!(
            got,
            r#"{"action":"accept","content":{"titled":"h2","legacy":"p1","multi":["G","P"],"multiTitled":["f1"]}}"#
        );
    }

    #[test]
    fn accept_defaults_skips_defaults_that_do_not_fit() {
        let got = accept_defaults(
            r#"{"type":"object","properties":{
                "notMember":{"type":"string","enum":["a","b"],"default":"c"},
                "notConst":{"type":"string","oneOf":[{"const":"a","title":"A"}],"default":"b"},
                "wrongType":{"type":"boolean","default":"yes"},
                "fraction":{"type":"integer","default":2.5},
                "numberAsString":{"type":"number","default":"3"},
                "badItem":{"type":"array","items":{"type":"string","enum":["x"]},"default":["y"]},
                "tooMany":{"type":"array","items":{"type":"string","enum":["x","y"]},"maxItems":1,"default":["x","y"]},
                "noType":{"default":"v"},
                "null":{"type":"string","default":null},
                "ok":{"type":"integer","default":-7}
            }}"#,
        );
        assert_eq!(got, r#"{"action":"accept","content":{"ok":-7}}"#);
    }

    #[test]
    fn accept_defaults_with_no_defaults_accepts_empty_content() {
        assert_eq!(
            accept_defaults(r#"{"type":"object","properties":{"n":{"type":"string"}}}"#),
            r#"{"action":"accept","content":{}}"#
        );
    }

    #[test]
    fn accept_defaults_cancels_when_a_required_property_has_no_default() {
        let got = accept_defaults(
            r#"{"type":"object","properties":{
                "name":{"type":"string"},
                "n":{"type":"integer","default":42}
            },"required":["name"]}"#,
        );
        assert_eq!(got, r#"{"action":"cancel"}"#);
        // A required property whose default does not fit counts as missing.
        let got = accept_defaults(
            r#"{"type":"object","properties":{"s":{"type":"string","enum":["a"],"default":"b"}},"required":["s"]}"#,
        );
        assert_eq!(got, r#"{"action":"cancel"}"#);
        // Required and defaulted: accepted.
        let got = accept_defaults(
            r#"{"type":"object","properties":{"s":{"type":"string","default":"a"}},"required":["s"]}"#,
        );
        assert_eq!(got, r#"{"action":"accept","content":{"s":"a"}}"#);
    }

    #[test]
    fn explicit_form_mode_is_answered_and_url_mode_refused() {
        let form =
            r#"{"mode":"form","message":"m","requestedSchema":{"type":"object","properties":{}}}"#;
        assert_eq!(
            elicit(ElicitationPolicy::AcceptDefaults, form).unwrap(),
            r#"{"action":"accept","content":{}}"#
        );
        let url =
            r#"{"mode":"url","message":"m","elicitationId":"e1","url":"https://example.com"}"#;
        for p in [
            ElicitationPolicy::Decline,
            ElicitationPolicy::Cancel,
            ElicitationPolicy::AcceptDefaults,
        ] {
            let e = elicit(p, url).unwrap_err();
            assert_eq!(e.code, error_codes::INVALID_PARAMS, "{p:?}: {e}");
            assert!(e.message.contains("url"), "{e}");
        }
    }

    #[test]
    fn malformed_elicitation_params_are_invalid_params() {
        let host = PolicyHost::new(Some(ElicitationPolicy::AcceptDefaults), None);
        let e = host.elicit("srv", None).unwrap_err();
        assert_eq!(e.code, error_codes::INVALID_PARAMS);
        for bad in [
            r#"{"message":"no schema"}"#,
            r#"{"message":"m","requestedSchema":{"properties":[1,2]}}"#,
            r#"[1]"#,
        ] {
            let e = elicit(ElicitationPolicy::AcceptDefaults, bad).unwrap_err();
            assert_eq!(e.code, error_codes::INVALID_PARAMS, "{bad}: {e}");
        }
    }

    #[test]
    fn sampling_decline_is_the_user_rejected_error() {
        let host = PolicyHost::new(None, Some(SamplingPolicy::Decline));
        let e = host
            .answer(
                "srv",
                methods::SAMPLING_CREATE_MESSAGE,
                Some(&raw(r#"{"messages":[],"maxTokens":10}"#)),
            )
            .unwrap_err();
        assert_eq!(e.code, error_codes::USER_REJECTED);
        assert_eq!(e.code, -1);
        assert_eq!(e.message, "User rejected sampling request");
    }

    #[test]
    fn without_a_policy_the_method_is_not_found() {
        let host = PolicyHost::default();
        for m in [
            methods::ELICITATION_CREATE,
            methods::SAMPLING_CREATE_MESSAGE,
            methods::ROOTS_LIST,
        ] {
            let e = host.answer("srv", m, None).unwrap_err();
            assert_eq!(e.code, error_codes::METHOD_NOT_FOUND, "{m}");
        }
        // Elicitation set, sampling not: sampling is still refused.
        let host = PolicyHost::new(Some(ElicitationPolicy::Decline), None);
        let e = host.sample("srv").unwrap_err();
        assert_eq!(e.code, error_codes::METHOD_NOT_FOUND);
    }
}
