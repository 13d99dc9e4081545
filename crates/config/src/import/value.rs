//! A JSON/YAML value that keeps the file's key order (serde_json's `Map`
//! sorts its keys in this build), so servers are imported, and their `env`
//! written, in the order their file lists them.

use indexmap::IndexMap;

pub(super) type Map = IndexMap<String, Value>;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Value {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Value>),
    Object(Map),
}

impl Value {
    pub(super) fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(m) => m.get(key),
            _ => None,
        }
    }

    pub(super) fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub(super) fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub(super) fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Number(n) => n.as_u64(),
            _ => None,
        }
    }

    pub(super) fn as_array(&self) -> Option<&Vec<Value>> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    pub(super) fn as_object(&self) -> Option<&Map> {
        match self {
            Value::Object(m) => Some(m),
            _ => None,
        }
    }

    pub(super) fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// As serde_json's value (for comparing entries; order does not matter there).
    pub(super) fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Number(n) => serde_json::Value::Number(n.clone()),
            Value::String(s) => serde_json::Value::String(s.clone()),
            Value::Array(a) => serde_json::Value::Array(a.iter().map(Value::to_json).collect()),
            Value::Object(m) => {
                serde_json::Value::Object(m.iter().map(|(k, v)| (k.clone(), v.to_json())).collect())
            }
        }
    }

    /// From YAML; keys that are numbers or booleans become their text,
    /// other non-string keys are left out (no host writes them).
    pub(super) fn from_yaml(v: serde_norway::Value) -> Value {
        use serde_norway::Value as Y;
        match v {
            Y::Null => Value::Null,
            Y::Bool(b) => Value::Bool(b),
            Y::Number(n) => {
                let number = if let Some(u) = n.as_u64() {
                    Some(serde_json::Number::from(u))
                } else if let Some(i) = n.as_i64() {
                    Some(serde_json::Number::from(i))
                } else {
                    n.as_f64().and_then(serde_json::Number::from_f64)
                };
                number.map(Value::Number).unwrap_or(Value::Null)
            }
            Y::String(s) => Value::String(s),
            Y::Sequence(items) => Value::Array(items.into_iter().map(Value::from_yaml).collect()),
            Y::Mapping(m) => Value::Object(
                m.into_iter()
                    .filter_map(|(k, v)| {
                        let key = match k {
                            Y::String(s) => s,
                            Y::Number(n) => n.to_string(),
                            Y::Bool(b) => b.to_string(),
                            _ => return None,
                        };
                        Some((key, Value::from_yaml(v)))
                    })
                    .collect(),
            ),
            Y::Tagged(t) => Value::from_yaml(t.value),
        }
    }
}
