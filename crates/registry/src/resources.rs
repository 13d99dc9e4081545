//! Resources across servers: reads and completions routed by the exposure
//! rule ([`super::catalog::build_resources`]), URIs inside results shown in
//! the form that routes back to their server, and subscriptions counted
//! across sessions.
//!
//! Subscriptions are kept per (server, the server's own URI), with each
//! subscribed session and the URI it used. The first session sends
//! `resources/subscribe` upstream, the last one to leave (unsubscribe, or
//! [`Registry::forget_session`]) sends `resources/unsubscribe`; a new
//! instance of the server (restart, reload, renewed HTTP session) gets every
//! subscription sent again. Upstream requests for one server are serialized,
//! so a subscribe and an unsubscribe never cross on the wire.

use parking_lot::{Mutex, MutexGuard};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use serde_json::value::RawValue;
use tracing::{debug, warn};

use super::catalog::{Exposed, ResolveError, ResourceCatalog, ResourceRoute};
use super::{Registry, RegistryError, RegistryEvent, uri};
use mcphost_client::CallOptions;
use mcphost_protocol::{raw_field, set_fields, to_raw};

/// URIs remembered from results (see [`Registry::read_resource`]).
pub const REMEMBERED_URIS: usize = 1024;

/// session → the URI it subscribed with.
type Subscribers = BTreeMap<u64, String>;

#[derive(Default)]
pub(super) struct ResourceState {
    /// Unlisted URIs seen in a server's results that no other server can
    /// claim: uri → server, the newest [`REMEMBERED_URIS`].
    remembered: Mutex<Remembered>,
    /// server → its own URI → subscribers. Never empty at the inner level.
    subs: Mutex<HashMap<String, HashMap<String, Subscribers>>>,
    /// One turn per server for upstream subscribe/unsubscribe requests.
    turns: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

#[derive(Default)]
struct Remembered {
    map: HashMap<String, String>,
    order: VecDeque<String>,
}

impl Remembered {
    fn get(&self, uri: &str) -> Option<String> {
        self.map.get(uri).cloned()
    }

