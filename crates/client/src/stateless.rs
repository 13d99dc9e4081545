//! The stateless revision (2026-07-28): `_meta` on every request, the
//! `input_required` rounds (MRTR), `ttlMs` revalidation and the
//! `subscriptions/listen` stream.

use super::*;

/// What to send after a first refusal that a retry can fix.
enum Retry {
    /// The same params (the headers worked out again).
    Same,
    /// The revision changed: the params built again from the caller's.
    Rebuild,
}

/// What only the stateless era keeps per server: four of the five locks
/// a client has, idle under the handshake.
#[derive(Default)]
pub(super) struct StatelessState {
    /// Per tool, the parameters mirrored into headers.
    pub(super) header_params:
        parking_lot::Mutex<std::collections::HashMap<String, Arc<headers::HeaderParams>>>,
    /// `logging/setLevel`: sent in every request's
    /// `_meta` instead.
    pub(super) log_level: parking_lot::Mutex<Option<String>>,
    /// Until when each list method's result is fresh
    /// (`ttlMs`, the shortest of its pages), and when it was fetched.
    pub(super) freshness: parking_lot::Mutex<std::collections::HashMap<&'static str, ListTtl>>,
    /// A revalidation is running.
    pub(super) revalidating: std::sync::atomic::AtomicBool,
    /// The request id of the open `subscriptions/listen`: notifications
    /// tagged with another subscription are a closed stream's leftovers.
    pub(super) listen_id: parking_lot::Mutex<Option<Arc<std::sync::OnceLock<i64>>>>,
}

/// Least time between two re-fetches of a list on access, for servers
/// whose results are stale at once (`ttlMs` 0 or absent) and that send no
/// change notifications: the client's own caching heuristic.
pub(super) const MIN_REFETCH: Duration = Duration::from_secs(1);

/// Rounds of `input_required` one request may take before it is abandoned.
pub(super) const MAX_INPUT_ROUNDS: usize = 16;

/// Refuses server requests while the stateless revision is spoken (its
/// servers must not send any); the host's handler otherwise.
pub(super) struct EraHandler {
    pub(super) stateless: Arc<std::sync::atomic::AtomicBool>,
    pub(super) host: host::HostHandler,
}

impl mcphost_jsonrpc::RequestHandler for EraHandler {
    fn handle(
        &self,
        r: mcphost_jsonrpc::IncomingRequest,
    ) -> mcphost_transport::BoxFuture<'static, Result<Box<RawValue>, mcphost_protocol::ErrorObject>>
    {
        if self.stateless.load(std::sync::atomic::Ordering::SeqCst) {
            return mcphost_jsonrpc::NoHandler.handle(r);
        }
        self.host.handle(r)
    }
}

/// The capability a `MissingRequiredClientCapabilityError` names.
pub(super) fn missing_capability(e: &ErrorObject) -> String {
    e.data
        .as_deref()
        .and_then(|d| {
            raw_field::<serde_json::Value>(d, "requiredCapabilities")
                .ok()
                .flatten()
                .or_else(|| {
                    raw_field::<serde_json::Value>(d, "capability")
                        .ok()
                        .flatten()
                })
        })
        .map(|v| match v {
            serde_json::Value::String(s) => s,
            serde_json::Value::Object(m) => m.keys().cloned().collect::<Vec<_>>().join(", "),
            other => other.to_string(),
        })
        .unwrap_or_else(|| "(not named by the server)".to_owned())
}

impl ServerClient {
    /// Re-fetch, in the background, the lists whose `ttlMs` ran out (the
    /// stateless era's caching): called when the catalog is read, never on
    /// a timer. A list the server announces changes for (`listChanged`) is
    /// re-fetched early only when its TTL was positive; one stale at once
    /// with no announcements, at most once per [`MIN_REFETCH`]. Returns
    /// whether a re-fetch started; the new lists arrive as events.
    pub fn revalidate(&self) -> bool {
        let link = &self.link;
        if link.era != Era::Stateless {
            return false;
        }
        let caps = link.negotiated().capabilities.clone();
        let announced = |c: Option<bool>| c.unwrap_or(false);
        let now = tokio::time::Instant::now();
        let stale = |method: &'static str, announced: bool| {
            let f = link.stateless.freshness.lock();
            let Some(x) = f.get(method) else { return false };
            let ttl_was_positive = x.until > x.fetched;
            if now < x.until {
                false
            } else if ttl_was_positive {
                true
            } else {
                // Stale at once: trust the announcements when there are
                // some, else re-fetch, but not more than once a second.
                !announced && now.saturating_duration_since(x.fetched) >= MIN_REFETCH
            }
        };
        let dirty = StaleLists {
            tools: caps.tools.is_some()
                && stale(
                    methods::TOOLS_LIST,
                    announced(caps.tools.as_ref().and_then(|c| c.list_changed)),
                ),
            resources: caps.resources.is_some()
                && stale(
                    methods::RESOURCES_LIST,
                    announced(caps.resources.as_ref().and_then(|c| c.list_changed)),
                ),
            prompts: caps.prompts.is_some()
                && stale(
                    methods::PROMPTS_LIST,
                    announced(caps.prompts.as_ref().and_then(|c| c.list_changed)),
                ),
        };
        if !(dirty.tools || dirty.resources || dirty.prompts) {
            return false;
        }
        if link
            .stateless
            .revalidating
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return false;
        }
        debug!(
            tools = dirty.tools,
            resources = dirty.resources,
            prompts = dirty.prompts,
            "re-fetching stale lists (ttlMs)"
        );
        let link = link.clone();
        let events = self.events.clone();
        tokio::spawn(
            async move {
                relist(&link, &events, dirty).await;
                link.stateless
                    .revalidating
                    .store(false, std::sync::atomic::Ordering::SeqCst);
            }
            .instrument(info_span!("server", server = %self.link.name)),
        );
        true
    }
}

