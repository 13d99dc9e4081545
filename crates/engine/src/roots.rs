//! Which roots each server sees. A session's own instance (`share:
//! per-session`) sees its session's roots; a shared server sees those of its
//! roots source: the primary host, else the one host with roots, else none.
//! The configured roots come after either. A `roots/list` is answered from
//! that source, never from whichever host's call happened to be in flight,
//! and a server offered roots is told (once per burst) when what it would be
//! answered changes.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;

use serde_json::value::RawValue;
use tokio::sync::OnceCell;
use tracing::{debug, info};

use mcphost_client::{Asker, HostRequest};
use mcphost_config::{HostConfig, Root, Share};
use mcphost_jsonrpc::{Origin, Relation};
use mcphost_protocol::{ErrorObject, error_codes, raw_field, set_fields, to_raw};

/// The roots the config gives (to every server, and to each one), and
/// what decides who else's a server sees.
#[derive(Default, PartialEq)]
pub(crate) struct ConfiguredRoots {
    global: Vec<Root>,
    per_server: HashMap<String, Vec<Root>>,
    /// `share: per-session` servers: their instances see their session's.
    per_session: HashSet<String>,
    /// Servers the config's `offer` withholds roots from.
    withheld: HashSet<String>,
}

impl ConfiguredRoots {
    pub(crate) fn of(cfg: &HostConfig) -> ConfiguredRoots {
        let names = |f: fn(&mcphost_config::ServerConfig) -> bool| {
            cfg.servers
                .iter()
                .filter(|s| f(s))
                .map(|s| s.name.clone())
                .collect()
        };
        ConfiguredRoots {
            global: cfg.roots.clone(),
            per_server: cfg
                .servers
                .iter()
                .filter(|s| !s.roots.is_empty())
                .map(|s| (s.name.clone(), s.roots.clone()))
                .collect(),
            per_session: names(|s| s.share == Share::PerSession),
            withheld: names(|s| !s.offer.roots),
        }
    }

    /// `server`'s roots, global ones first, each URI once.
    pub(crate) fn for_server(&self, server: &str) -> Vec<Root> {
        let mut out: Vec<Root> = Vec::new();
        let own = self.per_server.get(server).into_iter().flatten();
        for r in self.global.iter().chain(own) {
            if !out.iter().any(|o| o.uri == r.uri) {
                out.push(r.clone());
            }
        }
        out
    }
}

/// One server instance that may be told its roots changed: a shared
/// server, or a session's own instance of one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Target {
    pub(crate) server: String,
    pub(crate) session: Option<u64>,
}

/// Whose roots a server instance sees besides the configured ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// The registered primary host.
    Primary(u64),
    /// The one host connected that declared roots.
    OnlyHost(u64),
    /// A per-session instance's own session.
    Session(u64),
    /// Nobody's: `hosts` hosts with roots share the server (or none does).
    Configured { hosts: usize },
}

impl Source {
    fn host(self) -> Option<u64> {
        match self {
            Source::Primary(h) | Source::OnlyHost(h) | Source::Session(h) => Some(h),
            Source::Configured { .. } => None,
        }
    }
}

/// Something that may change which roots servers see.
pub(crate) enum Event {
    /// A handshake session that declared roots is initialized.
    Joined(u64),
    /// That session sent `notifications/roots/list_changed`.
    Changed(u64),
    Left(u64),
    Primary(Option<u64>),
    Configured(ConfiguredRoots),
}

/// A host's roots as last answered, until it says they changed.
struct HostRoots {
    /// Bumped by each `notifications/roots/list_changed` of the host.
    generation: u64,
    /// Shared by concurrent askers: one `roots/list` to the host per change.
    answer: Arc<OnceCell<Box<RawValue>>>,
}

#[derive(Default)]
struct State {
    configured: ConfiguredRoots,
    primary: Option<u64>,
    /// Initialized handshake sessions that declared roots.
    hosts: BTreeMap<u64, HostRoots>,
    /// Told of a change and not asked since: a further change needs no
    /// second notification, the next `roots/list` gets it anyway.
    told: HashSet<Target>,
}

/// What a target would be answered: its source host (and that host's
/// roots' generation) and its configured roots.
type View = (Option<(u64, u64)>, Vec<Root>);

