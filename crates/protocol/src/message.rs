//! JSON-RPC 2.0 message shapes. Params, results and error data stay raw text.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// Standard JSON-RPC and MCP error codes.
pub mod error_codes {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    /// Sampling request rejected by the user.
    pub const USER_REJECTED: i64 = -1;
    /// Resource not found (up to 2025-11-25).
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
    /// A URL-mode elicitation must be completed first (2025-11-25);
    /// `data.elicitations` holds them.
    pub const URL_ELICITATION_REQUIRED: i64 = -32042;
    /// 2026-07-28: the HTTP headers do not match the body (`HeaderMismatch`).
    pub const HEADER_MISMATCH: i64 = -32020;
    /// 2026-07-28: the request lacks a client capability the server needs
    /// (`MissingRequiredClientCapabilityError`).
    pub const MISSING_CAPABILITY: i64 = -32021;
    /// 2026-07-28: the protocol version is not one the server speaks;
    /// `data.supported` lists those it does.
    pub const UNSUPPORTED_VERSION: i64 = -32022;
    /// Request cancelled by the caller (mcphost-local, mirrors LSP's -32800).
    pub const REQUEST_CANCELLED: i64 = -32800;
}

/// A request id exactly as it was on the wire: the text of a JSON string or
/// integer. JSON-RPC bounds neither, so an id we answer is kept as text and
/// echoed byte for byte (an integer past `i64`, a string with escapes). Ids
/// we allocate are integers; [`Id::as_number`] also matches a server that
/// echoes `"7"` for `7`.
#[derive(Clone)]
pub struct Id(Box<RawValue>);

impl Id {
    pub fn number(n: i64) -> Id {
        Id::raw(n.to_string())
    }

    pub fn string(s: &str) -> Id {
        // Encoding a `&str` cannot fail.
        Id::raw(serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned()))
    }

    /// The id a JSON value's text denotes: a string or an integer of any
    /// size. `None` for anything else (`null`, `1.5`, `1e3`, objects).
    pub fn from_json(text: &str) -> Option<Id> {
        let text = text.trim();
        let ok = match text.as_bytes().first()? {
            b'"' => serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok(),
            b'-' | b'0'..=b'9' => is_integer(text),
            _ => false,
        };
        ok.then(|| Id::raw(text.to_owned()))
    }

    fn raw(text: String) -> Id {
        // Callers pass valid JSON; the fallback only avoids an unwrap.
        Id(RawValue::from_string(text).unwrap_or_default())
    }

    /// The id's JSON text, as received.
    pub fn as_json(&self) -> &str {
        self.0.get()
    }

    /// The integer this id denotes, also when a server stringified it.
    pub fn as_number(&self) -> Option<i64> {
        match self.key() {
            Key::Number(n) => n.parse().ok(),
            Key::String(s) => s.parse().ok(),
            Key::Undecodable(_) => None,
        }
    }

    /// What the id means: two spellings of one string (`"ab"`, `"a\u0062"`)
    /// are the same id.
    fn key(&self) -> Key<'_> {
        let text = self.0.get();
        match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
            Some(plain) if !plain.contains('\\') => Key::String(plain.into()),
            Some(_) => match serde_json::from_str::<String>(text) {
                Ok(s) => Key::String(s.into()),
                // A lone surrogate (`"\ud800"`) is valid JSON but no
                // string: only the same text is the same id.
                Err(_) => Key::Undecodable(text),
            },
            None => Key::Number(text),
        }
    }
}

/// `-?(0|[1-9][0-9]*)`, JSON's integer syntax.
fn is_integer(text: &str) -> bool {
    let digits = text.strip_prefix('-').unwrap_or(text);
    !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
}

#[derive(PartialEq, Eq, Hash)]
enum Key<'a> {
    Number(&'a str),
    String(std::borrow::Cow<'a, str>),
    Undecodable(&'a str),
}

impl PartialEq for Id {
    fn eq(&self, other: &Id) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Id {}

impl std::hash::Hash for Id {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key().hash(state)
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Id({})", self.as_json())
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_json())
    }
}

impl Serialize for Id {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Id, D::Error> {
        let raw = Box::<RawValue>::deserialize(d)?;
        Id::from_json(raw.get()).ok_or_else(|| {
            serde::de::Error::custom(format!("id must be a string or integer, got {}", raw.get()))
        })
    }
}

/// A JSON-RPC error object. `data` and members we do not know (a server's
/// extensions) are relayed untouched.
#[derive(Debug, Clone)]
pub struct ErrorObject {
    pub code: i64,
    pub message: String,
    pub data: Option<Box<RawValue>>,
    /// Members other than `code`, `message` and `data`, in their order.
    pub extra: Vec<(String, Box<RawValue>)>,
}

impl Serialize for ErrorObject {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("code", &self.code)?;
        map.serialize_entry("message", &self.message)?;
        if let Some(d) = &self.data {
            map.serialize_entry("data", d)?;
        }
        for (k, v) in &self.extra {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for ErrorObject {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ErrorVisitor)
    }
}

struct ErrorVisitor;

impl<'de> serde::de::Visitor<'de> for ErrorVisitor {
    type Value = ErrorObject;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC error object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<ErrorObject, A::Error> {
        use serde::de::Error;
        let (mut code, mut message, mut data, mut extra) = (None, None, None, Vec::new());
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match &*key {
                "code" => code = Some(map.next_value::<i64>()?),
                "message" => message = Some(map.next_value::<String>()?),
                "data" => data = Some(map.next_value::<Box<RawValue>>()?),
                _ => extra.push((key.into_owned(), map.next_value::<Box<RawValue>>()?)),
            }
        }
        Ok(ErrorObject {
            code: code.ok_or_else(|| A::Error::missing_field("code"))?,
            message: message.ok_or_else(|| A::Error::missing_field("message"))?,
            data,
            extra,
        })
    }
}

