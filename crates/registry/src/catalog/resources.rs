//! The resource catalog: a server's own URI when no other server can claim
//! it, else `mcphost://<server>/<uri>` (see the module above).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::*;
use crate::uri::{self, UriTemplate, is_reserved, unwrap, wrap};
use mcphost_protocol::{Resource, ResourceTemplate};

/// One server's resources and templates, as input to [`build_resources`].
#[derive(Debug, Clone, Copy)]
pub struct ServerResources<'a> {
    pub server: &'a str,
    pub resources: &'a [Resource],
    pub templates: &'a [ResourceTemplate],
}

/// A resource as listed to hosts: the server's object, with only `uri`
/// replaced when it is exposed in the `mcphost://` form.
#[derive(Debug, Clone)]
pub struct CatalogResource {
    /// The exposed URI: the server's own, or `mcphost://<server>/<own>`.
    pub uri: String,
    pub server: String,
    /// The server's own URI.
    pub original: String,
    pub raw: Box<RawValue>,
}

/// A resource template as listed to hosts, with only `uriTemplate`
/// replaced when it is exposed in the `mcphost://` form.
#[derive(Debug, Clone)]
pub struct CatalogTemplate {
    /// The exposed template.
    pub uri_template: String,
    pub server: String,
    /// The server's own template.
    pub original: String,
    pub raw: Box<RawValue>,
}

/// Which resource list a [`ResourceRenamed`] entry is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ResourceKind {
    Resource,
    Template,
}

/// Why a URI or template is exposed in the `mcphost://` form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum RenameReason {
    /// Another server lists the same URI (or the same template text).
    SameUri,
    /// Another server's template can produce this URI.
    TemplateMatch,
    /// The server's own URI uses the `mcphost:` scheme.
    ReservedScheme,
}

/// A URI or template listed under the `mcphost://` form, and why; the
/// resource counterpart of a renamed tool ([`Collision`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRenamed {
    pub kind: ResourceKind,
    pub server: String,
    /// The server's own URI or template.
    pub uri: String,
    /// What clients see.
    pub exposed: String,
    pub reason: RenameReason,
    /// The other servers that claim it, in config order.
    pub with: Vec<String>,
}

/// Where a resource URI goes: a server and the server's own URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceRoute {
    pub server: String,
    pub uri: String,
}

/// Why a URI could not be routed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("no server offers resource {0:?}")]
    NotFound(String),
    #[error(
        "resource {uri:?} could come from several servers ({}); name one with {}",
        servers.join(", "),
        servers.iter().map(|s| format!("{:?}", uri::wrap(s, uri))).collect::<Vec<_>>().join(" or ")
    )]
    Ambiguous { uri: String, servers: Vec<String> },
}

/// How one server's URI is shown to clients (see [`ResourceCatalog::expose`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exposed {
    /// As it is: it routes back to this server.
    Kept,
    /// As it is, though nothing lists it: it routes to this server only if
    /// remembered (no listing or template of any server claims it).
    Unclaimed,
    /// In the `mcphost://` form.
    Wrapped(String),
}

/// All resources and resource templates of all servers.
///
/// Entries are shared (`Arc`) with the [`ResourceBuilder`] that composed it
/// and with earlier listings: a new listing after one server's change
/// copies pointers for every other server.
#[derive(Debug, Clone)]
pub struct ResourceCatalog {
    resources: Vec<Arc<CatalogResource>>,
    templates: Vec<Arc<CatalogTemplate>>,
    /// Parallel to `templates`.
    matchers: Vec<Arc<UriTemplate>>,
    /// Every server given, listing or not: `mcphost://` routes to any.
    servers: Arc<[String]>,
    /// Exposed URI → index in `resources`.
    by_uri: HashMap<String, usize>,
    /// The server's own URI → indices in `resources` (one per server).
    by_original: HashMap<String, Vec<usize>>,
    /// Exposed template → index in `templates`.
    by_template: HashMap<String, usize>,
    renamed: Vec<Arc<Wrapped>>,
    resources_fp: u64,
    templates_fp: u64,
}

/// A wrapped item as a listing keeps it. Who else claims it (the `with` of
/// [`ResourceRenamed`]) is worked out when asked: kept here it would change
/// every sharing server's part whenever one more server lists the URI.
#[derive(Debug)]
struct Wrapped {
    kind: ResourceKind,
    server: String,
    uri: String,
    exposed: String,
    reason: RenameReason,
}