impl State {
    fn shared_source(&self) -> Source {
        if let Some(p) = self.primary.filter(|p| self.hosts.contains_key(p)) {
            return Source::Primary(p);
        }
        match (self.hosts.len(), self.hosts.keys().next()) {
            (1, Some(only)) => Source::OnlyHost(*only),
            (hosts, _) => Source::Configured { hosts },
        }
    }

    fn source(&self, server: &str, session: Option<u64>) -> Source {
        match session {
            Some(s) if self.hosts.contains_key(&s) => Source::Session(s),
            Some(_) => Source::Configured { hosts: 0 },
            // A per-session server's shared instance only lists: it serves
            // no host.
            None if self.configured.per_session.contains(server) => Source::Configured { hosts: 0 },
            None => self.shared_source(),
        }
    }

    fn view(&self, t: &Target) -> View {
        let host = self.source(&t.server, t.session).host();
        let generation = host.and_then(|h| self.hosts.get(&h).map(|r| (h, r.generation)));
        (generation, self.configured.for_server(&t.server))
    }

    fn apply(&mut self, event: Event) {
        match event {
            Event::Joined(id) => {
                self.hosts.entry(id).or_insert_with(|| HostRoots {
                    generation: 0,
                    answer: Arc::new(OnceCell::new()),
                });
            }
            Event::Changed(id) => {
                if let Some(h) = self.hosts.get_mut(&id) {
                    h.generation += 1;
                    h.answer = Arc::new(OnceCell::new());
                }
            }
            Event::Left(id) => {
                self.hosts.remove(&id);
                if self.primary == Some(id) {
                    self.primary = None;
                }
            }
            Event::Primary(p) => self.primary = p,
            Event::Configured(c) => self.configured = c,
        }
    }
}

/// How one `roots/list` is answered.
enum Plan {
    /// The configured roots only.
    Configured(Vec<Root>),
    /// The host `id`'s roots (cached per change), then the configured ones.
    Host {
        id: u64,
        answer: Arc<OnceCell<Box<RawValue>>>,
        configured: Vec<Root>,
    },
    /// A stateless server's round: the caller's own roots for that request
    /// (a stateless client declares them per request), if it has any.
    Caller {
        origin: Origin,
        configured: Vec<Root>,
    },
}

/// The broker's roots: configured roots, each server's source, and each
/// host's last answer.
#[derive(Default)]
pub(crate) struct Roots {
    state: Mutex<State>,
}