impl ErrorObject {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        ErrorObject {
            code,
            message: message.into(),
            data: None,
            extra: Vec::new(),
        }
    }
    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            error_codes::METHOD_NOT_FOUND,
            format!("method not found: {method}"),
        )
    }
}

impl fmt::Display for ErrorObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (code {})", self.message, self.code)?;
        if let Some(d) = &self.data {
            write!(f, ", data: {}", d.get())?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Request {
    pub id: Id,
    pub method: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub params: Option<Box<RawValue>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Notification {
    pub method: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub params: Option<Box<RawValue>>,
}

/// A response. `id` is `None` only for errors about unparseable requests.
#[derive(Debug, Clone)]
pub struct Response {
    pub id: Option<Id>,
    pub outcome: Result<Box<RawValue>, ErrorObject>,
}

/// One JSON-RPC message.
#[derive(Debug, Clone)]
pub enum Message {
    Request(Request),
    Notification(Notification),
    Response(Response),
}

const VERSION: &str = "2.0";

#[derive(Serialize)]
struct WireRequest<'a> {
    jsonrpc: &'static str,
    id: &'a Id,
    method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a RawValue>,
}

#[derive(Serialize)]
struct WireNotification<'a> {
    jsonrpc: &'static str,
    method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a RawValue>,
}

#[derive(Serialize)]
struct WireResponse<'a> {
    jsonrpc: &'static str,
    id: Option<&'a Id>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a ErrorObject>,
}

impl Serialize for Message {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Message::Request(r) => WireRequest {
                jsonrpc: VERSION,
                id: &r.id,
                method: &r.method,
                params: r.params.as_deref(),
            }
            .serialize(s),
            Message::Notification(n) => WireNotification {
                jsonrpc: VERSION,
                method: &n.method,
                params: n.params.as_deref(),
            }
            .serialize(s),
            Message::Response(r) => WireResponse {
                jsonrpc: VERSION,
                id: r.id.as_ref(),
                result: r.outcome.as_ref().ok().map(|v| &**v),
                error: r.outcome.as_ref().err(),
            }
            .serialize(s),
        }
    }
}

impl Message {
    /// Compact JSON text with no newline, ready for line framing.
    ///
    /// Relayed raw values keep the sender's whitespace, which may include
    /// newlines. JSON forbids raw control characters inside strings, so any
    /// CR or LF here is insignificant whitespace and becomes a space.
    pub fn to_line(&self) -> String {
        // Serialising these types cannot fail: keys are strings and raw
        // values were valid JSON when parsed.
        let line = serde_json::to_string(self).unwrap_or_else(|e| {
            format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"error","data":{:?}}}}}"#,
                e.to_string()
            )
        });
        if memchr::memchr2(b'\n', b'\r', line.as_bytes()).is_some() {
            line.replace(['\n', '\r'], " ")
        } else {
            line
        }
    }

    /// A JSON-RPC batch as one line.
    pub fn batch_line(messages: &[Message]) -> String {
        let parts: Vec<String> = messages.iter().map(Message::to_line).collect();
        format!("[{}]", parts.join(","))
    }

    pub fn method(&self) -> Option<&str> {
        match self {
            Message::Request(r) => Some(&r.method),
            Message::Notification(n) => Some(&n.method),
            Message::Response(_) => None,
        }
    }
}

/// Decoding: the shape every incoming message is read into first.
#[derive(Deserialize)]
#[doc(hidden)]
pub struct WireIn {
    #[serde(default)]
    pub jsonrpc: Option<String>,
    #[serde(default, deserialize_with = "present")]
    pub id: Option<Box<RawValue>>,
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default, deserialize_with = "present")]
    pub params: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    pub result: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    pub error: Option<Box<RawValue>>,
}

/// A present field is `Some`, even when its value is `null`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_compare_by_meaning() {
        assert_eq!(Id::from_json(r#""a\u0062""#), Some(Id::string("ab")));
        assert_ne!(Id::number(7), Id::string("7"));
        let lone = Id::from_json(r#""\ud800""#).expect("valid JSON, so an id");
        assert_ne!(lone, Id::string(""));
        assert_ne!(lone, Id::from_json(r#""\udc00""#).unwrap());
        assert_eq!(lone, Id::from_json(r#""\ud800""#).unwrap());
    }

    #[test]
    fn lines_never_contain_newlines_even_from_relayed_whitespace() {
        let params =
            RawValue::from_string("{\n  \"a\": \"x\\ny\",\r\n  \"b\": 1.10\n}".to_owned()).unwrap();
        let m = Message::Notification(Notification {
            method: "m".into(),
            params: Some(params),
        });
        let line = m.to_line();
        assert!(!line.contains('\n') && !line.contains('\r'), "{line}");
        assert!(
            line.contains(r#""a": "x\ny""#),
            "escaped newline inside a string is kept: {line}"
        );
        assert!(line.contains("1.10"));
        let batch = Message::batch_line(&[m.clone(), m]);
        assert!(batch.starts_with('[') && !batch.contains('\n'));
        assert!(serde_json::from_str::<Vec<Box<RawValue>>>(&batch).is_ok());
    }
}
