//! The handshake revisions (2024-11-05 … 2025-11-25): `initialize`, then
//! `notifications/initialized`; and how a connect decides the era.

use super::*;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct InitializeResult {
    protocol_version: String,
    #[serde(default)]
    capabilities: Option<Box<RawValue>>,
    #[serde(default)]
    server_info: Option<Box<RawValue>>,
    #[serde(default)]
    instructions: Option<String>,
}

#[derive(Deserialize, Default)]
pub(super) struct InfoKey {
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) version: Option<String>,
}

impl ServerClient {
    pub(super) async fn handshake(
        name: &str,
        conn: Connection,
        opts: ClientOptions,
    ) -> Result<Link, ClientError> {
        let http = conn.control.kind() != "stdio";
        let stateless = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Calls may have to take turns only if the server may ask for a
        // person or a model (roots are answered by a roots source instead).
        let offered = opts.host.capabilities();
        let turns = attribution::Turns::new(
            opts.attribution.server(name),
            offered.sampling.is_some() || offered.elicitation.is_some(),
        );
        let handler = Arc::new(EraHandler {
            stateless: stateless.clone(),
            host: host::HostHandler::new(name, opts.host.clone(), turns.clone()),
        });
        let peer = Peer::start(opts.peer_config(name), conn.outbound, conn.inbound, handler);
        // Subscribed before anything is sent so no early notification is
        // missed; read in order, counting (see `notes`), once connected.
        let queue = notes::Notes::new(peer.subscribe());
        let unknown = Arc::new(Negotiated {
            protocol_version: ProtocolVersion::LATEST_HANDSHAKE,
            capabilities: ServerCapabilities::default(),
            capabilities_raw: mcphost_protocol::empty_object(),
            server_info: mcphost_protocol::empty_object(),
            server_name: None,
            server_version: None,
            instructions: None,
        });
        let mut link = Link {
            name: name.to_owned(),
            peer,
            negotiated: parking_lot::Mutex::new(unknown),
            opts,
            era: Era::Handshake,
            http,
            stateless: Default::default(),
            turns,
            offered_roots: Default::default(),
            notes: queue,
        };
        let pinned = link.opts.protocol_version;
        let probe = match pinned {
            Some(v) => v.era() == Era::Stateless,
            // What an earlier start learned, else probe: the spec's
            // backwards-compatible order is stateless first.
            None => link.opts.known_era.or(link.opts.remembered_era) != Some(Era::Handshake),
        };
        let remembered = link.opts.known_era.is_none() && link.opts.remembered_era.is_some();
        if probe {
            link.era = Era::Stateless;
            stateless.store(true, std::sync::atomic::Ordering::SeqCst);
            let want = pinned.unwrap_or(ProtocolVersion::V2026_07_28);
            match link.probe(want, pinned.is_some()).await? {
                Probe::Stateless(n) => {
                    debug!(version = %n.protocol_version, server_name = ?n.server_name, "discovered");
                    *link.negotiated.lock() = Arc::new(n);
                    return Ok(link);
                }
                Probe::Legacy(why) => {
                    debug!("not the stateless revision ({why}); falling back to initialize");
                    link.era = Era::Handshake;
                    stateless.store(false, std::sync::atomic::Ordering::SeqCst);
                }
            }
        }
        let negotiated = match link.initialize().await {
            // Remembered as a handshake server, it now refuses initialize:
            // it may have become a server of the stateless revision. Or the
            // probe went unanswered in time (a slow start), and the refusal
            // lists the stateless revision: it is one.
            Err(e)
                if pinned.is_none()
                    && ((!probe && remembered && e.rpc_error().is_some())
                        || refuses_for_stateless(&e)) =>
            {
                debug!("initialize refused ({e}); asking server/discover");
                // Now known to answer: the probe gets the handshake's limit.
                link.opts.probe_timeout = link.opts.init_timeout;
                link.era = Era::Stateless;
                stateless.store(true, std::sync::atomic::Ordering::SeqCst);
                return match link.probe(ProtocolVersion::V2026_07_28, false).await? {
                    Probe::Stateless(n) => {
                        *link.negotiated.lock() = Arc::new(n);
                        Ok(link)
                    }
                    Probe::Legacy(_) => Err(e),
                };
            }
            r => r?,
        };
        debug!(version = %negotiated.protocol_version, server_name = ?negotiated.server_name, "initialized");
        *link.negotiated.lock() = Arc::new(negotiated);
        Ok(link)
    }
}

