//! Turning one received frame into JSON-RPC messages. This is the fuzzed
//! surface: it must never panic, whatever the bytes.

use serde_json::value::RawValue;

use mcphost_protocol::message::WireIn;
use mcphost_protocol::{ErrorObject, Id, Message, Notification, Request, Response};

/// What one frame held.
#[derive(Debug)]
pub enum Incoming {
    Single(Result<Message, DecodeError>),
    /// A JSON-RPC batch; each element decodes on its own.
    Batch(Vec<Result<Message, DecodeError>>),
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum DecodeError {
    #[error("not JSON ({reason}): {preview}")]
    NotJson { preview: String, reason: String },
    /// JSON without `"jsonrpc":"2.0"`: noise such as a log line, never
    /// taken for a message.
    #[error("not JSON-RPC: {preview}")]
    NotJsonRpc { preview: String },
    #[error("empty batch")]
    EmptyBatch,
    #[error("invalid JSON-RPC message: {reason}")]
    Invalid {
        /// The request id, if one could be read, so the sender can be told.
        id: Option<Id>,
        reason: String,
    },
}

const PREVIEW: usize = 120;

fn preview(s: &str) -> String {
    let s = s.trim();
    match s.char_indices().nth(PREVIEW) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// Decode a frame: a single message or a batch.
pub fn decode(frame: &str) -> Result<Incoming, DecodeError> {
    let not_json = |e: serde_json::Error| DecodeError::NotJson {
        preview: preview(frame),
        reason: e.to_string(),
    };
    if frame.trim_start().starts_with('[') {
        let items: Vec<Box<RawValue>> = serde_json::from_str(frame).map_err(not_json)?;
        if items.is_empty() {
            return Err(DecodeError::EmptyBatch);
        }
        return Ok(Incoming::Batch(
            items.iter().map(|i| decode_one(i.get())).collect(),
        ));
    }
    match decode_one(frame) {
        // A shape error on text that is not even JSON (say, a truncated
        // line) is reported as "not JSON". Checked only on failure, so a
        // good message is parsed once.
        Err(DecodeError::Invalid { id: None, .. })
            if serde_json::from_str::<serde::de::IgnoredAny>(frame).is_err() =>
        {
            let e = serde_json::from_str::<serde::de::IgnoredAny>(frame)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            Err(DecodeError::NotJson {
                preview: preview(frame),
                reason: e,
            })
        }
        other => Ok(Incoming::Single(other)),
    }
}

fn invalid(id: Option<Id>, reason: impl Into<String>) -> DecodeError {
    DecodeError::Invalid {
        id,
        reason: reason.into(),
    }
}

fn decode_one(text: &str) -> Result<Message, DecodeError> {
    let w: WireIn = serde_json::from_str(text).map_err(|e| invalid(None, e.to_string()))?;
    // Without `"jsonrpc":"2.0"` an object is not JSON-RPC (typically a
    // server's structured log line), and its "id" is none of ours.
    match w.jsonrpc.as_deref() {
        Some("2.0") => {}
        None => {
            return Err(DecodeError::NotJsonRpc {
                preview: preview(text),
            });
        }
        Some(other) => {
            return Err(invalid(
                None,
                format!("unsupported jsonrpc version {other:?}"),
            ));
        }
    }
    let id = match &w.id {
        None => None,
        Some(raw) if raw.get() == "null" => None,
        Some(raw) => Some(Id::from_json(raw.get()).ok_or_else(|| {
            invalid(
                None,
                format!("id must be a string or integer, got {}", raw.get()),
            )
        })?),
    };
    let params = w.params.filter(|p| p.get() != "null");
    match (w.method, w.result, w.error) {
        (Some(method), None, None) => match (id, w.id.is_some()) {
            (Some(id), _) => Ok(Message::Request(Request { id, method, params })),
            (None, true) => Err(invalid(None, format!("request {method:?} has a null id"))),
            (None, false) => Ok(Message::Notification(Notification { method, params })),
        },
        (None, Some(result), None) => match id {
            Some(id) => Ok(Message::Response(Response {
                id: Some(id),
                outcome: Ok(result),
            })),
            None => Err(invalid(None, "result response without an id")),
        },
        (None, None, Some(error)) => {
            let err: ErrorObject = serde_json::from_str(error.get())
                .map_err(|e| invalid(id.clone(), format!("malformed error object: {e}")))?;
            Ok(Message::Response(Response {
                id,
                outcome: Err(err),
            }))
        }
        _ => Err(invalid(
            id,
            "a message must have exactly one of method, result or error",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn single(s: &str) -> Result<Message, DecodeError> {
        match decode(s).unwrap() {
            Incoming::Single(m) => m,
            Incoming::Batch(_) => panic!("batch"),
        }
    }

    #[test]
    fn classifies_messages() {
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Ok(Message::Request(r)) if r.id == Id::number(1) && r.params.is_none()
        ));
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}"#),
            Ok(Message::Notification(_))
        ));
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","id":"0","result":null}"#),
            Ok(Message::Response(Response { id: Some(id), outcome: Ok(r) })) if id == Id::string("0") && r.get() == "null"
        ));
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse"}}"#),
            Ok(Message::Response(Response { id: None, outcome: Err(e) })) if e.code == -32700
        ));
    }

    #[test]
    fn rejects_bad_shapes_without_panicking() {
        assert!(matches!(decode("hello"), Err(DecodeError::NotJson { .. })));
        assert!(matches!(decode("[]"), Err(DecodeError::EmptyBatch)));
        assert!(single(r#"{"level":"info","msg":"log"}"#).is_err());
        assert!(single(r#"{"jsonrpc":"1.0","id":1,"method":"x"}"#).is_err());
        assert!(single(r#"{"jsonrpc":"2.0","id":1.5,"result":{}}"#).is_err());
        assert!(
            single(r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":""}}"#)
                .is_err()
        );
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","id":4,"error":{"code":"x"}}"#),
            Err(DecodeError::Invalid {
                id: Some(id),
                ..
            }) if id == Id::number(4)
        ));
        assert!(single("5").is_err());
        // Noise, whatever its "id": never a message, never an id to fail.
        for noise in [
            r#"{"id":0,"level":"info"}"#,
            r#"{"id":0,"error":"boom"}"#,
            r#"{"id":0,"result":{}}"#,
        ] {
            assert!(
                matches!(single(noise), Err(DecodeError::NotJsonRpc { .. })),
                "{noise}"
            );
        }
        assert!(matches!(
            single(r#"{"jsonrpc":"1.0","id":0,"error":{"code":1,"message":""}}"#),
            Err(DecodeError::Invalid { id: None, .. })
        ));
    }

    #[test]
    fn decodes_batches_elementwise() {
        let Incoming::Batch(items) =
            decode(r#"[{"jsonrpc":"2.0","id":1,"result":{}},7,{"jsonrpc":"2.0","method":"m"}]"#)
                .unwrap()
        else {
            panic!("not a batch")
        };
        assert_eq!(items.len(), 3);
        assert!(items[0].is_ok() && items[1].is_err() && items[2].is_ok());
    }

    #[test]
    fn error_objects_keep_data_and_unknown_members_raw() {
        let text = r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32000,"message":"m","data":{"big":12345678901234567890123,"d":1.10},"x-retry-after":5,"x-more":{"k":1e400}}}"#;
        let Ok(Message::Response(
            r @ Response {
                outcome: Err(_), ..
            },
        )) = single(text)
        else {
            panic!()
        };
        assert_eq!(Message::Response(r).to_line(), text);
        let null_data = r#"{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"","data":null}}"#;
        let Ok(m) = single(null_data) else { panic!() };
        assert_eq!(m.to_line(), null_data);
    }

    #[test]
    fn relayed_payloads_stay_byte_identical() {
        let text = r#"{"jsonrpc":"2.0","id":2,"result":{"z":12345678901234567890123,"a":1.10,"n":1e400,"x-unknown":{"k":[1.0]}}}"#;
        let Ok(Message::Response(Response { outcome: Ok(r), .. })) = single(text) else {
            panic!()
        };
        assert_eq!(
            r.get(),
            r#"{"z":12345678901234567890123,"a":1.10,"n":1e400,"x-unknown":{"k":[1.0]}}"#
        );
    }
}
