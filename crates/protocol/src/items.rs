//! Catalog items and results. Each keeps the server's whole object as raw
//! text and types only the key the engine routes by.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use super::raw::{RawError, raw_field};

macro_rules! raw_item {
    ($(#[$doc:meta])* $ty:ident, $key_ty:ident { $($field:ident : $fty:ty = $json:literal),+ }) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $ty {
            $(pub $field: $fty,)+
            /// The server's object, untouched.
            pub raw: Box<RawValue>,
        }

        #[derive(Deserialize)]
        struct $key_ty {
            $(#[serde(rename = $json)] $field: $fty,)+
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let raw = Box::<RawValue>::deserialize(d)?;
                let k: $key_ty = serde_json::from_str(raw.get()).map_err(serde::de::Error::custom)?;
                Ok($ty { $($field: k.$field,)+ raw })
            }
        }

        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                self.raw.serialize(s)
            }
        }
    };
}

raw_item!(
    /// A tool as the server listed it.
    Tool, ToolKey { name: String = "name" }
);
raw_item!(
    /// A resource as the server listed it.
    Resource, ResourceKey { uri: String = "uri", name: Option<String> = "name" }
);
raw_item!(
    /// A resource template as the server listed it.
    ResourceTemplate, ResourceTemplateKey { uri_template: String = "uriTemplate", name: Option<String> = "name" }
);
raw_item!(
    /// A prompt as the server listed it.
    Prompt, PromptKey { name: String = "name" }
);

/// A `tools/call` result. `isError: true` is a tool-level failure the model
/// should see, not a protocol error.
#[derive(Debug, Clone)]
pub struct ToolResult {
    pub is_error: bool,
    pub raw: Box<RawValue>,
}

impl ToolResult {
    pub fn from_raw(raw: Box<RawValue>) -> Result<Self, RawError> {
        let is_error = raw_field::<Option<bool>>(&raw, "isError")?
            .flatten()
            .unwrap_or(false);
        Ok(ToolResult { is_error, raw })
    }

    /// `structuredContent`, raw, when present.
    pub fn structured_content(&self) -> Option<Box<RawValue>> {
        raw_field(&self.raw, "structuredContent").ok().flatten()
    }
}

impl Serialize for ToolResult {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_keep_the_whole_object() {
        let text = r#"{"name":"t","inputSchema":{"type":"object","properties":{"n":{"default":12345678901234567890123,"multipleOf":0.10,"maximum":1e400}}},"x-extra":true}"#;
        let t: Tool = serde_json::from_str(text).unwrap();
        assert_eq!(t.name, "t");
        assert_eq!(serde_json::to_string(&t).unwrap(), text);
        assert!(serde_json::from_str::<Tool>(r#"{"title":"no name"}"#).is_err());
        let r = ToolResult::from_raw(
            RawValue::from_string(r#"{"content":[],"isError":true}"#.into()).unwrap(),
        )
        .unwrap();
        assert!(r.is_error);
    }
}
