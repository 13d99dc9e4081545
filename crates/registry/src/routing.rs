//! Routing: which instance of which server a call, a prompt or a
//! completion goes to (the shared one or the session's own), and the ready
//! clients the engine fans out to.

use super::*;

impl Registry {
    pub(super) fn handle(&self, server: &str) -> Result<SupervisorHandle, RegistryError> {
        let st = self.read();
        if let Some(e) = st.entry(server) {
            return Ok(e.handle.clone());
        }
        // A broken entry is known: say what is wrong with it.
        match st.broken.iter().find(|b| b.name == server) {
            Some(b) => Err(RegistryError::Unavailable(b.unavailable_reason())),
            None => Err(RegistryError::UnknownServer(server.to_owned())),
        }
    }

    /// The ready client of `server`, or why it is not there.
    pub fn client(&self, server: &str) -> Result<Arc<ServerClient>, RegistryError> {
        self.handle(server)?
            .client()
            .map_err(|st| RegistryError::Unavailable(st.unavailable_reason()))
    }

    /// The ready client of `server` for a call with this timeout (`None`:
    /// the server's request timeout). A server that is starting or
    /// restarting is waited for, up to that timeout; the call then gets
    /// what is left of it.
    /// A call that `origin` caused to a `share: per-session` server goes
    /// to that session's own instance, started on its first call.
    pub(super) async fn client_for_call(
        &self,
        server: &str,
        timeout: Option<Duration>,
        origin: Option<&Origin>,
    ) -> Result<(Arc<ServerClient>, Option<Duration>), RegistryError> {
        let shared = {
            let st = self.read();
            let e = st
                .entry(server)
                .ok_or_else(|| RegistryError::UnknownServer(server.to_owned()))?;
            let own_instance = origin.is_some() && e.config.share == Share::PerSession;
            (!own_instance).then(|| (e.handle.clone(), e.config.timeouts.request))
        };
        let (handle, default) = if let Some(shared) = shared {
            shared
        } else {
            let mut st = self.write();
            let closed = self.inner.closed.load(Ordering::SeqCst);
            let e = st
                .entries
                .iter_mut()
                .find(|e| e.config.name == server)
                .ok_or_else(|| RegistryError::UnknownServer(server.to_owned()))?;
            let handle = match origin {
                Some(o) if e.config.share == Share::PerSession && !e.config.disabled && !closed => {
                    let cfg = e.config.clone();
                    e.per_session
                        .entry(o.session)
                        .or_insert_with(|| {
                            info!(
                                server,
                                session = o.session,
                                "starting the session's own instance"
                            );
                            self.launch_for_session(&cfg, o.session)
                        })
                        .clone()
                }
                _ => e.handle.clone(),
            };
            (handle, e.config.timeouts.request)
        };
        handle.touch();
        if let Ok(c) = handle.client() {
            return Ok((c, timeout));
        }
        // An idle server is started for this call: it may take its start
        // limit, and the call still gets its whole timeout after.
        if let Some(init) = self.idle_start_limit(server, &handle) {
            let client = handle
                .ready_client(init)
                .await
                .map_err(|st| RegistryError::Unavailable(st.unavailable_reason()))?;
            return Ok((client, timeout));
        }
        let limit = timeout.unwrap_or(default);
        let waited = tokio::time::Instant::now();
        let client = handle
            .ready_client(limit)
            .await
            .map_err(|st| RegistryError::Unavailable(st.unavailable_reason()))?;
        Ok((client, Some(limit.saturating_sub(waited.elapsed()))))
    }