impl Link {
    /// One request of the stateless revision: `_meta` spliced into the raw
    /// params, and `input_required` rounds answered through the host (the
    /// session whose call it is) until the result is complete.
    pub(super) fn stateless_request(
        &self,
        method: &'static str,
        params: Option<Box<RawValue>>,
        ro: RequestOptions,
    ) -> mcphost_transport::BoxFuture<'_, Result<Box<RawValue>, ClientError>> {
        // Boxed: a request may re-list tools or discover again, which send
        // requests of their own.
        Box::pin(self.stateless_request_inner(method, params, ro))
    }

    pub(super) async fn stateless_request_inner(
        &self,
        method: &'static str,
        params: Option<Box<RawValue>>,
        ro: RequestOptions,
    ) -> Result<Box<RawValue>, ClientError> {
        let invalid = |e: String| ClientError::invalid(&self.name, method, e);
        let original = params;
        let mut ro = ro;
        let mut base = self.with_meta(method, original.as_deref(), ro.origin.as_ref())?;
        ro.stateless = self.stateless_headers(method, &base);
        let mut params = base.clone();
        let mut retried = false;
        let mut rounds = 0;
        while rounds < MAX_INPUT_ROUNDS {
            let raw = match self
                .peer
                .request(method, Some(params.clone()), ro.clone())
                .await
            {
                Ok(raw) => raw,
                Err(PeerError::Rpc(e)) if !retried && method != methods::SERVER_DISCOVER => {
                    retried = true;
                    if let Retry::Rebuild = self.after_refusal(method, e).await? {
                        base = self.with_meta(method, original.as_deref(), ro.origin.as_ref())?;
                        params = base.clone();
                    }
                    ro.stateless = self.stateless_headers(method, &base);
                    continue;
                }
                Err(source) => return Err(ClientError::request(&self.name, method, source)),
            };
            let kind: Option<String> =
                raw_field(&raw, "resultType").map_err(|e| invalid(e.to_string()))?;
            match kind.as_deref() {
                None | Some("complete") => return Ok(raw),
                Some("input_required")
                    if matches!(
                        method,
                        methods::TOOLS_CALL | methods::RESOURCES_READ | methods::PROMPTS_GET
                    ) =>
                {
                    rounds += 1;
                    // The same params, answered, under a new id.
                    params = self
                        .answered(method, &raw, &base, ro.origin.as_ref())
                        .await?;
                }
                Some(other) => {
                    return Err(invalid(format!(
                        "resultType {other:?} is not one this client handles for {method}"
                    )));
                }
            }
        }
        Err(invalid(format!(
            "the server asked for input {MAX_INPUT_ROUNDS} times without completing"
        )))
    }

    /// The server refused a request of ours for the first time: fix what a
    /// retry can fix (its tools' `x-mcp-header` parameters changed: list
    /// them again; it was redeployed with other revisions: discover
    /// again), else the error the call ends with.
    async fn after_refusal(
        &self,
        method: &'static str,
        e: ErrorObject,
    ) -> Result<Retry, ClientError> {
        match e.code {
            error_codes::HEADER_MISMATCH if method == methods::TOOLS_CALL => {
                debug!("header mismatch: re-listing tools, then retrying once");
                let _ = self.list_tools().await;
                Ok(Retry::Same)
            }
            error_codes::UNSUPPORTED_VERSION => {
                let supported = supported_versions(&e);
                let Some(v) = pick_version(&supported) else {
                    return Err(ClientError::request(&self.name, method, PeerError::Rpc(e)));
                };
                if let Probe::Stateless(n) =
                    self.probe(v, self.opts.protocol_version.is_some()).await?
                {
                    debug!(version = %n.protocol_version, "the server changed its revision");
                    *self.negotiated.lock() = Arc::new(n);
                }
                Ok(Retry::Rebuild)
            }
            error_codes::MISSING_CAPABILITY => Err(ClientError::MissingCapability {
                server: self.name.clone(),
                method,
                capability: missing_capability(&e),
                error: Box::new(e),
            }),
            _ => Err(ClientError::request(&self.name, method, PeerError::Rpc(e))),
        }
    }

    /// The params of the next round after an `input_required` result: the
    /// caller's (`base`) with the host's answers and the server's
    /// `requestState`.
    async fn answered(
        &self,
        method: &'static str,
        raw: &RawValue,
        base: &RawValue,
        origin: Option<&Origin>,
    ) -> Result<Box<RawValue>, ClientError> {
        let invalid = |e: String| ClientError::invalid(&self.name, method, e);
        let requests: Option<Box<RawValue>> =
            raw_field(raw, "inputRequests").map_err(|e| invalid(e.to_string()))?;
        let state: Option<Box<RawValue>> =
            raw_field(raw, "requestState").map_err(|e| invalid(e.to_string()))?;
        let mut fields = Vec::new();
        // Only a requestState: retry at once.
        if requests.is_some() {
            let responses = self.answer_inputs(raw, origin).await?;
            fields.push(("inputResponses".to_owned(), responses));
        }
        if let Some(state) = state {
            fields.push(("requestState".to_owned(), state));
        }
        set_fields(Some(base), fields).map_err(|e| invalid(e.to_string()))
    }

    /// Answer every `inputRequests` entry of an `input_required` result
    /// through the host: `{key: result}`.
    pub(super) async fn answer_inputs(
        &self,
        result: &RawValue,
        origin: Option<&Origin>,
    ) -> Result<Box<RawValue>, ClientError> {
        #[derive(Deserialize)]
        struct InputRequest {
            method: String,
            #[serde(default)]
            params: Option<Box<RawValue>>,
        }
        let requests: indexmap::IndexMap<String, InputRequest> = raw_field(result, "inputRequests")
            .map_err(|e| ClientError::invalid(&self.name, "inputRequests", e))?
            .unwrap_or_default();
        let caps = self.opts.host.capabilities();
        let mut answers = Vec::with_capacity(requests.len());
        for (key, r) in requests {
            if !caps.handles(&r.method) {
                return Err(ClientError::invalid(
                    &self.name,
                    "inputRequests",
                    format!(
                        "the server asked for {} ({key}), which was not declared",
                        r.method
                    ),
                ));
            }
            let relation = match origin {
                Some(o) => mcphost_jsonrpc::Relation::Caused(o.clone()),
                None => mcphost_jsonrpc::Relation::Unrelated,
            };
            let answer = self
                .opts
                .host
                .handle(HostRequest {
                    server: self.name.clone(),
                    method: r.method.clone(),
                    params: r.params,
                    relation,
                    asker: host::Asker::Request,
                })
                .await
                .map_err(|e| {
                    ClientError::request(
                        &self.name,
                        "inputRequests",
                        mcphost_jsonrpc::PeerError::Rpc(e),
                    )
                })?;
            answers.push((key, answer));
        }
        set_fields(None, answers).map_err(|e| ClientError::invalid(&self.name, "inputRequests", e))
    }

    /// Whether `n` may be taken up: untagged, or tagged with the open
    /// `subscriptions/listen` (on stdio every stream shares one channel).
    pub(super) fn current_subscription(&self, n: &Notification) -> bool {
        if self.era != Era::Stateless {
            return true;
        }
        let tag = n
            .params
            .as_deref()
            .and_then(|p| raw_field::<Box<RawValue>>(p, "_meta").ok().flatten())
            .and_then(|m| {
                raw_field::<mcphost_protocol::Id>(&m, META_SUBSCRIPTION_ID)
                    .ok()
                    .flatten()
            });
        let Some(tag) = tag else { return true };
        let open = self
            .stateless
            .listen_id
            .lock()
            .as_ref()
            .and_then(|id| id.get().copied());
        open.is_some_and(|id| tag.as_number() == Some(id))
    }

    /// `params` with the stateless revision's `_meta`: version, the
    /// capabilities of the caller (`origin`), clientInfo, the log level.
    pub(super) fn with_meta(
        &self,
        method: &str,
        params: Option<&RawValue>,
        origin: Option<&Origin>,
    ) -> Result<Box<RawValue>, ClientError> {
        let caps = self.opts.host.capabilities_for(origin);
        let mut meta = vec![
            (
                META_PROTOCOL_VERSION.to_owned(),
                self.encode(method, self.negotiated().protocol_version.as_str())?,
            ),
            (
                META_CLIENT_CAPABILITIES.to_owned(),
                self.encode(method, &caps)?,
            ),
            (
                META_CLIENT_INFO.to_owned(),
                self.encode(method, &self.opts.client_info)?,
            ),
        ];
        let level = self.stateless.log_level.lock().clone();
        if let Some(level) = level {
            meta.push((META_LOG_LEVEL.to_owned(), self.encode(method, &level)?));
        }
        set_meta(params, meta).map_err(|e| ClientError::invalid(&self.name, method, e))
    }

    /// What the HTTP transport mirrors into headers for this request.
    pub(super) fn stateless_headers(
        &self,
        method: &str,
        params: &RawValue,
    ) -> Option<Box<mcphost_transport::StatelessHeaders>> {
        // stdio has no headers: nothing to work out per request.
        if !self.http {
            return None;
        }
        let headers = headers::headers(
            self.negotiated().protocol_version.as_str(),
            method,
            params,
            |tool| self.stateless.header_params.lock().get(tool).cloned(),
        );
        Some(Box::new(headers))
    }
}

