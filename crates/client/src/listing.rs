//! Paged listings, and re-listing when the server says a list changed.

use super::*;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::task::AbortHandle;

#[derive(Debug, Clone, Copy)]
pub(super) struct ListTtl {
    pub(super) until: tokio::time::Instant,
    pub(super) fetched: tokio::time::Instant,
}

impl Link {
    pub(super) async fn list_tools(&self) -> Result<Vec<Tool>, ClientError> {
        let mut tools: Vec<Tool> = self
            .list(methods::TOOLS_LIST, "tools", Some(Cap::Tools))
            .await?;
        // Only HTTP mirrors parameters into headers; the spec lets other
        // transports ignore the annotations.
        if self.era == Era::Stateless && self.http {
            let mut map = std::collections::HashMap::new();
            tools.retain(|t| match headers::header_params(t) {
                Ok(p) => {
                    if !p.is_empty() {
                        map.insert(t.name.clone(), Arc::new(p));
                    }
                    true
                }
                // A tool whose annotations break the rules is not offered.
                Err(why) => {
                    warn!(tool = %t.name, "tool left out: {why}");
                    false
                }
            });
            *self.stateless.header_params.lock() = map;
        }
        Ok(tools)
    }

    /// Follow `nextCursor` to the end; a repeated cursor is an error.
    pub(super) async fn list<T: DeserializeOwned>(
        &self,
        method: &'static str,
        field: &str,
        cap: Option<Cap>,
    ) -> Result<Vec<T>, ClientError> {
        let mut out = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut cursor: Option<String> = None;
        for _ in 0..self.opts.max_pages {
            let params = match &cursor {
                Some(c) => {
                    Some(self.build(method, [("cursor".to_owned(), self.encode(method, c)?)])?)
                }
                None => None,
            };
            let page = self
                .request(method, cap, params, &CallOptions::default())
                .await?;
            let items: Vec<T> = raw_field(&page, field)
                .map_err(|e| ClientError::invalid(&self.name, method, e))?
                .unwrap_or_default();
            out.extend(items);
            if self.era == Era::Stateless {
                // Absent or negative is 0: stale at once.
                let ttl = raw_field::<i64>(&page, "ttlMs").ok().flatten().unwrap_or(0);
                let ttl = Duration::from_millis(u64::try_from(ttl).unwrap_or(0));
                let now = tokio::time::Instant::now();
                let until = now.checked_add(ttl).unwrap_or(now);
                let mut f = self.stateless.freshness.lock();
                let e = f.entry(method).or_insert(ListTtl {
                    until,
                    fetched: now,
                });
                // Each page is fresh for its own TTL: the list, for the
                // shortest (a first page restarts it).
                if cursor.is_none() || until < e.until {
                    e.until = until;
                }
                e.fetched = now;
            }
            let next: Option<String> = raw_field::<Option<String>>(&page, "nextCursor")
                .map_err(|e| ClientError::invalid(&self.name, method, e))?
                .flatten();
            match next {
                None => return Ok(out),
                Some(c) if !seen.insert(c.clone()) => {
                    return Err(ClientError::RepeatedCursor {
                        server: self.name.clone(),
                        method,
                        cursor: c,
                    });
                }
                Some(c) => cursor = Some(c),
            }
        }
        Err(ClientError::TooManyPages {
            server: self.name.clone(),
            method,
            pages: self.opts.max_pages,
        })
    }
}

#[derive(Default)]
pub(super) struct StaleLists {
    pub(super) tools: bool,
    pub(super) resources: bool,
    pub(super) prompts: bool,
}

impl StaleLists {
    pub(super) fn mark(&mut self, n: &Notification) -> bool {
        match n.method.as_str() {
            methods::NOTIFICATION_TOOLS_LIST_CHANGED => self.tools = true,
            methods::NOTIFICATION_RESOURCES_LIST_CHANGED => self.resources = true,
            methods::NOTIFICATION_PROMPTS_LIST_CHANGED => self.prompts = true,
            _ => return false,
        }
        true
    }
}

/// Turns server notifications into [`ServerEvent`]s, re-listing on change,
/// in a task that runs only while there is something to do: the queue
/// (`link.notes`) calls [`Pump::wake`] when a notification or the close
/// arrives, so an idle server costs no task here.
pub(super) struct Pump {
    /// A drain task is running, or about to.
    running: AtomicBool,
    /// The client is gone or shut down: start nothing more.
    stopped: AtomicBool,
    task: parking_lot::Mutex<Option<AbortHandle>>,
    events: Arc<Feed<ServerEvent>>,
    relist_on_change: bool,
    span: tracing::Span,
}

impl Pump {
    /// Hooks the pump to `link`'s notifications; what came during the
    /// handshake is taken at once.
    pub(super) fn start(
        link: &Arc<Link>,
        events: Arc<Feed<ServerEvent>>,
        relist_on_change: bool,
        span: tracing::Span,
    ) -> Arc<Pump> {
        let pump = Arc::new(Pump {
            running: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            task: parking_lot::Mutex::new(None),
            events,
            relist_on_change,
            span,
        });
        // Weak both ways: the queue's callback lives in the link.
        let (weak_link, weak_pump) = (Arc::downgrade(link), Arc::downgrade(&pump));
        link.notes.on_arrival(move || {
            if let (Some(link), Some(pump)) = (weak_link.upgrade(), weak_pump.upgrade()) {
                pump.wake(link);
            }
        });
        if link.notes.ready() {
            pump.wake(link.clone());
        }
        pump
    }

