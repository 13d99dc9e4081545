//! Capabilities. The flags we act on are typed; the whole object is kept raw
//! so hosts see exactly what the server declared.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// What a server declared in its `initialize` result.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerCapabilities {
    #[serde(default)]
    pub tools: Option<ListChangedCap>,
    #[serde(default)]
    pub resources: Option<ResourcesCap>,
    #[serde(default)]
    pub prompts: Option<ListChangedCap>,
    #[serde(default)]
    pub logging: Option<Box<RawValue>>,
    #[serde(default)]
    pub completions: Option<Box<RawValue>>,
    #[serde(default)]
    pub tasks: Option<Box<RawValue>>,
    #[serde(default)]
    pub experimental: Option<Box<RawValue>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListChangedCap {
    #[serde(default)]
    pub list_changed: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourcesCap {
    #[serde(default)]
    pub subscribe: Option<bool>,
    #[serde(default)]
    pub list_changed: Option<bool>,
}

/// The client capabilities a host has enabled. Only these are advertised.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct ClientCapabilities {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roots: Option<RootsCap>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampling: Option<SamplingCap>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elicitation: Option<ElicitationCap>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct RootsCap {
    pub list_changed: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct SamplingCap {}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct ElicitationCap {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub form: Option<Empty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<Empty>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct Empty {}

impl ClientCapabilities {
    /// Whether the host can serve a server→client request for `method`.
    pub fn handles(&self, method: &str) -> bool {
        use super::methods::*;
        match method {
            ROOTS_LIST => self.roots.is_some(),
            SAMPLING_CREATE_MESSAGE => self.sampling.is_some(),
            ELICITATION_CREATE => self.elicitation.is_some(),
            _ => false,
        }
    }

    /// Whether the host can serve an `elicitation/create` in `mode`
    /// (`None`: form). A bare `elicitation: {}` means form only.
    pub fn elicits(&self, mode: Option<&str>) -> bool {
        let Some(e) = &self.elicitation else {
            return false;
        };
        match mode.unwrap_or("form") {
            "url" => e.url.is_some(),
            "form" => e.form.is_some() || e.url.is_none(),
            _ => false,
        }
    }
}
