use std::fmt;
use std::str::FromStr;

/// The protocol era decides how a client talks to a server. Callers never see
/// it: `mcphost::client::ServerClient` hides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Era {
    /// `initialize` / `notifications/initialized` handshake, sessions, `ping`.
    Handshake,
    /// 2026-07-28: per-request `_meta`, `server/discover`, no sessions.
    Stateless,
}

/// Every MCP revision mcphost knows, oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProtocolVersion {
    V2024_11_05,
    V2025_03_26,
    V2025_06_18,
    V2025_11_25,
    V2026_07_28,
}

/// A revision string mcphost does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown MCP protocol revision {0:?}")]
pub struct UnknownVersion(pub String);

impl ProtocolVersion {
    pub const ALL: [ProtocolVersion; 5] = [
        Self::V2024_11_05,
        Self::V2025_03_26,
        Self::V2025_06_18,
        Self::V2025_11_25,
        Self::V2026_07_28,
    ];
    /// The newest revision spoken with the `initialize` handshake.
    pub const LATEST_HANDSHAKE: ProtocolVersion = Self::V2025_11_25;

    pub fn as_str(self) -> &'static str {
        match self {
            Self::V2024_11_05 => "2024-11-05",
            Self::V2025_03_26 => "2025-03-26",
            Self::V2025_06_18 => "2025-06-18",
            Self::V2025_11_25 => "2025-11-25",
            Self::V2026_07_28 => "2026-07-28",
        }
    }

    pub fn era(self) -> Era {
        match self {
            Self::V2026_07_28 => Era::Stateless,
            _ => Era::Handshake,
        }
    }

    /// Receiving JSON-RPC batches is required only by 2025-03-26, but we accept
    /// them from any server: rejecting costs more than tolerating.
    pub fn batches_allowed(self) -> bool {
        self == Self::V2025_03_26
    }
}

impl FromStr for ProtocolVersion {
    type Err = UnknownVersion;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| UnknownVersion(s.to_owned()))
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for ProtocolVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_revision() {
        for v in ProtocolVersion::ALL {
            assert_eq!(v.as_str().parse::<ProtocolVersion>(), Ok(v));
        }
        assert!("2025-01-01".parse::<ProtocolVersion>().is_err());
        assert_eq!(ProtocolVersion::V2026_07_28.era(), Era::Stateless);
        assert_eq!(ProtocolVersion::V2024_11_05.era(), Era::Handshake);
    }
}