/// Read an `initialize` result: a handshake-era revision, the
/// capabilities, `serverInfo` and `instructions`.
pub(super) fn negotiate(name: &str, result: &str) -> Result<Negotiated, ClientError> {
    let init: InitializeResult = serde_json::from_str(result)
        .map_err(|e| ClientError::invalid(name, methods::INITIALIZE, e))?;
    let protocol_version = match init.protocol_version.parse::<ProtocolVersion>() {
        Ok(v) if v.era() == Era::Handshake => v,
        _ => {
            return Err(ClientError::UnsupportedVersion {
                server: name.to_owned(),
                requested: ProtocolVersion::LATEST_HANDSHAKE.as_str().to_owned(),
                offered: init.protocol_version,
            });
        }
    };
    let capabilities_raw = init
        .capabilities
        .unwrap_or_else(mcphost_protocol::empty_object);
    let capabilities: ServerCapabilities = serde_json::from_str(capabilities_raw.get())
        .map_err(|e| ClientError::invalid(name, methods::INITIALIZE, e))?;
    let server_info = init
        .server_info
        .unwrap_or_else(mcphost_protocol::empty_object);
    let info: InfoKey = serde_json::from_str(server_info.get()).unwrap_or_default();
    Ok(Negotiated {
        protocol_version,
        capabilities,
        capabilities_raw,
        server_info,
        server_name: info.name,
        server_version: info.version,
        instructions: init.instructions,
    })
}

/// `data.supported` of an `UnsupportedProtocolVersionError`.
/// `initialize` refused with -32022 by a server that lists a revision of
/// the stateless era.
pub(super) fn refuses_for_stateless(e: &ClientError) -> bool {
    e.rpc_error().is_some_and(|r| {
        r.code == error_codes::UNSUPPORTED_VERSION && pick_version(&supported_versions(r)).is_some()
    })
}

impl Link {
    /// The `initialize` handshake, then `notifications/initialized`.
    pub(super) async fn initialize(&self) -> Result<Negotiated, ClientError> {
        let name = &self.name;
        let opts = &self.opts;
        let caps: ClientCapabilities = opts.host.capabilities();
        self.offered_roots
            .store(caps.roots.is_some(), std::sync::atomic::Ordering::SeqCst);
        let requested = opts
            .protocol_version
            .unwrap_or(ProtocolVersion::LATEST_HANDSHAKE);
        let params = serde_json::json!({
            "protocolVersion": requested,
            "capabilities": caps,
            "clientInfo": opts.client_info,
        });
        let params =
            to_raw(&params).map_err(|e| ClientError::invalid(name, methods::INITIALIZE, e))?;
        let req_opts = RequestOptions {
            timeout: Some(opts.init_timeout),
            max_timeout: Some(opts.init_timeout),
            reset_timeout_on_progress: false,
            cancellable: false,
            ..Default::default()
        };
        let raw = self
            .peer
            .request(methods::INITIALIZE, Some(params), req_opts)
            .await
            .map_err(|source| ClientError::request(name, methods::INITIALIZE, source))?;
        let negotiated = negotiate(name, raw.get())?;
        if let Some(pinned) = opts.protocol_version
            && negotiated.protocol_version != pinned
        {
            return Err(ClientError::PinnedVersionRefused {
                server: name.to_owned(),
                pinned: pinned.as_str().to_owned(),
                offered: negotiated.protocol_version.as_str().to_owned(),
            });
        }
        self.peer
            .notify(methods::NOTIFICATION_INITIALIZED, None)
            .await
            .map_err(|source| {
                ClientError::request(name, methods::NOTIFICATION_INITIALIZED, source)
            })?;
        Ok(negotiated)
    }

    /// Take up the server's answer to an `initialize` the transport sent
    /// again (a renewed session).
    pub(super) fn renewed(&self, frame: &str) -> Result<(), ClientError> {
        #[derive(Deserialize)]
        struct Response<'a> {
            #[serde(borrow)]
            result: &'a RawValue,
        }
        let r: Response<'_> = serde_json::from_str(frame)
            .map_err(|e| ClientError::invalid(&self.name, methods::INITIALIZE, e))?;
        let n = negotiate(&self.name, r.result.get())?;
        debug!(version = %n.protocol_version, "session renewed");
        *self.negotiated.lock() = Arc::new(n);
        Ok(())
    }
}