impl Roots {
    fn lock(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Take up `event`; the targets (of those running) that must now be
    /// told their roots changed: those whose source or source's roots or
    /// configured roots changed, and that were not told already since they
    /// last asked.
    pub(crate) fn update(&self, targets: &[Target], event: Event) -> Vec<Target> {
        let mut st = self.lock();
        let before: Vec<View> = targets.iter().map(|t| st.view(t)).collect();
        st.apply(event);
        st.told.retain(|t| targets.contains(t));
        let mut tell = Vec::new();
        for (t, before) in targets.iter().zip(before) {
            if st.view(t) != before && st.told.insert(t.clone()) {
                tell.push(t.clone());
            }
        }
        tell
    }

    /// The configured roots of `server`.
    pub(crate) fn configured(&self, server: &str) -> Vec<Root> {
        self.lock().configured.for_server(server)
    }

    fn plan(&self, r: &HostRequest) -> Plan {
        let mut st = self.lock();
        let configured = st.configured.for_server(&r.server);
        // It asks again: a later change must be told again.
        let target = match r.asker {
            Asker::Shared => Some(None),
            Asker::Session(s) => Some(Some(s)),
            Asker::Request => None,
        };
        if let Some(session) = target {
            st.told.remove(&Target {
                server: r.server.clone(),
                session,
            });
        }
        let session = match r.asker {
            // A stateless session is asked only within its calls.
            Asker::Session(s) => match &r.relation {
                Relation::Caused(o) if o.session == s && !st.hosts.contains_key(&s) => {
                    return Plan::Caller {
                        origin: o.clone(),
                        configured,
                    };
                }
                _ => Some(s),
            },
            Asker::Shared => None,
            Asker::Request => match &r.relation {
                Relation::Caused(o) if !st.hosts.contains_key(&o.session) => {
                    return Plan::Caller {
                        origin: o.clone(),
                        configured,
                    };
                }
                Relation::Caused(o) => Some(o.session),
                _ => None,
            },
        };
        let source = match (r.asker, session) {
            (Asker::Request, Some(s)) => Source::Session(s),
            _ => st.source(&r.server, session),
        };
        debug!(server = %r.server, ?source, "roots/list answered from its roots source");
        match source.host().and_then(|h| st.hosts.get(&h).map(|c| (h, c))) {
            Some((id, cached)) => Plan::Host {
                id,
                answer: cached.answer.clone(),
                configured,
            },
            None => Plan::Configured(configured),
        }
    }

    /// The answer to `r`, a server's `roots/list`. `ask` puts it to a
    /// session (for the call `origin`, if any): `None` when that session is
    /// gone or cannot answer it.
    pub(crate) async fn answer<F, A>(
        &self,
        r: &HostRequest,
        ask: A,
    ) -> Result<Box<RawValue>, ErrorObject>
    where
        A: Fn(u64, Option<&Origin>) -> Option<F>,
        F: Future<Output = Result<Box<RawValue>, ErrorObject>>,
    {
        match self.plan(r) {
            Plan::Configured(configured) => configured_answer(&configured),
            Plan::Host {
                id,
                answer,
                configured,
            } => {
                // `None`: the host went between the plan and the ask.
                let got = answer
                    .get_or_try_init(|| async {
                        info!(server = %r.server, session = id, "asking the roots source host");
                        match ask(id, None) {
                            Some(asked) => asked.await.map_err(Some),
                            None => Err(None),
                        }
                    })
                    .await;
                match got {
                    Ok(answer) => with_roots(answer, &configured),
                    Err(None) => configured_answer(&configured),
                    Err(Some(e)) => Err(e),
                }
            }
            Plan::Caller { origin, configured } => match ask(origin.session, Some(&origin)) {
                Some(asked) => with_roots(&asked.await?, &configured),
                None => configured_answer(&configured),
            },
        }
    }

    /// `mcphost/servers/list`'s roots fields for `server` (none for a
    /// server not offered roots): `rootsSource`, and `rootsHost` (the
    /// session) or `rootsNote`.
    pub(crate) fn describe(
        &self,
        server: &str,
        stateless: bool,
    ) -> Vec<(&'static str, serde_json::Value)> {
        use serde_json::json;
        let st = self.lock();
        if st.configured.withheld.contains(server) {
            return Vec::new();
        }
        if stateless {
            return vec![("rootsSource", json!("caller"))];
        }
        if st.configured.per_session.contains(server) {
            return vec![("rootsSource", json!("session"))];
        }
        match st.shared_source() {
            Source::Primary(h) => vec![("rootsSource", json!("primary")), ("rootsHost", json!(h))],
            Source::OnlyHost(h) | Source::Session(h) => {
                vec![("rootsSource", json!("only-host")), ("rootsHost", json!(h))]
            }
            Source::Configured { hosts } if hosts > 1 => vec![
                ("rootsSource", json!("configured")),
                (
                    "rootsNote",
                    json!(format!(
                        "shared by {hosts} hosts with roots: configured roots only; \
                         set share: per-session or register a primary"
                    )),
                ),
            ],
            Source::Configured { .. } => vec![("rootsSource", json!("configured"))],
        }
    }
}

fn configured_answer(configured: &[Root]) -> Result<Box<RawValue>, ErrorObject> {
    to_raw(&serde_json::json!({ "roots": configured }))
        .map_err(|e| ErrorObject::new(error_codes::INTERNAL_ERROR, e.to_string()))
}

/// A host's `roots/list` answer with the configured roots added after its
/// own (each URI once); with none configured, the answer as it came.
pub(crate) fn with_roots(
    answer: &RawValue,
    configured: &[Root],
) -> Result<Box<RawValue>, ErrorObject> {
    let invalid = |e: String| {
        ErrorObject::new(
            error_codes::INTERNAL_ERROR,
            format!("the host's roots/list answer: {e}"),
        )
    };
    if configured.is_empty() {
        return RawValue::from_string(answer.get().to_owned()).map_err(|e| invalid(e.to_string()));
    }
    #[derive(serde::Deserialize)]
    struct Listed {
        uri: String,
    }
    let mut roots: Vec<Box<RawValue>> = raw_field(answer, "roots")
        .map_err(|e| invalid(e.to_string()))?
        .unwrap_or_default();
    let known: Vec<String> = roots
        .iter()
        .filter_map(|r| serde_json::from_str::<Listed>(r.get()).ok().map(|l| l.uri))
        .collect();
    for r in configured.iter().filter(|r| !known.contains(&r.uri)) {
        roots.push(to_raw(r).map_err(|e| invalid(e.to_string()))?);
    }
    let roots = to_raw(&roots).map_err(|e| invalid(e.to_string()))?;
    set_fields(Some(answer), [("roots".to_owned(), roots)]).map_err(|e| invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(uri: &str) -> Root {
        Root {
            uri: uri.to_owned(),
            name: None,
        }
    }

    #[test]
    fn a_hosts_roots_come_first_and_configured_ones_are_added_once() {
        let answer = RawValue::from_string(
            r#"{"roots":[{"uri":"file:///h","name":"host","_meta":{"x":1.10}}],"_meta":{"k":1}}"#
                .to_owned(),
        )
        .unwrap();
        let out = with_roots(&answer, &[root("file:///h"), root("file:///c")]).unwrap();
        assert_eq!(
            out.get(),
            r#"{"roots":[{"uri":"file:///h","name":"host","_meta":{"x":1.10}},{"uri":"file:///c"}],"_meta":{"k":1}}"#
        );
        // Nothing configured: the host's bytes, untouched.
        assert_eq!(with_roots(&answer, &[]).unwrap().get(), answer.get());
    }

    #[test]
    fn a_server_gets_the_global_roots_then_its_own() {
        let cfg = mcphost_config::parse(
            r#"{"roots":["/g", {"uri":"file:///both","name":"B"}],
                "mcpServers":{"a":{"command":"x","roots":["file:///both","/a"]},"b":{"command":"y"}},
                "loginShellPath":false}"#,
            std::path::Path::new("/c/config.json"),
            &|_| None,
        )
        .unwrap();
        let roots = ConfiguredRoots::of(&cfg);
        let uris = |s: &str| {
            roots
                .for_server(s)
                .into_iter()
                .map(|r| r.uri)
                .collect::<Vec<_>>()
        };
        assert_eq!(uris("a"), ["file:///g", "file:///both", "file:///a"]);
        assert_eq!(uris("b"), ["file:///g", "file:///both"]);
        assert_eq!(roots.for_server("a")[1].name.as_deref(), Some("B"));
    }

    #[test]
    fn roots_must_be_file_uris_or_absolute_paths() {
        let err = mcphost_config::parse(
            r#"{"roots":["https://x.example/", "relative/dir", {"name":"n"}],"mcpServers":{}}"#,
            std::path::Path::new("/c/config.json"),
            &|_| None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("roots[0]") && err.contains("not a file:// URI"),
            "{err}"
        );
        assert!(err.contains("roots[1]") && err.contains("neither"), "{err}");
        assert!(
            err.contains("roots[2]") && err.contains("needs a uri"),
            "{err}"
        );
    }

    fn shared(server: &str) -> Target {
        Target {
            server: server.to_owned(),
            session: None,
        }
    }

    #[test]
    fn the_source_is_the_primary_else_the_only_host_else_nobody() {
        let roots = Roots::default();
        let t = [shared("fs")];
        assert_eq!(roots.update(&t, Event::Joined(1)), t, "a first host");
        // Told and not asked since: a second change needs no notification.
        assert!(roots.update(&t, Event::Changed(1)).is_empty());
        roots.lock().told.clear();
        assert_eq!(roots.update(&t, Event::Joined(2)), t, "a second host");
        assert_eq!(
            roots.lock().shared_source(),
            Source::Configured { hosts: 2 }
        );
        roots.lock().told.clear();
        // Neither source's change matters now.
        assert!(roots.update(&t, Event::Changed(2)).is_empty());
        assert_eq!(roots.update(&t, Event::Primary(Some(2))), t);
        assert_eq!(roots.lock().shared_source(), Source::Primary(2));
        roots.lock().told.clear();
        assert!(roots.update(&t, Event::Changed(1)).is_empty());
        assert_eq!(roots.update(&t, Event::Left(2)), t);
        assert_eq!(roots.lock().shared_source(), Source::OnlyHost(1));
    }
}
