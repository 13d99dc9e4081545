//! The resource catalog: a server's own URI when no other server can claim
//! it, else `mcphost://<server>/<uri>` (see the module above).

use std::collections::{HashMap, HashSet};

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
#[derive(Debug, Clone)]
pub struct ResourceCatalog {
    resources: Vec<CatalogResource>,
    templates: Vec<CatalogTemplate>,
    /// Parallel to `templates`.
    matchers: Vec<UriTemplate>,
    /// Every server given, listing or not: `mcphost://` routes to any.
    servers: Vec<String>,
    /// Exposed URI → index in `resources`.
    by_uri: HashMap<String, usize>,
    /// The server's own URI → indices in `resources` (one per server).
    by_original: HashMap<String, Vec<usize>>,
    /// Exposed template → index in `templates`.
    by_template: HashMap<String, usize>,
    renamed: Vec<ResourceRenamed>,
    resources_fp: u64,
    templates_fp: u64,
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
    let own = distinct_per_server(servers);
    let listed = Listed::new(&own);
    let mut cat = ResourceCatalog {
        resources: Vec::new(),
        templates: Vec::new(),
        matchers: Vec::new(),
        servers: servers.iter().map(|s| s.server.to_owned()).collect(),
        by_uri: HashMap::new(),
        by_original: HashMap::new(),
        by_template: HashMap::new(),
        renamed: Vec::new(),
        resources_fp: 0,
        templates_fp: 0,
    };
    for (server, rs, ts) in &own {
        for r in rs {
            let why = listed.why_resource(&r.uri, server);
            let Some(entry) = expose_item(
                server,
                &r.uri,
                &r.raw,
                "uri",
                why,
                ResourceKind::Resource,
                &mut cat.renamed,
            ) else {
                continue;
            };
            let (exposed, raw) = entry;
            let i = cat.resources.len();
            cat.by_uri.insert(exposed.clone(), i);
            cat.by_original.entry(r.uri.clone()).or_default().push(i);
            cat.resources.push(CatalogResource {
                uri: exposed,
                server: (*server).to_owned(),
                original: r.uri.clone(),
                raw,
            });
        }
        for (t, matcher) in ts {
            let why = listed.why_template(&t.uri_template, server);
            let Some((exposed, raw)) = expose_item(
                server,
                &t.uri_template,
                &t.raw,
                "uriTemplate",
                why,
                ResourceKind::Template,
                &mut cat.renamed,
            ) else {
                continue;
            };
            cat.by_template.insert(exposed.clone(), cat.templates.len());
            cat.templates.push(CatalogTemplate {
                uri_template: exposed,
                server: (*server).to_owned(),
                original: t.uri_template.clone(),
                raw,
            });
            cat.matchers.push(matcher.clone());
        }
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

/// One server's distinct URIs and templates (with their matchers).
type Own<'a> = (
    &'a str,
    Vec<&'a Resource>,
    Vec<(&'a ResourceTemplate, UriTemplate)>,
);

/// Each server's distinct URIs and templates, first copy wins.
fn distinct_per_server<'a>(servers: &[ServerResources<'a>]) -> Vec<Own<'a>> {
    let mut own: Vec<Own<'_>> = Vec::new();
    for s in servers {
        let mut seen = HashSet::new();
        let rs = s
            .resources
            .iter()
            .filter(|r| seen.insert(r.uri.as_str()))
            .collect();
        let mut seen = HashSet::new();
        let ts = s
            .templates
            .iter()
            .filter(|t| seen.insert(t.uri_template.as_str()))
            .map(|t| (t, UriTemplate::parse(&t.uri_template)))
            .collect();
        own.push((s.server, rs, ts));
    }
    own
}

/// Who lists each URI and each template text, in config order: what
/// decides whether a server's own URI can be kept.
struct Listed<'o, 'a> {
    own: &'o [Own<'a>],
    uri_servers: HashMap<&'a str, Vec<&'a str>>,
    tpl_servers: HashMap<&'a str, Vec<&'a str>>,
}