/// Merge every server's resources under the exposure rule (module docs of
/// [`crate::uri`] and `docs/ipc.md`):
///
/// - a server's own URI is kept when no other server lists the same URI and
///   no other server's template can produce it; otherwise each copy is
///   exposed as `mcphost://<server>/<uri>`;
/// - a template is kept when no other server lists the same template text;
///   otherwise each copy is exposed as `mcphost://<server>/<template>`;
/// - a URI or template that itself starts with `mcphost:` is always wrapped.
///
/// The order is the servers' order (config order), then each server's own;
/// a server listing the same URI (or template) twice keeps the first.
pub fn build_resources(servers: &[ServerResources<'_>]) -> ResourceCatalog {
    let mut b = ResourceBuilder::default();
    for s in servers {
        b.push_server(s.server, s.resources, s.templates);
    }
    b.publish()
}

/// One listed item of one server, in both forms it can be shown in.
#[derive(Debug)]
struct Item<E> {
    /// The server's own URI or template.
    own: String,
    kept: Arc<E>,
    /// The `mcphost://` form, made the first time it is needed; `Some(None)`
    /// when the raw object cannot take it (left out, logged).
    wrapped: Option<Option<Arc<E>>>,
}

/// What one server contributes, and the segment last composed from it.
#[derive(Debug)]
struct Part {
    server: String,
    resources: Vec<Item<CatalogResource>>,
    templates: Vec<Item<CatalogTemplate>>,
    /// Parallel to `templates`.
    matchers: Vec<Arc<UriTemplate>>,
    /// `None`: rebuilt on the next publish.
    segment: Option<Segment>,
}

#[derive(Debug)]
struct Segment {
    resources: Vec<Arc<CatalogResource>>,
    templates: Vec<Arc<CatalogTemplate>>,
    matchers: Vec<Arc<UriTemplate>>,
    renamed: Vec<Arc<Wrapped>>,
}

/// Part indices (config order) by URI or template text.
type Claimants = HashMap<String, Vec<usize>>;

/// Keeps every server's resources and templates as a part and composes
/// listings from them, as [`super::CatalogBuilder`] does for tools.
///
/// A server's item is wrapped when another server claims it, so the
/// builder keeps who lists each URI, who lists each template text, and
/// whose templates produce each listed URI. [`Self::update`] changes one
/// server's claims and marks the parts whose claims it touched;
/// [`Self::publish`] rebuilds those parts' segments (pointer copies: both
/// forms of an item are kept) and composes the listing. The result equals
/// [`build_resources`] of the same lists.
#[derive(Debug, Default)]
pub struct ResourceBuilder {
    /// Config order.
    parts: Vec<Part>,
    /// Made again after a server is pushed.
    servers: Option<Arc<[String]>>,
    uri_servers: Claimants,
    tpl_servers: Claimants,
    /// Every URI someone lists → the parts whose templates produce it.
    produced_by: Claimants,
}

fn join_claim(map: &mut Claimants, key: &str, at: usize) {
    let v = map.entry(key.to_owned()).or_default();
    if let Err(i) = v.binary_search(&at) {
        v.insert(i, at);
    }
}

fn leave_claim(map: &mut Claimants, key: &str, at: usize) {
    if let Some(v) = map.get_mut(key) {
        v.retain(|&i| i != at);
        if v.is_empty() {
            map.remove(key);
        }
    }
}

fn others(map: &Claimants, key: &str, me: usize) -> bool {
    map.get(key).is_some_and(|v| v.iter().any(|&i| i != me))
}

impl ResourceBuilder {
    /// Add a server after the others (config order is push order).
    pub fn push_server(
        &mut self,
        server: &str,
        resources: &[Resource],
        templates: &[ResourceTemplate],
    ) {
        self.parts.push(Part {
            server: server.to_owned(),
            resources: Vec::new(),
            templates: Vec::new(),
            matchers: Vec::new(),
            segment: None,
        });
        self.servers = None;
        self.update(server, resources, templates);
    }

    /// Replace one server's resources and templates; the parts it shares a
    /// claim with are marked for the next [`Self::publish`]. False when
    /// `server` is not one of the servers.
    pub fn update(
        &mut self,
        server: &str,
        resources: &[Resource],
        templates: &[ResourceTemplate],
    ) -> bool {
        let Some(at) = self.parts.iter().position(|p| p.server == server) else {
            return false;
        };
        let mut touched_uris: HashSet<String> = HashSet::new();
        let mut touched_tpls: HashSet<String> = HashSet::new();
        let (old_uris, old_tpls) = match self.parts.get_mut(at) {
            Some(part) => {
                part.segment = None;
                let uris: Vec<String> = part.resources.drain(..).map(|i| i.own).collect();
                let tpls: Vec<String> = part.templates.drain(..).map(|i| i.own).collect();
                part.matchers.clear();
                (uris, tpls)
            }
            None => return false,
        };
        for u in &old_uris {
            leave_claim(&mut self.uri_servers, u, at);
        }
        for t in &old_tpls {
            leave_claim(&mut self.tpl_servers, t, at);
        }
        let OwnItems {
            resources: new_resources,
            templates: new_templates,
            matchers: new_matchers,
        } = own_items(server, resources, templates);
        for r in &new_resources {
            join_claim(&mut self.uri_servers, &r.own, at);
        }
        for t in &new_templates {
            join_claim(&mut self.tpl_servers, &t.own, at);
        }
        let templates_changed = old_tpls.len() != new_templates.len()
            || old_tpls
                .iter()
                .zip(&new_templates)
                .any(|(o, n)| *o != n.own);
        if templates_changed {
            // Every listed URI this server's templates produced or now produce.
            for (u, by) in self.produced_by.iter_mut() {
                let was = by.contains(&at);
                let now = new_matchers.iter().any(|m| m.matches(u));
                if was != now {
                    if now {
                        if let Err(i) = by.binary_search(&at) {
                            by.insert(i, at);
                        }
                    } else {
                        by.retain(|&i| i != at);
                    }
                    touched_uris.insert(u.clone());
                }
            }
        }
        if let Some(part) = self.parts.get_mut(at) {
            part.resources = new_resources;
            part.templates = new_templates;
            part.matchers = new_matchers;
        }
        for u in old_uris {
            if !self.uri_servers.contains_key(&u) {
                self.produced_by.remove(&u);
            }
            touched_uris.insert(u);
        }
        let new_uris: Vec<String> = self
            .parts
            .get(at)
            .map(|p| p.resources.iter().map(|r| r.own.clone()).collect())
            .unwrap_or_default();
        for u in new_uris {
            if !self.produced_by.contains_key(&u) {
                let by: Vec<usize> = self
                    .parts
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.matchers.iter().any(|m| m.matches(&u)))
                    .map(|(i, _)| i)
                    .collect();
                self.produced_by.insert(u.clone(), by);
            }
            touched_uris.insert(u);
        }
        touched_tpls.extend(old_tpls);
        if let Some(p) = self.parts.get(at) {
            touched_tpls.extend(p.templates.iter().map(|t| t.own.clone()));
        }
        // Whoever shares a touched claim may be wrapped or kept now.
        let mut dirty: HashSet<usize> = HashSet::new();
        for u in &touched_uris {
            dirty.extend(self.uri_servers.get(u).into_iter().flatten());
        }
        for t in &touched_tpls {
            dirty.extend(self.tpl_servers.get(t).into_iter().flatten());
        }
        for i in dirty {
            if let Some(p) = self.parts.get_mut(i) {
                p.segment = None;
            }
        }
        true
    }

    /// Why part `me`'s resource `uri` is wrapped; `None`: kept.
    fn why_resource(&self, uri: &str, me: usize) -> Option<RenameReason> {
        if is_reserved(uri) {
            Some(RenameReason::ReservedScheme)
        } else if others(&self.uri_servers, uri, me) {
            Some(RenameReason::SameUri)
        } else if others(&self.produced_by, uri, me) {
            Some(RenameReason::TemplateMatch)
        } else {
            None
        }
    }

    /// Why part `me`'s template text `t` is wrapped; `None`: kept.
    fn why_template(&self, t: &str, me: usize) -> Option<RenameReason> {
        if is_reserved(t) {
            Some(RenameReason::ReservedScheme)
        } else if others(&self.tpl_servers, t, me) {
            Some(RenameReason::SameUri)
        } else {
            None
        }
    }

    /// Part `at`'s segment under the current claims.
    fn segment(&mut self, at: usize) -> Option<Segment> {
        let part = self.parts.get(at)?;
        let why_r: Vec<_> = part
            .resources
            .iter()
            .map(|r| self.why_resource(&r.own, at))
            .collect();
        let why_t: Vec<_> = part
            .templates
            .iter()
            .map(|t| self.why_template(&t.own, at))
            .collect();
        let part = self.parts.get_mut(at)?;
        let mut seg = Segment {
            resources: Vec::with_capacity(part.resources.len()),
            templates: Vec::with_capacity(part.templates.len()),
            matchers: Vec::with_capacity(part.templates.len()),
            renamed: Vec::new(),
        };
        let server = part.server.as_str();
        for (item, why) in part.resources.iter_mut().zip(why_r) {
            let Some(entry) = shown(server, item, why, ResourceKind::Resource, &mut seg.renamed)
            else {
                continue;
            };
            seg.resources.push(entry);
        }
        for ((item, m), why) in part.templates.iter_mut().zip(&part.matchers).zip(why_t) {
            let Some(entry) = shown(server, item, why, ResourceKind::Template, &mut seg.renamed)
            else {
                continue;
            };
            seg.templates.push(entry);
            seg.matchers.push(m.clone());
        }
        Some(seg)
    }

    /// The listing of every server's current resources and templates.
    pub fn publish(&mut self) -> ResourceCatalog {
        for at in 0..self.parts.len() {
            if self.parts.get(at).is_some_and(|p| p.segment.is_none()) {
                let seg = self.segment(at);
                if let Some(p) = self.parts.get_mut(at) {
                    p.segment = seg;
                }
            }
        }
        let servers = self
            .servers
            .get_or_insert_with(|| self.parts.iter().map(|p| p.server.clone()).collect())
            .clone();
        let segments: Vec<&Segment> = self
            .parts
            .iter()
            .filter_map(|p| p.segment.as_ref())
            .collect();
        compose(servers, &segments)
    }
}

