//! Era detection: the `server/discover` probe, and what each of its
//! outcomes says about the server.

use super::*;

/// How a `server/discover` probe ended.
pub(super) enum Probe {
    Stateless(Negotiated),
    /// The server speaks the handshake revisions: why we think so.
    Legacy(String),
}

/// Error codes only a server of the stateless revision sends.
pub(super) const STATELESS_ERRORS: [i64; 3] = [
    error_codes::HEADER_MISMATCH,
    error_codes::MISSING_CAPABILITY,
    error_codes::UNSUPPORTED_VERSION,
];

impl Link {
    /// Ask with `server/discover` which era the server speaks. A
    /// `DiscoverResult` or a stateless error means stateless (`-32022`: retry with
    /// a version it lists); any other error or silence means legacy. Never
    /// one error code alone: legacy servers answer -32601, -32602, -32000 …
    /// A server that exits on the probe is [`ClientError::ExitedOnProbe`]:
    /// the supervisor restarts it and speaks `initialize` to it.
    pub(super) async fn probe(
        &self,
        mut want: ProtocolVersion,
        pinned: bool,
    ) -> Result<Probe, ClientError> {
        let timeout = if pinned {
            self.opts.init_timeout
        } else {
            self.opts.probe_timeout.min(self.opts.init_timeout)
        };
        let mut refused = None;
        for _ in 0..2 {
            self.set_version(want);
            let init = CallOptions {
                timeout: Some(timeout),
                ..CallOptions::default()
            };
            let err = match self
                .stateless_request(methods::SERVER_DISCOVER, None, self.request_options(&init))
                .await
            {
                Ok(raw) => return discovered(&self.name, raw.get(), want, pinned),
                Err(e) => e,
            };
            let ClientError::Request { error, .. } = &err else {
                return Err(err);
            };
            match error {
                PeerError::Rpc(e) if e.code == error_codes::UNSUPPORTED_VERSION => {
                    let supported = supported_versions(e);
                    match pick_version(&supported) {
                        // Once more with what it lists (the same version
                        // too: a redeploy may have been under way).
                        Some(v) if !pinned || v == want => {
                            want = v;
                            refused = Some(err);
                            continue;
                        }
                        _ if pinned => {
                            return Err(ClientError::PinnedVersionRefused {
                                server: self.name.clone(),
                                pinned: want.as_str().to_owned(),
                                offered: supported.join(", "),
                            });
                        }
                        // It lists only handshake revisions.
                        _ => {
                            return Ok(Probe::Legacy(format!(
                                "it supports {}",
                                supported.join(", ")
                            )));
                        }
                    }
                }
                PeerError::Rpc(e) if STATELESS_ERRORS.contains(&e.code) => return Err(err),
                _ if pinned => return Err(err),
                PeerError::Rpc(e) => {
                    return Ok(Probe::Legacy(format!(
                        "server/discover answered {} {:?}",
                        e.code, e.message
                    )));
                }
                PeerError::Timeout { .. } => {
                    return Ok(Probe::Legacy(format!(
                        "no answer to server/discover within {timeout:?}"
                    )));
                }
                PeerError::Closed(reason) if !self.http => {
                    return Err(ClientError::ExitedOnProbe {
                        server: self.name.clone(),
                        reason: reason.to_string(),
                    });
                }
                PeerError::Transport(reason) => {
                    return Ok(Probe::Legacy(reason.clone()));
                }
                _ => return Err(err),
            }
        }
        // A server that refuses the versions it lists is broken, not legacy.
        Err(refused.unwrap_or_else(|| {
            ClientError::invalid(
                &self.name,
                methods::SERVER_DISCOVER,
                "no version was accepted",
            )
        }))
    }
}

/// Read a `server/discover` result: the newest stateless revision both
/// sides speak (`want` when pinned).
pub(super) fn discovered(
    name: &str,
    result: &str,
    want: ProtocolVersion,
    pinned: bool,
) -> Result<Probe, ClientError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct DiscoverResult {
        #[serde(default)]
        supported_versions: Vec<String>,
        #[serde(default)]
        capabilities: Option<Box<RawValue>>,
        #[serde(default)]
        instructions: Option<String>,
        #[serde(default, rename = "_meta")]
        meta: Option<Box<RawValue>>,
    }
    let d: DiscoverResult = serde_json::from_str(result)
        .map_err(|e| ClientError::invalid(name, methods::SERVER_DISCOVER, e))?;
    let version = if d.supported_versions.iter().any(|v| v == want.as_str()) {
        want
    } else {
        match pick_version(&d.supported_versions) {
            Some(v) if !pinned => v,
            _ if pinned => {
                return Err(ClientError::PinnedVersionRefused {
                    server: name.to_owned(),
                    pinned: want.as_str().to_owned(),
                    offered: d.supported_versions.join(", "),
                });
            }
            _ => {
                let listed = if d.supported_versions.is_empty() {
                    "no version".to_owned()
                } else {
                    format!("only {}", d.supported_versions.join(", "))
                };
                return Ok(Probe::Legacy(format!("server/discover lists {listed}")));
            }
        }
    };
    let capabilities_raw = d
        .capabilities
        .unwrap_or_else(mcphost_protocol::empty_object);
    let capabilities: ServerCapabilities = serde_json::from_str(capabilities_raw.get())
        .map_err(|e| ClientError::invalid(name, methods::SERVER_DISCOVER, e))?;
    let server_info = d
        .meta
        .as_deref()
        .and_then(|m| {
            raw_field::<Box<RawValue>>(m, META_SERVER_INFO)
                .ok()
                .flatten()
        })
        .unwrap_or_else(mcphost_protocol::empty_object);
    let info: InfoKey = serde_json::from_str(server_info.get()).unwrap_or_default();
    Ok(Probe::Stateless(Negotiated {
        protocol_version: version,
        capabilities,
        capabilities_raw,
        server_info,
        server_name: info.name,
        server_version: info.version,
        instructions: d.instructions,
    }))
}

pub(super) fn supported_versions(e: &ErrorObject) -> Vec<String> {
    e.data
        .as_deref()
        .and_then(|d| raw_field::<Vec<String>>(d, "supported").ok().flatten())
        .unwrap_or_default()
}

/// The newest stateless revision in `offered` that mcphost speaks.
pub(super) fn pick_version(offered: &[String]) -> Option<ProtocolVersion> {
    offered
        .iter()
        .filter_map(|v| v.parse::<ProtocolVersion>().ok())
        .filter(|v| v.era() == Era::Stateless)
        .max()
}
