//! A secret string (a token, a client secret, a private key) that `Debug`
//! never prints, so a `{:?}` in a log line cannot leak it.

use serde::{Deserialize, Serialize};

/// A secret string. `Debug` prints `"<redacted>"`; the text is read with
/// [`Secret::expose`]. Serialized as the plain string, so stored files
/// are the same as with a `String`.
#[derive(Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }

    /// The secret itself: every read of it is a visible call.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The secret, owned.
    pub fn into_inner(self) -> String {
        self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Quoted, as the `Some("<redacted>")` the hand-written impls printed.
        f.write_str("\"<redacted>\"")
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Secret {
        Secret(s)
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Secret {
        Secret(s.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_of_a_secret_does_not_show_it() {
        let s = Secret::from("hunter2");
        assert_eq!(format!("{s:?}"), "\"<redacted>\"");
        assert_eq!(format!("{:?}", Some(&s)), "Some(\"<redacted>\")");
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn a_secret_serializes_as_its_plain_string() {
        let s = Secret::from("t0k\"en");
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(text, serde_json::to_string("t0k\"en").unwrap());
        assert_eq!(serde_json::from_str::<Secret>(&text).unwrap(), s);
    }
}