/// What [`own_items`] makes of one server's lists.
struct OwnItems {
    resources: Vec<Item<CatalogResource>>,
    templates: Vec<Item<CatalogTemplate>>,
    /// Parallel to `templates`.
    matchers: Vec<Arc<UriTemplate>>,
}

/// A server's distinct resources and templates (first copy wins), each in
/// its kept form, with the templates' matchers.
fn own_items(server: &str, resources: &[Resource], templates: &[ResourceTemplate]) -> OwnItems {
    let mut seen = HashSet::new();
    let rs = resources
        .iter()
        .filter(|r| seen.insert(r.uri.as_str()))
        .map(|r| Item {
            own: r.uri.clone(),
            kept: Arc::new(CatalogResource {
                uri: r.uri.clone(),
                server: server.to_owned(),
                original: r.uri.clone(),
                raw: r.raw.clone(),
            }),
            wrapped: None,
        })
        .collect();
    let mut seen = HashSet::new();
    let mut matchers = Vec::new();
    let ts = templates
        .iter()
        .filter(|t| seen.insert(t.uri_template.as_str()))
        .map(|t| {
            matchers.push(Arc::new(UriTemplate::parse(&t.uri_template)));
            Item {
                own: t.uri_template.clone(),
                kept: Arc::new(CatalogTemplate {
                    uri_template: t.uri_template.clone(),
                    server: server.to_owned(),
                    original: t.uri_template.clone(),
                    raw: t.raw.clone(),
                }),
                wrapped: None,
            }
        })
        .collect();
    OwnItems {
        resources: rs,
        templates: ts,
        matchers,
    }
}