impl<'o, 'a> Listed<'o, 'a> {
    fn new(own: &'o [Own<'a>]) -> Self {
        let mut uri_servers: HashMap<&str, Vec<&str>> = HashMap::new();
        let mut tpl_servers: HashMap<&str, Vec<&str>> = HashMap::new();
        for (s, rs, ts) in own {
            for r in rs {
                uri_servers.entry(r.uri.as_str()).or_default().push(s);
            }
            for (t, _) in ts {
                tpl_servers
                    .entry(t.uri_template.as_str())
                    .or_default()
                    .push(s);
            }
        }
        Listed {
            own,
            uri_servers,
            tpl_servers,
        }
    }

    fn others(map: &HashMap<&str, Vec<&str>>, key: &str, me: &str) -> Vec<String> {
        map.get(key)
            .into_iter()
            .flatten()
            .filter(|s| **s != me)
            .map(|s| (*s).to_owned())
            .collect()
    }

    /// Why `me`'s resource `uri` is wrapped, and by whom; `None`: kept.
    fn why_resource(&self, uri: &str, me: &str) -> Option<(RenameReason, Vec<String>)> {
        if is_reserved(uri) {
            return Some((RenameReason::ReservedScheme, Vec::new()));
        }
        let same = Self::others(&self.uri_servers, uri, me);
        if !same.is_empty() {
            return Some((RenameReason::SameUri, same));
        }
        let by: Vec<String> = self
            .own
            .iter()
            .filter(|(s, _, ts)| *s != me && ts.iter().any(|(_, m)| m.matches(uri)))
            .map(|(s, _, _)| (*s).to_owned())
            .collect();
        (!by.is_empty()).then_some((RenameReason::TemplateMatch, by))
    }

    /// Why `me`'s template text `t` is wrapped, and by whom; `None`: kept.
    fn why_template(&self, t: &str, me: &str) -> Option<(RenameReason, Vec<String>)> {
        if is_reserved(t) {
            return Some((RenameReason::ReservedScheme, Vec::new()));
        }
        let same = Self::others(&self.tpl_servers, t, me);
        (!same.is_empty()).then_some((RenameReason::SameUri, same))
    }
}

/// The exposed text and raw object of one item; `None` (left out, logged)
/// when its raw object cannot take the new text, which only a hand-built
/// item can cause.
pub(super) fn expose_item(
    server: &str,
    own: &str,
    raw: &RawValue,
    field: &str,
    why: Option<(RenameReason, Vec<String>)>,
    kind: ResourceKind,
    renamed: &mut Vec<ResourceRenamed>,
) -> Option<(String, Box<RawValue>)> {
    let Some((reason, with)) = why else {
        return Some((own.to_owned(), raw.to_owned()));
    };
    let exposed = wrap(server, own);
    let raw = match to_raw(&exposed).and_then(|v| set_fields(Some(raw), [(field.to_owned(), v)])) {
        Ok(raw) => raw,
        Err(err) => {
            tracing::warn!(server, uri = own, %err, "cannot set the exposed {field}; entry left out");
            return None;
        }
    };
    renamed.push(ResourceRenamed {
        kind,
        server: server.to_owned(),
        uri: own.to_owned(),
        exposed: exposed.clone(),
        reason,
        with,
    });
    Some((exposed, raw))
}

impl ResourceCatalog {
    /// Every resource, in config then server order.
    pub fn resources(&self) -> &[CatalogResource] {
        &self.resources
    }

    pub fn templates(&self) -> &[CatalogTemplate] {
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
    pub fn renamed(&self) -> &[ResourceRenamed] {
        &self.renamed
    }

    /// The renamed entries of one server (for `mcphost/servers/list`).
    pub fn renamed_for<'s>(&'s self, server: &'s str) -> impl Iterator<Item = &'s ResourceRenamed> {
        self.renamed.iter().filter(move |r| r.server == server)
    }

    /// Resources listed for one server.
    pub fn count_for(&self, server: &str) -> usize {
        self.resources.iter().filter(|r| r.server == server).count()
    }

    /// Templates listed for one server.
    pub fn templates_for(&self, server: &str) -> usize {
        self.templates.iter().filter(|t| t.server == server).count()
    }

    /// A `resources/list` page; same cursor rules as [`NamespacedCatalog::page`].
    pub fn page(
        &self,
        cursor: Option<&str>,
        page_size: usize,
    ) -> Result<(Vec<&CatalogResource>, Option<String>), InvalidCursor> {
        paginate(&self.resources, self.resources_fp, cursor, page_size)
    }

    /// A `resources/templates/list` page. A resources cursor is stale here.
    pub fn page_templates(
        &self,
        cursor: Option<&str>,
        page_size: usize,
    ) -> Result<(Vec<&CatalogTemplate>, Option<String>), InvalidCursor> {
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
