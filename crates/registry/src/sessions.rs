//! `share: per-session` servers: each session's own instance, started on
//! its first call and stopped when the session ends.

use super::*;

/// The host of a session's own instance: everything it asks belongs to that
/// session, whatever the wire says.
struct SessionHost {
    host: Arc<dyn mcphost_client::Host>,
    session: u64,
}

impl mcphost_client::Host for SessionHost {
    fn capabilities(&self) -> mcphost_protocol::ClientCapabilities {
        self.host.capabilities()
    }

    /// The owner's own capabilities: for its call, those that call
    /// declared (a stateless client declares per request).
    fn capabilities_for(&self, origin: Option<&Origin>) -> mcphost_protocol::ClientCapabilities {
        let origin = origin
            .filter(|o| o.session == self.session)
            .cloned()
            .unwrap_or(Origin {
                session: self.session,
                request: mcphost_protocol::Id::number(0),
            });
        self.host.capabilities_for(Some(&origin))
    }

    fn handle(
        &self,
        mut r: mcphost_client::HostRequest,
    ) -> mcphost_transport::BoxFuture<'static, Result<Box<RawValue>, mcphost_protocol::ErrorObject>>
    {
        let request = match &r.relation {
            mcphost_jsonrpc::Relation::Caused(o) => o.request.clone(),
            _ => mcphost_protocol::Id::number(0),
        };
        r.relation = mcphost_jsonrpc::Relation::Caused(Origin {
            session: self.session,
            request,
        });
        if r.asker == mcphost_client::Asker::Shared {
            r.asker = mcphost_client::Asker::Session(self.session);
        }
        self.host.handle(r)
    }
}

impl Registry {
    /// `sc`'s own instance for one session: its requests are that
    /// session's, and its events are nobody's (the shared instance lists).
    pub(super) fn launch_for_session(&self, sc: &ServerConfig, session: u64) -> SupervisorHandle {
        let host = Arc::new(SessionHost {
            host: self.inner.base.client.host.clone(),
            session,
        });
        let (events, _) = broadcast::channel(1);
        self.launch_with(sc, host, &events, supervisor::StartPolicy::default())
    }

    /// Whether `server` runs an instance per session (`share: per-session`).
    pub fn per_session(&self, server: &str) -> bool {
        self.read()
            .entry(server)
            .is_some_and(|e| e.config.share == Share::PerSession)
    }

    /// A session is gone: stop its own instances of `share: per-session`
    /// servers (in the background; shutdown waits for them).
    pub(super) fn drop_session_instances(&self, session: u64) {
        let handles: Vec<SupervisorHandle> = self
            .write()
            .entries
            .iter_mut()
            .filter_map(|e| e.per_session.remove(&session))
            .collect();
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            // Dropping the handles still stops the supervisors.
            return;
        };
        for h in handles {
            self.inner
                .stopping
                .spawn_on(async move { h.stop().await }, &rt);
        }
    }
}