/// An entry with its exposed text replaced.
trait Exposable: Sized {
    const FIELD: &'static str;
    fn raw(&self) -> &RawValue;
    fn with_exposed(&self, exposed: String, raw: Box<RawValue>) -> Self;
}

impl Exposable for CatalogResource {
    const FIELD: &'static str = "uri";
    fn raw(&self) -> &RawValue {
        &self.raw
    }
    fn with_exposed(&self, uri: String, raw: Box<RawValue>) -> Self {
        CatalogResource {
            uri,
            server: self.server.clone(),
            original: self.original.clone(),
            raw,
        }
    }
}

impl Exposable for CatalogTemplate {
    const FIELD: &'static str = "uriTemplate";
    fn raw(&self) -> &RawValue {
        &self.raw
    }
    fn with_exposed(&self, uri_template: String, raw: Box<RawValue>) -> Self {
        CatalogTemplate {
            uri_template,
            server: self.server.clone(),
            original: self.original.clone(),
            raw,
        }
    }
}

/// How one item is listed: kept, or wrapped (and recorded in `renamed`);
/// `None` when its raw object cannot take the wrapped text.
fn shown<E: Exposable>(
    server: &str,
    item: &mut Item<E>,
    why: Option<RenameReason>,
    kind: ResourceKind,
    renamed: &mut Vec<Arc<Wrapped>>,
) -> Option<Arc<E>> {
    let Some(reason) = why else {
        return Some(item.kept.clone());
    };
    let own = item.own.as_str();
    let kept = &item.kept;
    let wrapped = item
        .wrapped
        .get_or_insert_with(|| {
            let exposed = wrap(server, own);
            match to_raw(&exposed)
                .and_then(|v| set_fields(Some(kept.raw()), [(E::FIELD.to_owned(), v)]))
            {
                Ok(raw) => Some(Arc::new(kept.with_exposed(exposed, raw))),
                Err(err) => {
                    tracing::warn!(server, uri = own, %err,
                        "cannot set the exposed {}; entry left out", E::FIELD);
                    None
                }
            }
        })
        .clone()?;
    renamed.push(Arc::new(Wrapped {
        kind,
        server: server.to_owned(),
        uri: own.to_owned(),
        exposed: wrap(server, own),
        reason,
    }));
    Some(wrapped)
}