/// Longest wait before listening again after a dropped stream.
pub(super) const MAX_LISTEN_BACKOFF: Duration = Duration::from_secs(30);

/// The stateless revision's change notifications: one
/// `subscriptions/listen` at a time, asking for what the server declared
/// and the subscribed resource URIs; listened to again (with backoff) when
/// the stream drops, and at once when the URIs change. Its notifications
/// reach the [`Pump`] like those of the handshake.
pub(super) async fn listen(
    link: Arc<Link>,
    mut subs: tokio::sync::watch::Receiver<std::collections::BTreeSet<String>>,
    events: Arc<Feed<ServerEvent>>,
) {
    let mut backoff = Duration::from_millis(250);
    let mut dropped = false;
    loop {
        let caps = link.negotiated().capabilities.clone();
        let changed = |c: Option<bool>| c.unwrap_or(false);
        let uris: Vec<String> = subs.borrow_and_update().iter().cloned().collect();
        let mut filter = serde_json::Map::new();
        if changed(caps.tools.as_ref().and_then(|t| t.list_changed)) {
            filter.insert("toolsListChanged".into(), true.into());
        }
        if changed(caps.prompts.as_ref().and_then(|t| t.list_changed)) {
            filter.insert("promptsListChanged".into(), true.into());
        }
        if changed(caps.resources.as_ref().and_then(|t| t.list_changed)) {
            filter.insert("resourcesListChanged".into(), true.into());
        }
        if !uris.is_empty() {
            filter.insert("resourceSubscriptions".into(), uris.into());
        }
        if filter.is_empty() {
            // Nothing to listen for until a resource is subscribed.
            if subs.changed().await.is_err() {
                return;
            }
            continue;
        }
        let Ok(params) = to_raw(&serde_json::json!({ "notifications": filter })) else {
            return;
        };
        if dropped {
            // Changes while no stream was open were missed.
            relist(
                &link,
                &events,
                StaleLists {
                    tools: true,
                    resources: true,
                    prompts: true,
                },
            )
            .await;
        }
        let cancel = CancellationToken::new();
        let opts = CallOptions {
            // A stream with no end: only a drop, the server or we end it.
            timeout: Some(Duration::MAX),
            cancel: Some(cancel.clone()),
            ..CallOptions::default()
        };
        let mut ro = link.request_options(&opts);
        ro.max_timeout = Some(Duration::MAX);
        ro.ended_by_cancel = true;
        let id = Arc::new(std::sync::OnceLock::new());
        ro.sent_as = Some(id.clone());
        *link.stateless.listen_id.lock() = Some(id);
        let started = tokio::time::Instant::now();
        tokio::select! {
            r = link.stateless_request(methods::SUBSCRIPTIONS_LISTEN, Some(params), ro) => {
                match r {
                    Ok(_) => debug!("the server ended subscriptions/listen"),
                    Err(e) => warn!("subscriptions/listen ended: {e}"),
                }
                if link.peer.close_reason().is_some() {
                    return;
                }
                dropped = true;
                if started.elapsed() > MAX_LISTEN_BACKOFF {
                    backoff = Duration::from_millis(250);
                }
                tokio::time::sleep(backoff).await;
                backoff = backoff.saturating_mul(2).min(MAX_LISTEN_BACKOFF);
            }
            c = subs.changed() => {
                cancel.cancel();
                if c.is_err() {
                    return;
                }
            }
            _ = link.peer.closed() => return,
        }
    }
}