    /// Call a tool by its catalog name.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Option<Box<RawValue>>,
        opts: CallOptions,
    ) -> Result<ToolResult, RegistryError> {
        let route = self
            .inner
            .published
            .catalog
            .load()
            .route(name)
            .cloned()
            .ok_or_else(|| self.unknown(name, false))?;
        let (client, timeout) = self
            .client_for_call(&route.server, opts.timeout, opts.origin.as_ref())
            .await?;
        let opts = CallOptions { timeout, ..opts };
        let r = client.call_tool(&route.tool, arguments, opts).await?;
        let raw = self.expose_uris(&route.server, r.raw, resources::ResultShape::Tool);
        Ok(ToolResult { raw, ..r })
    }

    /// Get a prompt by its catalog name.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: Option<Box<RawValue>>,
        opts: CallOptions,
    ) -> Result<Box<RawValue>, RegistryError> {
        let route = self
            .prompts()
            .route(name)
            .cloned()
            .ok_or_else(|| self.unknown(name, true))?;
        let (client, timeout) = self
            .client_for_call(&route.server, opts.timeout, opts.origin.as_ref())
            .await?;
        let opts = CallOptions { timeout, ..opts };
        let raw = client.get_prompt(&route.tool, arguments, opts).await?;
        Ok(self.expose_uris(&route.server, raw, resources::ResultShape::Prompt))
    }

    /// `completion/complete`, routed by its `ref`: a prompt's catalog name
    /// is turned back into the server's own; a resource URI goes where
    /// `resources/read` would send it.
    pub async fn complete(
        &self,
        params: &RawValue,
        opts: CallOptions,
    ) -> Result<Box<RawValue>, RegistryError> {
        use mcphost_protocol::{raw_field, set_fields, to_raw};
        let bad = |m: String| {
            RegistryError::Client(ClientError::Invalid {
                server: String::new(),
                method: "completion/complete".to_owned(),
                reason: m,
            })
        };
        let r: Box<RawValue> = raw_field(params, "ref")
            .map_err(|e| bad(e.to_string()))?
            .ok_or_else(|| bad("missing ref".to_owned()))?;
        let kind: Option<String> = raw_field(&r, "type").map_err(|e| bad(e.to_string()))?;
        let (server, new_ref) = match kind.as_deref() {
            Some("ref/prompt") => {
                let name: String = raw_field(&r, "name")
                    .map_err(|e| bad(e.to_string()))?
                    .unwrap_or_default();
                let route = self
                    .prompts()
                    .route(&name)
                    .cloned()
                    .ok_or(RegistryError::UnknownPrompt(name))?;
                let own = to_raw(&route.tool).map_err(|e| bad(e.to_string()))?;
                let new_ref = set_fields(Some(&r), [("name".to_owned(), own)])
                    .map_err(|e| bad(e.to_string()))?;
                (route.server, new_ref)
            }
            Some("ref/resource") => {
                let uri: String = raw_field(&r, "uri")
                    .map_err(|e| bad(e.to_string()))?
                    .unwrap_or_default();
                let route = self.resolve_resource_ref(&uri)?;
                let new_ref = if route.uri == uri {
                    r
                } else {
                    let own = to_raw(&route.uri).map_err(|e| bad(e.to_string()))?;
                    set_fields(Some(&r), [("uri".to_owned(), own)])
                        .map_err(|e| bad(e.to_string()))?
                };
                (route.server, new_ref)
            }
            other => return Err(bad(format!("unsupported ref type {other:?}"))),
        };
        let params = set_fields(Some(params), [("ref".to_owned(), new_ref)])
            .map_err(|e| bad(e.to_string()))?;
        let (client, timeout) = self
            .client_for_call(&server, opts.timeout, opts.origin.as_ref())
            .await?;
        let opts = CallOptions { timeout, ..opts };
        Ok(client.complete_with(params, opts).await?)
    }

    /// Why `name` has no route: withheld by its pins, or not listed at all.
    fn unknown(&self, name: &str, prompt: bool) -> RegistryError {
        match (self.withheld(name, prompt), prompt) {
            (Some((server, own)), _) => RegistryError::Withheld {
                kind: if prompt { "prompt" } else { "tool" },
                server,
                name: own,
            },
            (None, false) => RegistryError::UnknownTool(name.to_owned()),
            (None, true) => RegistryError::UnknownPrompt(name.to_owned()),
        }
    }

    /// The clients of every ready server, in config order.
    pub(super) fn ready_clients(&self) -> Vec<Arc<ServerClient>> {
        self.read()
            .entries
            .iter()
            .filter_map(|e| e.handle.client().ok())
            .collect()
    }

    /// Every ready server instance that was offered roots: the shared
    /// ones, and each session's own (`share: per-session`).
    pub fn roots_clients(&self) -> Vec<RootsClient> {
        let st = self.read();
        let mut out = Vec::new();
        for e in &st.entries {
            let instances = e.per_session.iter().map(|(s, h)| (Some(*s), h));
            for (session, h) in std::iter::once((None, &e.handle)).chain(instances) {
                if let Ok(client) = h.client()
                    && client.offered_roots()
                {
                    out.push(RootsClient {
                        server: e.config.name.clone(),
                        session,
                        client,
                    });
                }
            }
        }
        out
    }
}