/// The listing from every part's segment, in config order.
fn compose(servers: Arc<[String]>, segments: &[&Segment]) -> ResourceCatalog {
    let n_res = segments.iter().map(|s| s.resources.len()).sum();
    let n_tpl = segments.iter().map(|s| s.templates.len()).sum();
    let mut cat = ResourceCatalog {
        resources: Vec::with_capacity(n_res),
        templates: Vec::with_capacity(n_tpl),
        matchers: Vec::with_capacity(n_tpl),
        servers,
        by_uri: HashMap::with_capacity(n_res),
        by_original: HashMap::with_capacity(n_res),
        by_template: HashMap::with_capacity(n_tpl),
        renamed: Vec::new(),
        resources_fp: 0,
        templates_fp: 0,
    };
    for s in segments {
        for r in &s.resources {
            let i = cat.resources.len();
            cat.by_uri.insert(r.uri.clone(), i);
            cat.by_original
                .entry(r.original.clone())
                .or_default()
                .push(i);
            cat.resources.push(r.clone());
        }
        for t in &s.templates {
            cat.by_template
                .insert(t.uri_template.clone(), cat.templates.len());
            cat.templates.push(t.clone());
        }
        cat.matchers.extend(s.matchers.iter().cloned());
        cat.renamed.extend(s.renamed.iter().cloned());
    }
    cat.resources_fp = fingerprint(
        "resources",
        cat.resources
            .iter()
            .map(|r| [r.uri.as_str(), r.server.as_str(), r.original.as_str()]),
    );
    cat.templates_fp = fingerprint(
        "resource_templates",
        cat.templates.iter().map(|t| {
            [
                t.uri_template.as_str(),
                t.server.as_str(),
                t.original.as_str(),
            ]
        }),
    );
    cat
}

impl ResourceCatalog {
    /// Every resource, in config then server order.
    pub fn resources(&self) -> &[Arc<CatalogResource>] {
        &self.resources
    }

    pub fn templates(&self) -> &[Arc<CatalogTemplate>] {
        &self.templates
    }

    /// Where `uri` goes. In order: the `mcphost://<server>/` form names its
    /// server (any configured server, listed or not); a listed (exposed)
    /// URI goes to its server; `remembered` (URIs seen in a server's
    /// results) may name one; otherwise the servers that list it as their
    /// own or have a template matching it: exactly one, or
    /// [`ResolveError::Ambiguous`].
    pub fn resolve(
        &self,
        uri: &str,
        remembered: impl FnOnce(&str) -> Option<String>,
    ) -> Result<ResourceRoute, ResolveError> {
        if let Some((server, rest)) = unwrap(uri) {
            return if self.servers.contains(&server) {
                Ok(ResourceRoute {
                    server,
                    uri: rest.to_owned(),
                })
            } else {
                Err(ResolveError::NotFound(uri.to_owned()))
            };
        }
        if let Some(r) = self.by_uri.get(uri).and_then(|&i| self.resources.get(i)) {
            return Ok(ResourceRoute {
                server: r.server.clone(),
                uri: r.original.clone(),
            });
        }
        if let Some(server) = remembered(uri).filter(|s| self.servers.contains(s)) {
            return Ok(ResourceRoute {
                server,
                uri: uri.to_owned(),
            });
        }
        self.one_of(uri, self.claimants(uri, None))
    }