    /// Start a drain task unless one runs.
    fn wake(self: &Arc<Self>, link: Arc<Link>) {
        if self.stopped.load(Ordering::SeqCst) || self.running.swap(true, Ordering::SeqCst) {
            return;
        }
        // Not in a runtime: a peer dropped while its runtime shuts down.
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            self.running.store(false, Ordering::SeqCst);
            return;
        };
        let task = rt.spawn(self.clone().drain(link).instrument(self.span.clone()));
        *self.task.lock() = Some(task.abort_handle());
    }

    pub(super) fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        if let Some(t) = self.task.lock().take() {
            t.abort();
        }
    }

    /// Take every queued notification (coalescing a burst of change
    /// notifications into one re-list each), re-list, and again while more
    /// came; end when the queue is empty.
    async fn drain(self: Arc<Self>, link: Arc<Link>) {
        let events = &self.events;
        while !self.stopped.load(Ordering::SeqCst) {
            let mut dirty = StaleLists::default();
            loop {
                match link.notes.next() {
                    notes::Next::Note(n, callers) => handle(&link, events, &n, callers, &mut dirty),
                    notes::Next::Lagged(k) => {
                        warn!(
                            missed = k,
                            "notifications were dropped; re-listing everything"
                        );
                        dirty = StaleLists {
                            tools: true,
                            resources: true,
                            prompts: true,
                        };
                    }
                    notes::Next::Empty => break,
                    // Nothing arrives after the close, so no task starts again.
                    notes::Next::Closed => {
                        if let Some(reason) = link.peer.close_reason() {
                            events.send(ServerEvent::Closed(reason));
                        }
                        return;
                    }
                }
            }
            if self.relist_on_change {
                relist(&link, events, dirty).await;
            }
            self.running.store(false, Ordering::SeqCst);
            // A notification that came after the queue was emptied found
            // this task still running and started none: take it now.
            if !link.notes.ready() || self.running.swap(true, Ordering::SeqCst) {
                return;
            }
        }
    }
}

/// One notification taken from the queue: an event, or a list marked stale.
fn handle(
    link: &Link,
    events: &Feed<ServerEvent>,
    n: &Notification,
    callers: Option<Arc<[u64]>>,
    dirty: &mut StaleLists,
) {
    if !link.current_subscription(n) {
        debug!(method = %n.method, "dropped: it belongs to a closed subscriptions/listen");
        return;
    }
    if dirty.mark(n) {
        return;
    }
    match n.method.as_str() {
        methods::NOTIFICATION_RESOURCES_UPDATED => {
            let uri = n
                .params
                .as_deref()
                .and_then(|p| raw_field::<String>(p, "uri").ok().flatten());
            if let Some(uri) = uri {
                events.send(ServerEvent::ResourceUpdated { uri });
            }
        }
        methods::NOTIFICATION_MESSAGE => {
            if let Some(p) = &n.params {
                events.send(ServerEvent::Log(LogMessage {
                    params: p.clone(),
                    callers: callers.unwrap_or_else(|| Arc::from(Vec::new())),
                }));
            }
        }
        methods::NOTIFICATION_ELICITATION_COMPLETE => {
            if let Some(p) = &n.params {
                events.send(ServerEvent::ElicitationComplete(p.clone()));
            }
        }
        other => debug!(method = other, "unhandled notification"),
    }
}

/// Sessions the transport renewed on its own (HTTP), until the
/// connection closes.
pub(super) async fn watch_renewals(
    link: Arc<Link>,
    mut renewals: tokio::sync::watch::Receiver<Option<Arc<str>>>,
    events: Arc<Feed<ServerEvent>>,
) {
    loop {
        tokio::select! {
            changed = renewals.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = link.peer.closed() => return,
        }
        let frame = renewals.borrow_and_update().clone();
        if let Some(frame) = frame {
            match link.renewed(&frame) {
                Ok(()) => {
                    events.send(ServerEvent::SessionRenewed);
                }
                Err(e) => warn!(
                    "the renewed session's initialize answer: {e}; keeping what was negotiated before"
                ),
            }
        }
    }
}

pub(super) async fn relist(link: &Link, events: &Feed<ServerEvent>, dirty: StaleLists) {
    let failed = |what, e: ClientError| {
        // A server (or daemon) going away ends its lists with it: the close
        // is reported once, as the close; only a live server's refusal warns.
        if matches!(
            e,
            ClientError::Request {
                error: PeerError::Closed(_),
                ..
            }
        ) {
            debug!("re-listing {what} cut short: {e}");
        } else {
            warn!("re-listing {what} failed: {e}");
        }
        let _ = events.send(ServerEvent::RelistFailed {
            what,
            error: e.to_string(),
        });
    };
    if dirty.tools {
        match link.list_tools().await {
            Ok(t) => {
                events.send(ServerEvent::ToolsChanged(Arc::new(t)));
            }
            Err(e) => failed("tools", e),
        }
    }
    if dirty.resources {
        let r = link
            .list::<Resource>(methods::RESOURCES_LIST, "resources", Some(Cap::Resources))
            .await;
        let t = link
            .list::<ResourceTemplate>(
                methods::RESOURCES_TEMPLATES_LIST,
                "resourceTemplates",
                Some(Cap::Resources),
            )
            .await;
        match (r, t) {
            (Ok(resources), Ok(templates)) => {
                events.send(ServerEvent::ResourcesChanged {
                    resources: Arc::new(resources),
                    templates: Arc::new(templates),
                });
            }
            (Err(e), _) | (_, Err(e)) => failed("resources", e),
        }
    }
    if dirty.prompts {
        match link
            .list::<Prompt>(methods::PROMPTS_LIST, "prompts", Some(Cap::Prompts))
            .await
        {
            Ok(p) => {
                events.send(ServerEvent::PromptsChanged(Arc::new(p)));
            }
            Err(e) => failed("prompts", e),
        }
    }
}
