//! Editing raw JSON without re-serialising what we do not touch.
//!
//! Values stay [`RawValue`] text; only the top-level keys being edited are
//! replaced. Key order and every untouched value survive byte for byte.

use indexmap::IndexMap;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

#[derive(Debug, thiserror::Error)]
pub enum RawError {
    #[error("expected a JSON object: {0}")]
    NotAnObject(serde_json::Error),
    #[error("field {field:?} has an unexpected shape: {source}")]
    Field {
        field: String,
        source: serde_json::Error,
    },
    #[error("cannot encode JSON: {0}")]
    Encode(serde_json::Error),
}

/// Serialise a value we own (never a relayed payload) to raw text.
pub fn to_raw<T: Serialize + ?Sized>(value: &T) -> Result<Box<RawValue>, RawError> {
    serde_json::value::to_raw_value(value).map_err(RawError::Encode)
}

/// `{}` as a raw value.
pub fn empty_object() -> Box<RawValue> {
    RawValue::from_string("{}".to_owned()).unwrap_or_else(|_| unreachable_raw())
}

fn unreachable_raw() -> Box<RawValue> {
    // `{}` is valid JSON; this branch exists only to avoid `unwrap`.
    Box::<RawValue>::default()
}

/// Read one top-level field of a raw object; `Ok(None)` when it is absent.
/// Other members are skipped without being collected, so this costs one
/// scan of the text and no allocation per key.
pub fn raw_field<T: DeserializeOwned>(obj: &RawValue, field: &str) -> Result<Option<T>, RawError> {
    let mut de = serde_json::Deserializer::from_str(obj.get());
    let found = serde::Deserializer::deserialize_map(&mut de, FieldSeek(field))
        .and_then(|v| de.end().map(|()| v))
        .map_err(RawError::NotAnObject)?;
    match found {
        None => Ok(None),
        Some(v) => serde_json::from_str(v.get())
            .map(Some)
            .map_err(|source| RawError::Field {
                field: field.to_owned(),
                source,
            }),
    }
}

/// Visits an object's members and keeps the raw value of one key (the last,
/// if a key repeats, as a map would).
struct FieldSeek<'f>(&'f str);

impl<'de> serde::de::Visitor<'de> for FieldSeek<'_> {
    type Value = Option<Box<RawValue>>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == self.0 {
                found = Some(map.next_value::<Box<RawValue>>()?);
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// Return `obj` with the given top-level fields set (replaced in place, or
/// appended in order). `obj = None` starts from `{}`.
pub fn set_fields(
    obj: Option<&RawValue>,
    fields: impl IntoIterator<Item = (String, Box<RawValue>)>,
) -> Result<Box<RawValue>, RawError> {
    let mut map: IndexMap<String, Box<RawValue>> = match obj {
        Some(o) => serde_json::from_str(o.get()).map_err(RawError::NotAnObject)?,
        None => IndexMap::new(),
    };
    for (k, v) in fields {
        map.insert(k, v);
    }
    to_raw(&map)
}

/// Return `params` with the given members set in its `_meta` object (made
/// if missing); everything else verbatim. `params = None` starts from `{}`.
pub fn set_meta(
    params: Option<&RawValue>,
    members: impl IntoIterator<Item = (String, Box<RawValue>)>,
) -> Result<Box<RawValue>, RawError> {
    let meta = match params {
        Some(p) => raw_field::<Box<RawValue>>(p, "_meta")?,
        None => None,
    };
    let meta = set_fields(meta.as_deref(), members)?;
    set_fields(params, [("_meta".to_owned(), meta)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_fields_keeps_everything_else_verbatim() {
        let src =
            r#"{"z":12345678901234567890123,"name":"a","d":1.10,"big":1e400,"u":{"k":[1.0]}}"#;
        let raw = RawValue::from_string(src.to_owned()).unwrap();
        let name = to_raw("srv__a").unwrap();
        let out = set_fields(Some(&raw), [("name".to_owned(), name)]).unwrap();
        assert_eq!(
            out.get(),
            r#"{"z":12345678901234567890123,"name":"srv__a","d":1.10,"big":1e400,"u":{"k":[1.0]}}"#
        );
        let n: Option<String> = raw_field(&out, "name").unwrap();
        assert_eq!(n.as_deref(), Some("srv__a"));
        assert!(raw_field::<String>(&out, "missing").unwrap().is_none());
        assert!(set_fields(Some(&to_raw(&[1]).unwrap()), []).is_err());
    }

    #[test]
    fn raw_field_skips_what_it_does_not_read() {
        let raw = RawValue::from_string(
            r#"{"big":1e400,"k\u0065y":1,"x":{"key":9},"key":2,"after":[1e400]}"#.to_owned(),
        )
        .unwrap();
        // The last of a repeated key wins, as in a map; escapes are decoded.
        assert_eq!(raw_field::<u32>(&raw, "key").unwrap(), Some(2));
        assert!(raw_field::<u32>(&raw, "nope").unwrap().is_none());
        assert!(raw_field::<u32>(&raw, "x").is_err());
        let bad = RawValue::from_string("[1]".to_owned()).unwrap();
        assert!(matches!(
            raw_field::<u32>(&bad, "k"),
            Err(RawError::NotAnObject(_))
        ));
    }
}