    /// Where a `completion/complete` `ref/resource` goes: its `uri` is a
    /// template (or a URI). The `mcphost://` form and exposed templates
    /// route directly; a server's own template text goes to the one server
    /// that has it; anything else resolves as a resource URI.
    pub fn resolve_template(
        &self,
        uri: &str,
        remembered: impl FnOnce(&str) -> Option<String>,
    ) -> Result<ResourceRoute, ResolveError> {
        if unwrap(uri).is_none() {
            if let Some(t) = self
                .by_template
                .get(uri)
                .and_then(|&i| self.templates.get(i))
            {
                return Ok(ResourceRoute {
                    server: t.server.clone(),
                    uri: t.original.clone(),
                });
            }
            let mut having: Vec<String> = Vec::new();
            for t in self.templates.iter().filter(|t| t.original == uri) {
                if !having.contains(&t.server) {
                    having.push(t.server.clone());
                }
            }
            if !having.is_empty() {
                return self.one_of(uri, having);
            }
        }
        self.resolve(uri, remembered)
    }

    fn one_of(&self, uri: &str, mut servers: Vec<String>) -> Result<ResourceRoute, ResolveError> {
        match servers.len() {
            0 => Err(ResolveError::NotFound(uri.to_owned())),
            1 => Ok(ResourceRoute {
                server: servers.remove(0),
                uri: uri.to_owned(),
            }),
            _ => Err(ResolveError::Ambiguous {
                uri: uri.to_owned(),
                servers,
            }),
        }
    }

    /// Servers (config order, other than `except`) that list `uri` as their
    /// own or have a template that can produce it.
    fn claimants(&self, uri: &str, except: Option<&str>) -> Vec<String> {
        let listing = self
            .by_original
            .get(uri)
            .into_iter()
            .flatten()
            .filter_map(|&i| self.resources.get(i))
            .map(|r| r.server.as_str());
        let producing = self
            .templates
            .iter()
            .zip(&self.matchers)
            .filter(|(_, m)| m.matches(uri))
            .map(|(t, _)| t.server.as_str());
        let claim: HashSet<&str> = listing
            .chain(producing)
            .filter(|s| Some(*s) != except)
            .collect();
        self.servers
            .iter()
            .filter(|s| claim.contains(s.as_str()))
            .cloned()
            .collect()
    }

    /// How `server`'s own `uri` (for example in a `resource_link` of one of
    /// its tool results) is shown to clients so that reading it comes back
    /// to `server`: its listing's exposed form if it lists it; wrapped when
    /// another server lists it or has a template producing it, or when it
    /// uses the `mcphost:` scheme; else kept ([`Exposed::Unclaimed`] when
    /// not even a template of `server` produces it).
    pub fn expose(&self, server: &str, uri: &str) -> Exposed {
        if is_reserved(uri) {
            return Exposed::Wrapped(wrap(server, uri));
        }
        let mine = self
            .by_original
            .get(uri)
            .into_iter()
            .flatten()
            .filter_map(|&i| self.resources.get(i))
            .find(|r| r.server == server);
        if let Some(r) = mine {
            return if r.uri == uri {
                Exposed::Kept
            } else {
                Exposed::Wrapped(r.uri.clone())
            };
        }
        if !self.claimants(uri, Some(server)).is_empty() {
            return Exposed::Wrapped(wrap(server, uri));
        }
        let produced = self
            .templates
            .iter()
            .zip(&self.matchers)
            .any(|(t, m)| t.server == server && m.matches(uri));
        if produced {
            Exposed::Kept
        } else {
            Exposed::Unclaimed
        }
    }

    /// Whether `server` is one of the servers this catalog was built from.
    pub fn has_server(&self, server: &str) -> bool {
        self.servers.iter().any(|s| s == server)
    }

