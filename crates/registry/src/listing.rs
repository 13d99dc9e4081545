//! Listing: following the supervisors' events, fetching a ready server's
//! lists and publishing the catalogs built from them.

use super::*;

impl Registry {
    /// Whether `server`'s current entry is the instance `generation`:
    /// `None` when no entry has that name (removed).
    pub(super) fn is_current(&self, server: &str, generation: u64) -> Option<bool> {
        self.read()
            .entry(server)
            .map(|e| e.handle.generation() == generation)
    }

    pub(super) fn send_state(&self, server: &str) {
        let status = self.read().entry(server).map(ManagedServer::status);
        if let Some(s) = status {
            let _ = self.inner.events.send(RegistryEvent::ServerState(s));
        }
    }

    /// Follows the shared instances' supervisor events for the registry's
    /// life: lists servers, publishes the catalog, forwards news to clients.
    pub(super) async fn follow_supervisors(self, mut rx: broadcast::Receiver<SupervisorEvent>) {
        loop {
            // Each event may rebuild the catalog (synchronous work) and wake
            // the sessions that forward it. Yield between events, or under
            // churn those sessions wait in this worker's LIFO slot, which no
            // other worker steals, until the coop budget runs out (~1 s).
            tokio::task::yield_now().await;
            match rx.recv().await {
                Ok(ev) => self.on_supervisor_event(ev),
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    warn!(
                        missed = n,
                        "registry fell behind its supervisors; resyncing"
                    );
                    self.resync();
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    pub(super) fn on_supervisor_event(&self, ev: SupervisorEvent) {
        // A replaced or removed instance's last words are still its
        // server's output.
        if let SupervisorEvent::Stderr { server, line, .. } = ev {
            let _ = self
                .inner
                .events
                .send(RegistryEvent::Stderr { server, line });
            return;
        }
        let (server, generation) = ev.source();
        match self.is_current(server, generation) {
            Some(true) => {}
            // A removed server's last states still interest clients.
            None => {
                if let SupervisorEvent::State(status) = ev {
                    let _ = self.inner.events.send(RegistryEvent::ServerState(status));
                }
                return;
            }
            // An instance a reload replaced: its news is not the server's.
            Some(false) => {
                debug!(
                    server,
                    generation, "dropping an event of a replaced instance"
                );
                return;
            }
        }
        match ev {
            SupervisorEvent::State(status) => {
                if status.state != ServerState::Ready {
                    self.unlisted(&status.name, status.generation);
                } else if !self.is_listed(&status.name, status.generation) {
                    // Announced by `refresh` once the catalog has its lists.
                    return;
                }
                // This transition, not the latest state: clients see each.
                let _ = self.inner.events.send(RegistryEvent::ServerState(status));
            }
            SupervisorEvent::Connected { server, generation } => {
                self.resubscribe(&server);
                self.log_level_on_connect(&server);
                self.spawn_refresh(server, generation);
            }
            SupervisorEvent::Changed {
                server,
                generation,
                event,
            } => self.on_server_changed(server, generation, event),
            SupervisorEvent::Stderr { .. } => {}
        }
    }

    /// A current instance's notification: a changed list is fetched into
    /// the catalog; logs and elicitation completions go to clients.
    pub(super) fn on_server_changed(&self, server: String, generation: u64, event: ServerEvent) {
        if let ServerEvent::ResourceUpdated { uri } = &event {
            self.resource_updated(&server, uri);
            return;
        }
        let kinds = match event {
            ServerEvent::ToolsChanged(_) => (true, false, false),
            ServerEvent::ResourcesChanged { .. } => (false, true, false),
            ServerEvent::PromptsChanged(_) => (false, false, true),
            ServerEvent::Log(m) => {
                let _ = self.inner.events.send(RegistryEvent::Log {
                    server,
                    params: m.params,
                    callers: m.callers,
                });
                return;
            }
            ServerEvent::ElicitationComplete(params) => {
                let _ = self
                    .inner
                    .events
                    .send(RegistryEvent::ElicitationComplete { server, params });
                return;
            }
            _ => return,
        };
        let updated = self.set_lists(&server, generation, |l| match event {
            ServerEvent::ToolsChanged(t) => l.tools = (*t).clone(),
            ServerEvent::ResourcesChanged {
                resources,
                templates,
            } => {
                l.resources = (*resources).clone();
                l.templates = (*templates).clone();
            }
            ServerEvent::PromptsChanged(p) => l.prompts = (*p).clone(),
            _ => {}
        });
        if updated {
            // Compared once a full listing has set every list.
            let drift = (kinds.0 || kinds.2)
                .then(|| self.check_pins(&server, generation, pins::Fetch::Changed))
                .flatten();
            self.publish_server_lists(&server, kinds.0, kinds.1, kinds.2);
            if let Some(d) = drift {
                self.announce_drift(&server, &d);
            }
            self.lists_listed(&server, generation);
        }
    }

    /// The server left `ready`: its lists need fetching again when it is
    /// back, and a server that is gone (failed, stopped, disabled) lists
    /// nothing. Its tools stay listed while it restarts.
    pub(super) fn unlisted(&self, server: &str, generation: u64) {
        let gone = {
            let mut st = self.write();
            let Some(e) = st.instance_mut(server, generation) else {
                return;
            };
            e.listed = false;
            e.list_error = None;
            let gone = matches!(
                e.handle.status().state,
                ServerState::Failed | ServerState::Stopped | ServerState::Disabled
            );
            if gone {
                e.lists = Lists::default();
                e.lists_changed();
                e.known = false;
            }
            gone
        };
        if gone {
            self.publish_server_lists(server, true, true, true);
        }
    }

    /// After a lag, events were lost: take every server's state from its
    /// supervisor again, re-list the ready ones and tell clients each state.
    pub(super) fn resync(&self) {
        let entries: Vec<(String, u64, ServerState)> = self
            .read()
            .entries
            .iter()
            .map(|e| {
                let h = &e.handle;
                (e.config.name.clone(), h.generation(), h.status().state)
            })
            .collect();
        for (server, generation, state) in entries {
            if state == ServerState::Ready {
                self.spawn_refresh(server.clone(), generation);
            } else {
                self.unlisted(&server, generation);
            }
            self.send_state(&server);
        }
    }

    pub(super) fn spawn_refresh(&self, server: String, generation: u64) {
        let reg = self.clone();
        tokio::spawn(async move { reg.refresh(&server, generation).await });
    }

    /// List a ready server's catalog; while that fails, retry with the
    /// restart backoff, showing the error in its status. Ends when a newer
    /// listing starts or the instance is no longer ready.
    pub(super) async fn refresh(&self, server: &str, generation: u64) {
        let ticket = {
            let mut st = self.write();
            let Some(e) = st.instance_mut(server, generation) else {
                return;
            };
            e.listing = e.listing.wrapping_add(1);
            e.listing
        };
        let mut backoff = self.inner.policy.initial_backoff;
        loop {
            let Ok(client) = self.client(server) else {
                return;
            };
            let fetched = fetch_lists(&client).await;
            // A held client reads as a call in flight to the idle policy.
            drop(client);
            let error = (!fetched.errors.is_empty()).then(|| fetched.errors.join("; "));
            if let Some(e) = &error {
                warn!(server, "listing failed: {e}");
            }
            let (stored, error_changed) = {
                let mut st = self.write();
                match st
                    .instance_mut(server, generation)
                    .filter(|e| e.listing == ticket)
                {
                    Some(e) => {
                        let l = &mut e.lists;
                        let Fetched {
                            tools,
                            resources,
                            templates,
                            prompts,
                            ..
                        } = fetched;
                        if let Some(t) = tools {
                            l.tools = t;
                        }
                        if let Some(r) = resources {
                            l.resources = r;
                        }
                        if let Some(t) = templates {
                            l.templates = t;
                        }
                        if let Some(p) = prompts {
                            l.prompts = p;
                        }
                        e.lists_changed();
                        let changed = e.list_error != error;
                        e.list_error = error.clone();
                        (true, changed)
                    }
                    None => (false, false),
                }
            };
            if !stored {
                return;
            }
            let how = match error {
                None => pins::Fetch::Full,
                Some(_) => pins::Fetch::Partial,
            };
            let drift = self.check_pins(server, generation, how);
            // Catalog first: `settled` waiters read it as soon as it is marked.
            self.publish_soon(server).await;
            if let Some(d) = drift {
                self.announce_drift(server, &d);
            }
            // Listed even when a list failed: the error is in the status,
            // and waiting for a retry would hold `--direct` up.
            let newly = self.mark_listed(server, generation);
            // The first listing of a ready server is when it becomes `ready`.
            if newly || error_changed {
                self.send_state(server);
            }
            if error.is_none() {
                self.lists_listed(server, generation);
                return;
            }
            tokio::time::sleep(backoff).await;
            backoff = backoff.saturating_mul(2).min(self.inner.policy.max_backoff);
            if self.is_current(server, generation) != Some(true) {
                return;
            }
            info!(server, "listing again");
        }
    }

    /// Whether this marked the instance listed (it was not before).
    pub(super) fn mark_listed(&self, server: &str, generation: u64) -> bool {
        let newly = match self.write().instance_mut(server, generation) {
            Some(e) => !std::mem::replace(&mut e.listed, true),
            None => false,
        };
        self.inner.settled.send_replace(());
        newly
    }

    pub(super) fn is_listed(&self, server: &str, generation: u64) -> bool {
        self.write()
            .instance_mut(server, generation)
            .is_some_and(|e| e.listed)
    }

    /// Wait until every server is listed, failed or disabled (or `limit`
    /// passes): the CLI's direct mode answers only once it has a catalog.
    pub async fn settled(&self, limit: std::time::Duration) {
        let mut rx = self.inner.settled.subscribe();
        // `sleep` saturates a huge `limit`; `Instant + limit` would panic.
        let deadline = tokio::time::sleep(limit);
        tokio::pin!(deadline);
        loop {
            let done = self.read().entries.iter().all(|e| {
                let status = e.handle.status();
                e.listed
                    || matches!(
                        status.state,
                        ServerState::Failed
                            | ServerState::AuthRequired
                            | ServerState::AuthFailed
                            | ServerState::Disabled
                            | ServerState::Stopped
                            | ServerState::Idle
                    )
                    || (status.retries_without_limit
                        && status.state == ServerState::Restarting
                        && status.error.is_some())
            });
            if done {
                return;
            }
            // Wake on a listing or a state change, or poll now and then.
            let tick = tokio::time::sleep(std::time::Duration::from_millis(50));
            tokio::select! {
                _ = rx.changed() => {}
                _ = tick => {}
                _ = &mut deadline => return,
            }
        }
    }

    /// Returns false when the server is no longer configured, or
    /// configured as another instance.
    pub(super) fn set_lists(
        &self,
        server: &str,
        generation: u64,
        f: impl FnOnce(&mut Lists),
    ) -> bool {
        match self.write().instance_mut(server, generation) {
            Some(e) => {
                f(&mut e.lists);
                e.lists_changed();
                true
            }
            None => false,
        }
    }

    /// Publish one server's current lists (the flagged kinds; the others
    /// cannot have changed) now, with any listing still waiting: only the
    /// changed servers' parts of the catalog are re-named, the rest is
    /// composed from the parts kept. The new listing is built without the
    /// state's write lock and swapped in; calls keep reading the old one
    /// meanwhile. `list_changed` goes out only when the listed bytes
    /// changed.
    pub(crate) fn publish_server_lists(
        &self,
        server: &str,
        tools: bool,
        resources: bool,
        prompts: bool,
    ) {
        self.mark(
            server,
            Kinds {
                tools,
                resources,
                prompts,
            },
        );
        self.flush();
    }

    /// [`Self::publish_server_lists`] for a burst: returns once a published
    /// catalog holds `server`'s current lists. The publish is a task queued
    /// behind the tasks runnable now, so servers that become ready together
    /// share one publish (and one `list_changed`), while a lone listing
    /// waits only for that turn.
    pub(super) async fn publish_soon(&self, server: &str) {
        let all = Kinds {
            tools: true,
            resources: true,
            prompts: true,
        };
        let (ticket, lead) = self.mark(server, all);
        let mut done = self.inner.published_upto.subscribe();
        if lead {
            let reg = self.clone();
            // Spawned, not awaited here: a cancelled caller must not strand
            // the listings that joined it.
            tokio::spawn(async move {
                tokio::task::yield_now().await;
                reg.flush();
            });
        }
        // The sender lives in `inner`, which `self` holds: never closed.
        let _ = done.wait_for(|upto| *upto >= ticket).await;
    }

    /// Queue `server`'s lists for the next publish: its ticket, and whether
    /// the caller must schedule that publish (none is scheduled yet).
    fn mark(&self, server: &str, kinds: Kinds) -> (u64, bool) {
        let mut q = self.inner.pending.lock();
        let k = q.servers.entry(server.to_owned()).or_default();
        k.tools |= kinds.tools;
        k.resources |= kinds.resources;
        k.prompts |= kinds.prompts;
        q.ticket = q.ticket.wrapping_add(1);
        let lead = !std::mem::replace(&mut q.scheduled, true);
        (q.ticket, lead)
    }

    /// Publish every queued server's lists at once.
    pub(super) fn flush(&self) {
        let mut b = self.inner.builders.lock();
        // Taken under the builders' lock: whatever is queued after this
        // schedules a publish of its own.
        let (queued, upto) = {
            let mut q = self.inner.pending.lock();
            q.scheduled = false;
            (std::mem::take(&mut q.servers), q.ticket)
        };
        if !queued.is_empty() {
            let mut all = Kinds::default();
            let known = {
                let st = self.read();
                queued.iter().all(|(server, k)| {
                    all.tools |= k.tools;
                    all.resources |= k.resources;
                    all.prompts |= k.prompts;
                    st.entry(server).is_some_and(|e| b.update(server, e, *k))
                })
            };
            if known {
                self.publish_from(&mut b, all.tools, all.resources, all.prompts);
            } else {
                // A reload is under way: every part from scratch.
                *b = Builders::full(&self.read());
                self.publish_from(&mut b, true, true, true);
            }
        }
        self.inner.published_upto.send_if_modified(|d| {
            let newer = upto > *d;
            *d = (*d).max(upto);
            newer
        });
    }

    /// Rebuild every server's part (a reload) and publish, queued
    /// listings included.
    pub(super) fn publish_all(&self) {
        let mut b = self.inner.builders.lock();
        let upto = {
            let mut q = self.inner.pending.lock();
            q.servers.clear();
            q.ticket
        };
        *b = Builders::full(&self.read());
        self.publish_from(&mut b, true, true, true);
        self.inner.published_upto.send_if_modified(|d| {
            let newer = upto > *d;
            *d = (*d).max(upto);
            newer
        });
    }

    pub(super) fn publish_from(
        &self,
        b: &mut Builders,
        tools: bool,
        resources: bool,
        prompts: bool,
    ) {
        // Names alone miss a changed schema or description: compare bytes
        // (entries shared with the old listing compare by pointer).
        fn differ<T>(a: &[Arc<T>], b: &[Arc<T>], raw: impl Fn(&T) -> &str) -> bool {
            a.len() != b.len()
                || a.iter()
                    .zip(b)
                    .any(|(x, y)| !Arc::ptr_eq(x, y) && raw(x) != raw(y))
        }
        let p = &self.inner.published;
        if tools {
            let new = Arc::new(b.tools.publish());
            let old = p.catalog.swap(new.clone());
            if differ(new.items(), old.items(), |t| t.raw.get()) {
                let _ = self.inner.events.send(RegistryEvent::ToolsChanged);
            }
        }
        if prompts {
            let new = Arc::new(b.prompts.publish());
            let old = p.prompts.swap(new.clone());
            if differ(new.items(), old.items(), |t| t.raw.get()) {
                let _ = self.inner.events.send(RegistryEvent::PromptsChanged);
            }
        }
        if resources {
            let new = Arc::new(b.resources.publish());
            let old = p.resources.swap(new.clone());
            // One notification covers both resources and templates.
            let changed = differ(new.resources(), old.resources(), |r| r.raw.get())
                || differ(new.templates(), old.templates(), |t| t.raw.get());
            if changed {
                let _ = self.inner.events.send(RegistryEvent::ResourcesChanged);
            }
        }
    }
}

/// Every list a ready server offers; a failed list is `None`, with its error.
async fn fetch_lists(client: &ServerClient) -> Fetched {
    fn keep<T>(r: Result<Vec<T>, ClientError>, errors: &mut Vec<String>) -> Option<Vec<T>> {
        r.map_err(|e| errors.push(e.to_string())).ok()
    }
    /// A list the server does not offer is empty, not failed.
    async fn offered<T>(
        offered: bool,
        list: impl Future<Output = Result<Vec<T>, ClientError>>,
    ) -> Result<Vec<T>, ClientError> {
        match offered {
            true => list.await,
            false => Ok(Vec::new()),
        }
    }
    let caps = &client.negotiated().capabilities;
    // All four at once: one round trip to the server instead of four, which
    // is most of a server's start after its handshake.
    let (tools, resources, templates, prompts) = tokio::join!(
        offered(caps.tools.is_some(), client.list_tools()),
        offered(caps.resources.is_some(), client.list_resources()),
        offered(caps.resources.is_some(), client.list_resource_templates()),
        offered(caps.prompts.is_some(), client.list_prompts()),
    );
    let mut errors = Vec::new();
    Fetched {
        tools: keep(tools, &mut errors),
        resources: keep(resources, &mut errors),
        templates: keep(templates, &mut errors),
        prompts: keep(prompts, &mut errors),
        errors,
    }
}

/// Which of a server's lists a publish must take up.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Kinds {
    pub(super) tools: bool,
    pub(super) resources: bool,
    pub(super) prompts: bool,
}

/// Listings queued for the next publish.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    /// Servers whose lists changed since the last publish.
    servers: HashMap<String, Kinds>,
    /// Counts every queued listing; a publish includes all up to the one
    /// it read.
    ticket: u64,
    /// A publish is queued and has not taken `servers` yet.
    scheduled: bool,
}