    fn insert(&mut self, uri: &str, server: &str) {
        // Seen again (for any server): it moves to the newest end.
        if self.map.insert(uri.to_owned(), server.to_owned()).is_some()
            && let Some(i) = self.order.iter().position(|u| u == uri)
        {
            self.order.remove(i);
        }
        self.order.push_back(uri.to_owned());
        while self.order.len() > REMEMBERED_URIS {
            if let Some(old) = self.order.pop_front() {
                self.map.remove(&old);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock()
}

/// Which result shape carries the URIs.
#[derive(Debug, Clone, Copy)]
pub(super) enum ResultShape {
    /// `CallToolResult`: `content[]` items.
    Tool,
    /// `GetPromptResult`: `messages[].content` (one item, or a list).
    Prompt,
    /// `ReadResourceResult`: `contents[].uri`.
    Read,
}

impl From<ResolveError> for RegistryError {
    fn from(e: ResolveError) -> Self {
        match e {
            ResolveError::NotFound(uri) => RegistryError::UnknownResource(uri),
            ResolveError::Ambiguous { uri, servers } => {
                RegistryError::AmbiguousResource { uri, servers }
            }
        }
    }
}

impl Registry {
    fn remembered(&self, uri: &str) -> Option<String> {
        lock(&self.inner.res.remembered).get(uri)
    }

    /// Where a resource URI a client sent goes (see
    /// [`ResourceCatalog::resolve`]).
    pub fn resolve_resource(&self, uri: &str) -> Result<ResourceRoute, RegistryError> {
        Ok(self.resources().resolve(uri, |u| self.remembered(u))?)
    }

    /// Where a `completion/complete` `ref/resource` URI goes.
    pub(super) fn resolve_resource_ref(&self, uri: &str) -> Result<ResourceRoute, RegistryError> {
        Ok(self
            .resources()
            .resolve_template(uri, |u| self.remembered(u))?)
    }

    /// Read a resource by its exposed URI: the `mcphost://<server>/` form,
    /// a listed URI, a URI seen in a server's results, or one that exactly
    /// one server's templates produce. URIs in the contents are shown the
    /// way they route back.
    pub async fn read_resource(
        &self,
        uri: &str,
        opts: CallOptions,
    ) -> Result<Box<RawValue>, RegistryError> {
        let route = self.resolve_resource(uri)?;
        let (client, timeout) = self
            .client_for_call(&route.server, opts.timeout, opts.origin.as_ref())
            .await?;
        let opts = CallOptions { timeout, ..opts };
        let raw = client.read_resource(&route.uri, opts).await?;
        Ok(self.expose_uris(&route.server, raw, ResultShape::Read))
    }

    /// `raw` (a result from `server`) with every resource URI in it shown in
    /// the form that routes back to `server`; untouched when none changes.
    pub(super) fn expose_uris(
        &self,
        server: &str,
        raw: Box<RawValue>,
        shape: ResultShape,
    ) -> Box<RawValue> {
        // Cheap test first: most results carry no URI at all.
        if memchr::memmem::find(raw.get().as_bytes(), b"\"uri\"").is_none() {
            return raw;
        }
        let catalog = self.resources();
        let field = match shape {
            ResultShape::Tool => "content",
            ResultShape::Prompt => "messages",
            ResultShape::Read => "contents",
        };
        let Ok(Some(items)) = raw_field::<Vec<Box<RawValue>>>(&raw, field) else {
            return raw;
        };
        let mut changed = false;
        let items: Vec<Box<RawValue>> = items
            .into_iter()
            .map(|item| {
                let new = match shape {
                    ResultShape::Tool => self.expose_content(&catalog, server, &item),
                    ResultShape::Prompt => self.expose_message(&catalog, server, &item),
                    ResultShape::Read => self.expose_field(&catalog, server, &item, "uri"),
                };
                match new {
                    Some(n) => {
                        changed = true;
                        n
                    }
                    None => item,
                }
            })
            .collect();
        if !changed {
            return raw;
        }
        match join(&items).and_then(|list| set_fields(Some(&raw), [(field.to_owned(), list)]).ok())
        {
            Some(new) => new,
            None => raw,
        }
    }

    /// A prompt message with its `content` (one item or a list) exposed.
    fn expose_message(
        &self,
        catalog: &ResourceCatalog,
        server: &str,
        message: &RawValue,
    ) -> Option<Box<RawValue>> {
        let content: Box<RawValue> = raw_field(message, "content").ok()??;
        let new = if content.get().trim_start().starts_with('[') {
            let items: Vec<Box<RawValue>> = serde_json::from_str(content.get()).ok()?;
            let mut changed = false;
            let items: Vec<Box<RawValue>> = items
                .into_iter()
                .map(|i| match self.expose_content(catalog, server, &i) {
                    Some(n) => {
                        changed = true;
                        n
                    }
                    None => i,
                })
                .collect();
            if !changed {
                return None;
            }
            join(&items)?
        } else {
            self.expose_content(catalog, server, &content)?
        };
        set_fields(Some(message), [("content".to_owned(), new)]).ok()
    }

    /// One content item: a `resource_link`'s `uri`, an embedded
    /// `resource`'s `resource.uri`.
    fn expose_content(
        &self,
        catalog: &ResourceCatalog,
        server: &str,
        item: &RawValue,
    ) -> Option<Box<RawValue>> {
        let kind: String = raw_field(item, "type").ok()??;
        match kind.as_str() {
            "resource_link" => self.expose_field(catalog, server, item, "uri"),
            "resource" => {
                let inner: Box<RawValue> = raw_field(item, "resource").ok()??;
                let new = self.expose_field(catalog, server, &inner, "uri")?;
                set_fields(Some(item), [("resource".to_owned(), new)]).ok()
            }
            _ => None,
        }
    }

    /// `obj` with its `field` URI exposed, or `None` when it stays.
    fn expose_field(
        &self,
        catalog: &ResourceCatalog,
        server: &str,
        obj: &RawValue,
        field: &str,
    ) -> Option<Box<RawValue>> {
        let own: String = raw_field(obj, field).ok()??;
        let exposed = self.exposed_uri(catalog, server, &own)?;
        set_fields(Some(obj), [(field.to_owned(), to_raw(&exposed).ok()?)]).ok()
    }

    /// The form of `server`'s own `uri` that routes back to it, when it is
    /// not `uri` itself. An unclaimed URI is remembered as `server`'s, unless
    /// another server's results already claimed it.
    fn exposed_uri(&self, catalog: &ResourceCatalog, server: &str, own: &str) -> Option<String> {
        match catalog.expose(server, own) {
            Exposed::Kept => None,
            Exposed::Wrapped(w) => Some(w),
            Exposed::Unclaimed => {
                let mut r = lock(&self.inner.res.remembered);
                match r.get(own) {
                    Some(other) if other != server && catalog.has_server(&other) => {
                        Some(uri::wrap(server, own))
                    }
                    _ => {
                        r.insert(own, server);
                        None
                    }
                }
            }
        }
    }

    fn turn(&self, server: &str) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.inner.res.turns)
            .entry(server.to_owned())
            .or_default()
            .clone()
    }

    /// Subscribe `session` to a resource by any URI that resolves (see
    /// [`Registry::read_resource`]). The first subscriber of a (server,
    /// URI) sends `resources/subscribe` upstream and gets its error if that
    /// fails; later ones only join. Subscribing twice is one subscription.
    pub async fn subscribe_resource(&self, session: u64, uri: &str) -> Result<(), RegistryError> {
        let route = self.resolve_resource(uri)?;
        let turn = self.turn(&route.server);
        let _turn = turn.lock().await;
        // Joined before the upstream request: a server may send an update
        // right after its answer, and it must find this subscriber.
        let first = {
            let mut subs = lock(&self.inner.res.subs);
            let sessions = subs
                .entry(route.server.clone())
                .or_default()
                .entry(route.uri.clone())
                .or_default();
            let first = sessions.is_empty();
            sessions.insert(session, uri.to_owned());
            first
        };
        if first {
            let sent = async {
                let (client, _) = self.client_for_call(&route.server, None, None).await?;
                // What the server logs meanwhile is the subscriber's.
                let _caller = client.on_behalf_of(session);
                client.subscribe_resource(&route.uri).await?;
                Ok::<(), RegistryError>(())
            };
            if let Err(e) = sent.await {
                self.remove_subscriber(session, &route.server, &route.uri);
                return Err(e);
            }
            debug!(server = %route.server, uri = %route.uri, "subscribed upstream");
        }
        Ok(())
    }

    /// End `session`'s subscription (by the URI it subscribed with, or any
    /// URI resolving to the same resource). The last subscriber sends
    /// `resources/unsubscribe` upstream. Unsubscribing what is not
    /// subscribed is not an error.
    pub async fn unsubscribe_resource(&self, session: u64, uri: &str) -> Result<(), RegistryError> {
        let key = self
            .subscription_of(session, uri)
            .or_else(|| self.resolve_resource(uri).ok().map(|r| (r.server, r.uri)));
        let Some((server, own)) = key else {
            return Ok(());
        };
        if self.remove_subscriber(session, &server, &own) {
            self.release(&server, &own).await;
        }
        Ok(())
    }

    /// Forget a session that has ended: its subscriptions, its log levels
    /// and its own instances of `share: per-session` servers. Returns at once: from now
    /// on no update names it, and the upstream unsubscribes and stops it
    /// causes happen in the background.
    pub fn forget_session(&self, session: u64) {
        self.drop_session_instances(session);
        self.forget_log_levels(session);
        let emptied: Vec<(String, String)> = {
            let mut subs = lock(&self.inner.res.subs);
            let mut out = Vec::new();
            for (server, uris) in subs.iter_mut() {
                uris.retain(|own, sessions| {
                    if sessions.remove(&session).is_some() && sessions.is_empty() {
                        out.push((server.clone(), own.clone()));
                    }
                    !sessions.is_empty()
                });
            }
            out
        };
        if emptied.is_empty() {
            return;
        }
        // A session may end outside the runtime (dropped by an embedder's
        // thread): then there is no upstream left to tell either.
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let reg = self.clone();
        rt.spawn(async move {
            for (server, own) in emptied {
                reg.release(&server, &own).await;
            }
        });
    }

    /// Every subscription: (server, the server's own URI, sessions).
    pub fn subscriptions(&self) -> Vec<(String, String, Vec<u64>)> {
        let subs = lock(&self.inner.res.subs);
        let mut out: Vec<_> = subs
            .iter()
            .flat_map(|(server, uris)| {
                uris.iter()
                    .map(|(own, s)| (server.clone(), own.clone(), s.keys().copied().collect()))
            })
            .collect();
        out.sort();
        out
    }

    /// The (server, own URI) `session` subscribed to with exactly `uri`.
    fn subscription_of(&self, session: u64, uri: &str) -> Option<(String, String)> {
        let subs = lock(&self.inner.res.subs);
        subs.iter().find_map(|(server, uris)| {
            uris.iter()
                .find(|(_, s)| s.get(&session).is_some_and(|u| u == uri))
                .map(|(own, _)| (server.clone(), own.clone()))
        })
    }

    /// Removes one subscriber; true when it was the last.
    fn remove_subscriber(&self, session: u64, server: &str, own: &str) -> bool {
        let mut subs = lock(&self.inner.res.subs);
        let Some(uris) = subs.get_mut(server) else {
            return false;
        };
        let Some(sessions) = uris.get_mut(own) else {
            return false;
        };
        if sessions.remove(&session).is_none() || !sessions.is_empty() {
            return false;
        }
        uris.remove(own);
        true
    }

    /// Unsubscribe upstream, unless someone subscribed again meanwhile. A
    /// server that is not ready has no subscription to end.
    async fn release(&self, server: &str, own: &str) {
        let turn = self.turn(server);
        let _turn = turn.lock().await;
        let again = lock(&self.inner.res.subs)
            .get(server)
            .is_some_and(|m| m.contains_key(own));
        if again {
            return;
        }
        let Ok(client) = self.client(server) else {
            return;
        };
        match client.unsubscribe_resource(own).await {
            Ok(()) => debug!(server, uri = own, "unsubscribed upstream"),
            Err(e) => debug!(server, uri = own, "upstream unsubscribe failed: {e}"),
        }
    }

    /// A new instance of `server` is ready: send it every subscription.
    pub(super) fn resubscribe(&self, server: &str) {
        let has_any = lock(&self.inner.res.subs)
            .get(server)
            .is_some_and(|m| !m.is_empty());
        if !has_any {
            return;
        }
        let reg = self.clone();
        let server = server.to_owned();
        tokio::spawn(async move {
            let turn = reg.turn(&server);
            let _turn = turn.lock().await;
            let uris: Vec<String> = lock(&reg.inner.res.subs)
                .get(&server)
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            let Ok(client) = reg.client(&server) else {
                return;
            };
            for own in uris {
                match client.subscribe_resource(&own).await {
                    Ok(()) => debug!(server, uri = %own, "subscribed again after a restart"),
                    Err(e) => warn!(server, uri = %own, "re-subscribing failed: {e}"),
                }
            }
        });
    }

    /// `notifications/resources/updated` from `server`: one event per URI
    /// its subscribers used, naming them.
    pub(super) fn resource_updated(&self, server: &str, own: &str) {
        let mut by_form: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        if let Some(sessions) = lock(&self.inner.res.subs)
            .get(server)
            .and_then(|m| m.get(own))
        {
            for (session, form) in sessions {
                by_form.entry(form.clone()).or_default().push(*session);
            }
        }
        if by_form.is_empty() {
            debug!(
                server,
                uri = own,
                "update for a resource nobody subscribed to"
            );
        }
        for (uri, sessions) in by_form {
            let _ = self.inner.events.send(RegistryEvent::ResourceUpdated {
                uri,
                sessions: sessions.into(),
            });
        }
    }
}

/// A JSON array of raw items.
fn join(items: &[Box<RawValue>]) -> Option<Box<RawValue>> {
    let len = items.iter().map(|i| i.get().len() + 1).sum::<usize>() + 2;
    let mut out = String::with_capacity(len);
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(item.get());
    }
    out.push(']');
    RawValue::from_string(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{ServerResources, build_resources};
    use crate::supervisor::RestartPolicy;
    use mcphost_client::ClientOptions;
    use mcphost_config::HostConfig;
    use mcphost_protocol::{Resource, ResourceTemplate};

    fn resource(uri: &str) -> Resource {
        serde_json::from_str(&format!(r#"{{"uri":"{uri}","name":"n"}}"#)).unwrap()
    }

    fn template(t: &str) -> ResourceTemplate {
        serde_json::from_str(&format!(r#"{{"uriTemplate":"{t}","name":"n"}}"#)).unwrap()
    }

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    /// A registry without servers whose resource catalog is `a` and `b`
    /// both listing `x://shared`, `a` listing `x://a`, `b` a template `db://{t}`.
    fn registry() -> Registry {
        let reg = Registry::start(
            &HostConfig::default(),
            ClientOptions::default(),
            RestartPolicy::default(),
            None,
        );
        let shared = [resource("x://shared"), resource("x://a")];
        let b = [resource("x://shared")];
        let tb = [template("db://{t}")];
        reg.inner
            .published
            .resources
            .store(Arc::new(build_resources(&[
                ServerResources {
                    server: "a",
                    resources: &shared,
                    templates: &[],
                },
                ServerResources {
                    server: "b",
                    resources: &b,
                    templates: &tb,
                },
            ])));
        reg
    }

    #[tokio::test]
    async fn tool_results_change_only_the_uris_that_need_it() {
        let reg = registry();
        let text = concat!(
            r#"{"content":[{"type":"text","text":"x://shared"},"#,
            r#"{"type":"resource_link","uri":"x://shared","name":"s","n":1e400},"#,
            r#"{"uri":"db://t1","type":"resource_link"},"#,
            r#"{"type":"resource_link","uri":"x://a"},"#,
            r#"{"type":"resource","resource":{"uri":"x://shared","text":"1.10","blob":null}}],"#,
            r#""structuredContent":{"uri":"x://shared","big":12345678901234567890123},"isError":false}"#
        );
        let out = reg.expose_uris("a", raw(text), ResultShape::Tool);
        let want = text
            .replacen(
                r#""uri":"x://shared","name""#,
                r#""uri":"mcphost://a/x://shared","name""#,
                1,
            )
            .replace(r#""uri":"db://t1""#, r#""uri":"mcphost://a/db://t1""#)
            .replace(
                r#"{"uri":"x://shared","text""#,
                r#"{"uri":"mcphost://a/x://shared","text""#,
            );
        assert_eq!(out.get(), want);
        // b's copy of the same URI is b's form; its template's URI is its own.
        let out = reg.expose_uris(
            "b",
            raw(r#"{"content":[{"type":"resource_link","uri":"x://shared"},{"type":"resource_link","uri":"db://t2"}]}"#),
            ResultShape::Tool,
        );
        assert_eq!(
            out.get(),
            r#"{"content":[{"type":"resource_link","uri":"mcphost://b/x://shared"},{"type":"resource_link","uri":"db://t2"}]}"#
        );
        // Nothing to change: the same bytes, whitespace and all.
        for text in [
            r#"{ "content" : [ {"type":"resource_link","uri":"x://a"} ] }"#,
            r#"{"content":[{"type":"text","text":"no links"}],"x":1e400}"#,
            r#"{"content":"not a list","uri":"x://shared"}"#,
        ] {
            assert_eq!(
                reg.expose_uris("a", raw(text), ResultShape::Tool).get(),
                text
            );
        }
    }

    #[tokio::test]
    async fn prompt_and_read_results_are_exposed_too() {
        let reg = registry();
        let prompt = concat!(
            r#"{"description":"d","messages":["#,
            r#"{"role":"user","content":{"type":"resource","resource":{"uri":"x://shared","text":"t"}}},"#,
            r#"{"role":"user","content":[{"type":"text","text":"t"},{"type":"resource_link","uri":"x://shared"}]},"#,
            r#"{"role":"assistant","content":{"type":"text","text":"x://shared"}}]}"#
        );
        let out = reg.expose_uris("b", raw(prompt), ResultShape::Prompt);
        assert_eq!(
            out.get(),
            prompt.replace(r#""uri":"x://shared""#, r#""uri":"mcphost://b/x://shared""#)
        );
        let read =
            r#"{"contents":[{"uri":"x://shared","text":"t"},{"uri":"x://a","blob":"YQ=="}]}"#;
        let out = reg.expose_uris("a", raw(read), ResultShape::Read);
        assert_eq!(
            out.get(),
            r#"{"contents":[{"uri":"mcphost://a/x://shared","text":"t"},{"uri":"x://a","blob":"YQ=="}]}"#
        );
    }

    #[tokio::test]
    async fn unclaimed_result_uris_are_remembered_for_their_server() {
        let reg = registry();
        assert!(matches!(
            reg.resolve_resource("urn:only-a"),
            Err(RegistryError::UnknownResource(_))
        ));
        let link = r#"{"content":[{"type":"resource_link","uri":"urn:only-a"}]}"#;
        assert_eq!(
            reg.expose_uris("a", raw(link), ResultShape::Tool).get(),
            link
        );
        let route = reg.resolve_resource("urn:only-a").unwrap();
        assert_eq!(
            (route.server.as_str(), route.uri.as_str()),
            ("a", "urn:only-a")
        );
        // Now a claims it: b's copy is wrapped, and a keeps the plain URI.
        assert_eq!(
            reg.expose_uris("b", raw(link), ResultShape::Tool).get(),
            r#"{"content":[{"type":"resource_link","uri":"mcphost://b/urn:only-a"}]}"#
        );
        assert_eq!(reg.resolve_resource("urn:only-a").unwrap().server, "a");
    }

    #[test]
    fn remembered_uris_are_bounded_to_the_newest() {
        let mut r = Remembered::default();
        for i in 0..REMEMBERED_URIS + 10 {
            r.insert(&format!("u{i}"), "s");
            // u0 is seen again and again: it stays among the newest.
            r.insert("u0", "s");
        }
        assert_eq!(r.map.len(), REMEMBERED_URIS);
        assert_eq!(r.order.len(), REMEMBERED_URIS);
        assert_eq!(r.get("u0").as_deref(), Some("s"));
        assert_eq!(r.get("u1"), None);
        assert_eq!(
            r.get(&format!("u{}", REMEMBERED_URIS + 9)).as_deref(),
            Some("s")
        );
        r.insert("u0", "t");
        assert_eq!(r.get("u0").as_deref(), Some("t"));
        assert_eq!(r.map.len(), REMEMBERED_URIS);
    }
}