    /// Every URI and template listed in the `mcphost://` form, and why.
    pub fn renamed(&self) -> Vec<ResourceRenamed> {
        self.renamed.iter().map(|w| self.renamed_entry(w)).collect()
    }

    /// The renamed entries of one server (for `mcphost/servers/list`).
    pub fn renamed_for<'s>(
        &'s self,
        server: &'s str,
    ) -> impl Iterator<Item = ResourceRenamed> + 's {
        self.renamed
            .iter()
            .filter(move |r| r.server == server)
            .map(|w| self.renamed_entry(w))
    }

    /// A wrapped item with the other servers that claim it, in config order.
    fn renamed_entry(&self, w: &Wrapped) -> ResourceRenamed {
        let me = w.server.as_str();
        let claim: HashSet<&str> = match (w.reason, w.kind) {
            (RenameReason::ReservedScheme, _) => HashSet::new(),
            (RenameReason::SameUri, ResourceKind::Resource) => self
                .by_original
                .get(&w.uri)
                .into_iter()
                .flatten()
                .filter_map(|&i| self.resources.get(i))
                .map(|r| r.server.as_str())
                .collect(),
            (RenameReason::SameUri, ResourceKind::Template) => self
                .templates
                .iter()
                .filter(|t| t.original == w.uri)
                .map(|t| t.server.as_str())
                .collect(),
            (RenameReason::TemplateMatch, _) => self
                .templates
                .iter()
                .zip(&self.matchers)
                .filter(|(_, m)| m.matches(&w.uri))
                .map(|(t, _)| t.server.as_str())
                .collect(),
        };
        ResourceRenamed {
            kind: w.kind,
            server: w.server.clone(),
            uri: w.uri.clone(),
            exposed: w.exposed.clone(),
            reason: w.reason,
            with: self
                .servers
                .iter()
                .filter(|s| s.as_str() != me && claim.contains(s.as_str()))
                .cloned()
                .collect(),
        }
    }

    /// Resources listed for one server.
    pub fn count_for(&self, server: &str) -> usize {
        self.resources.iter().filter(|r| r.server == server).count()
    }

    /// Templates listed for one server.
    pub fn templates_for(&self, server: &str) -> usize {
        self.templates.iter().filter(|t| t.server == server).count()
    }

    /// The fingerprints of the resources and of the templates listing.
    #[cfg(test)]
    pub(super) fn fingerprints(&self) -> (u64, u64) {
        (self.resources_fp, self.templates_fp)
    }

    /// A `resources/list` page; same cursor rules as [`NamespacedCatalog::page`].
    pub fn page(
        &self,
        cursor: Option<&str>,
        page_size: usize,
    ) -> Result<(Vec<&Arc<CatalogResource>>, Option<String>), InvalidCursor> {
        paginate(&self.resources, self.resources_fp, cursor, page_size)
    }

    /// A `resources/templates/list` page. A resources cursor is stale here.
    pub fn page_templates(
        &self,
        cursor: Option<&str>,
        page_size: usize,
    ) -> Result<(Vec<&Arc<CatalogTemplate>>, Option<String>), InvalidCursor> {
        paginate(&self.templates, self.templates_fp, cursor, page_size)
    }

    /// The `mcphost/resources/list` answer: `{"resources":[..],
    /// "resourceTemplates":[..]}`, each listed object plus `server` and the
    /// server's own `serverUri` (`serverUriTemplate`).
    pub fn annotated(&self) -> Result<Box<RawValue>, mcphost_protocol::RawError> {
        let mut out = String::from("{\"resources\":[");
        for (i, r) in self.resources.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let item = set_fields(
                Some(&r.raw),
                [
                    ("server".to_owned(), to_raw(&r.server)?),
                    ("serverUri".to_owned(), to_raw(&r.original)?),
                ],
            )?;
            out.push_str(item.get());
        }
        out.push_str("],\"resourceTemplates\":[");
        for (i, t) in self.templates.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let item = set_fields(
                Some(&t.raw),
                [
                    ("server".to_owned(), to_raw(&t.server)?),
                    ("serverUriTemplate".to_owned(), to_raw(&t.original)?),
                ],
            )?;
            out.push_str(item.get());
        }
        out.push_str("]}");
        RawValue::from_string(out).map_err(mcphost_protocol::RawError::Encode)
    }
}
