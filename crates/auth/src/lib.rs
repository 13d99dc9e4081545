//! OAuth 2.1 for HTTP servers (the MCP authorization spec, 2025-03-26 to
//! 2026-07-28): discovery, client registration, the authorization code flow
//! with PKCE through the host's browser, machine grants, and one token store
//! for every process of the user, refreshed single-flight.
//!
//! An [`Authorizer`] belongs to one HTTP server. The transport asks it for
//! the bearer token of each request and hands it every 401/403; it answers
//! "retry" once it holds a token worth trying (another process refreshed,
//! we refreshed, a machine grant, a sign-in), or the reason it cannot.

// No production function over 100 lines of code (docs/architecture.md).
#![warn(clippy::too_many_lines)]

pub mod browser;
pub mod challenge;
pub mod discovery;
pub mod dpop;
pub mod flow;
pub mod grant;
pub mod store;
pub mod wif;

pub use store::process_env;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::Mutex;
use tracing::{debug, info, warn};
use url::Url;

use browser::Browser;
use challenge::BearerChallenge;
use discovery::ServerMetadata;
use grant::{ClientAuth, Grant};
use mcphost_config::Secret;
use mcphost_transport::BoxFuture;
use mcphost_transport::http::{Challenged, Credentials, Presented};
use store::{Registration, StoredSignIn, TokenKey, TokenStore, Tokens};

pub use mcphost_config::oauth::{CLIENT_ENV, CLIENT_METADATA_ENV, OAuthConfig};

/// Refresh this long before a token expires, or at half its life when
/// that is sooner ([`refresh_due`]).
const REFRESH_MARGIN: Duration = Duration::from_secs(60);
/// Sign-ins for more scope before giving up on a server that keeps saying
/// `insufficient_scope`.
const MAX_STEP_UPS: u32 = 2;
const TOKEN_TIMEOUT: Duration = Duration::from_secs(30);

/// What sign-in may cost per server in a minute (issue 21): a server that
/// refuses every token must not have the browser opened, or the token
/// endpoint called, without end.
pub const MAX_BROWSER_LAUNCHES: usize = 3;
pub const MAX_TOKEN_REQUESTS: usize = 3;
/// Fresh tokens a server may refuse in a minute before sign-in stops.
pub const MAX_REFUSALS: usize = 2;
pub const ATTEMPT_WINDOW: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attempt {
    Browser,
    Token,
    Refusal,
}

impl Attempt {
    fn limit(self) -> usize {
        match self {
            Attempt::Browser => MAX_BROWSER_LAUNCHES,
            Attempt::Token => MAX_TOKEN_REQUESTS,
            Attempt::Refusal => MAX_REFUSALS,
        }
    }
    fn what(self) -> &'static str {
        match self {
            Attempt::Browser => "browser launches",
            Attempt::Token => "token requests",
            Attempt::Refusal => "fresh tokens refused by the server",
        }
    }
}

#[derive(Default)]
struct Recent {
    at: Vec<(Attempt, std::time::Instant)>,
    last_refusal: Option<String>,
    /// Sign-in stopped, and why: until a person signs in again.
    stopped: Option<String>,
}

/// Sign-in attempts per server, in a sliding minute; shared by every
/// authorizer of a process, so a restarted server starts from its count.
#[derive(Default)]
pub struct Attempts {
    by_server: parking_lot::Mutex<std::collections::HashMap<String, Recent>>,
}

impl Attempts {
    /// One more `kind` for `server`, or the error once its limit is spent.
    fn take(&self, server: &str, kind: Attempt) -> Result<(), AuthError> {
        let now = std::time::Instant::now();
        let mut m = self.by_server.lock();
        let r = m.entry(server.to_owned()).or_default();
        r.at.retain(|(_, t)| {
            now.checked_duration_since(*t)
                .is_none_or(|d| d < ATTEMPT_WINDOW)
        });
        // A refusal has happened already: it counts before the check, so
        // the second one stops sign-in rather than fetching another token.
        if kind == Attempt::Refusal {
            r.at.push((kind, now));
        }
        let n = r.at.iter().filter(|(k, _)| *k == kind).count();
        if n >= kind.limit() {
            let e = AuthError::GaveUp {
                server: server.to_owned(),
                why: format!(
                    "{n} {} in the last {}s",
                    kind.what(),
                    ATTEMPT_WINDOW.as_secs()
                ),
                last: r
                    .last_refusal
                    .clone()
                    .unwrap_or_else(|| "none recorded".into()),
            };
            r.stopped = Some(e.to_string());
            return Err(e);
        }
        if kind != Attempt::Refusal {
            r.at.push((kind, now));
        }
        Ok(())
    }

    fn refused(&self, server: &str, reason: String) {
        let mut m = self.by_server.lock();
        m.entry(server.to_owned()).or_default().last_refusal = Some(reason);
    }

    /// Why sign-in to `server` was stopped after repeated refusals (its
    /// last error, with the command that fixes it), until [`Attempts::reset`]:
    /// the server is then `auth_failed`, not `auth_required`.
    pub fn stopped(&self, server: &str) -> Option<String> {
        let m = self.by_server.lock();
        m.get(server).and_then(|r| r.stopped.clone())
    }

    /// A person signed in again (`mcphost auth login`, another process):
    /// the count starts over.
    pub fn reset(&self, server: &str) {
        let mut m = self.by_server.lock();
        m.remove(server);
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    #[error(
        "server '{server}': stopped signing in: {why} (the server's last refusal: {last}). Fix the server, then run `mcphost auth login {server}`"
    )]
    GaveUp {
        server: String,
        why: String,
        last: String,
    },
    #[error("{url}: {reason}")]
    Http { url: String, reason: String },
    #[error("{url}: {reason}")]
    Metadata { url: String, reason: String },
    #[error(
        "authorization server metadata at {url} names issuer {found:?}, not {expected:?}; refusing it (RFC 8414 §3.3)"
    )]
    IssuerMismatch {
        url: String,
        expected: String,
        found: String,
    },
    #[error(
        "{what} {url} is not https (only a loopback address may use plain http); refusing it: the sign-in would cross the network in cleartext"
    )]
    Insecure { what: String, url: String },
    #[error(
        "server '{server}': the client {client_id:?} is for the authorization server {expected} ({why}), but this server's authorization server is {found}; refusing to send the client there. If that client really is registered at {found}, set \"issuer\": \"{found}\" beside its clientId"
    )]
    ClientIssuer {
        server: String,
        client_id: String,
        expected: String,
        found: String,
        why: &'static str,
    },
    #[error(
        "server '{server}': the protected-resource metadata at {prm} is for {declared}, not for the server's URL {url}; refusing to sign in for another resource (RFC 9728 §3.3: `resource` must be the server's URL exactly)"
    )]
    ResourceMismatch {
        server: String,
        url: String,
        prm: String,
        declared: String,
    },
    #[error(
        "{what} {url} is a link-local or cloud metadata address; refusing to send anything there (only the MCP server's own host may be)"
    )]
    MetadataAddress { what: String, url: String },
    #[error("no authorization server found for {server}: {reason}")]
    NoAuthServer { server: String, reason: String },
    #[error(
        "the authorization server {issuer} does not support PKCE with S256 (code_challenge_methods_supported: {listed}); refusing to sign in without it"
    )]
    NoS256 { issuer: String, listed: String },
    #[error("{0}")]
    Client(String),
    #[error(
        "the authorization server {issuer} offers no way to register mcphost: no client ID metadata document support, no registration endpoint. Register a client with it and set \"oauth\": {{\"clientId\": …}} for this server (or {CLIENT_ENV})"
    )]
    NoRegistration { issuer: String },
    #[error(
        "the sign-in redirect came back with iss {found:?}, expected {expected:?} (RFC 9207); refused"
    )]
    IssMismatch { expected: String, found: String },
    #[error("the authorization server refused the sign-in: {0}")]
    Refused(String),
    #[error(
        "no sign-in redirect arrived within {}s; the listener is closed. Run the sign-in again",
        after.as_secs()
    )]
    CallbackTimeout { after: Duration },
    #[error("{grant} request to {url} failed: {reason}")]
    Token {
        grant: &'static str,
        url: String,
        reason: String,
        invalid_grant: bool,
    },
    #[error("cannot show the sign-in page: {0}")]
    Browser(String),
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("signing in needs a person: {0}")]
    NeedsLogin(String),
    #[error(
        "server '{server}': cannot get the workload identity token from {source_desc}: {reason}"
    )]
    Workload {
        server: String,
        source_desc: String,
        reason: String,
    },
}

/// Whether `t`, issued at `issued_at` (Unix seconds), is to be refreshed
/// now: within [`REFRESH_MARGIN`] of its expiry, or within half its life
/// when it lives less than twice that, so that a short-lived token is
/// refreshed once, not before every request.
fn refresh_due(t: &Tokens, issued_at: u64) -> bool {
    let margin = t
        .expires_at
        .map(|at| Duration::from_secs(at.saturating_sub(issued_at) / 2))
        .map_or(REFRESH_MARGIN, |half| half.min(REFRESH_MARGIN));
    grant::expiring(t, margin)
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// What discovery found, kept for the authorizer's life.
#[derive(Clone)]
struct Found {
    key: TokenKey,
    meta: ServerMetadata,
    /// The scopes a sign-in asks for, before step-up.
    scope: Option<String>,
}

#[derive(Default)]
struct State {
    found: Option<Found>,
    tokens: Option<Tokens>,
    /// When `tokens` were issued (Unix seconds; for a stored token, when it
    /// was stored): their life, for [`refresh_due`].
    issued_at: u64,
    /// Whose `tokens` are: never sent to, or refreshed at, another.
    tokens_key: Option<TokenKey>,
    /// The DPoP key of an authorization server and resource: the one
    /// `tokens` are bound to when their type is DPoP.
    dpop: Option<(TokenKey, dpop::DpopKey)>,
    /// Sign-ins for more scope since a token of ours was last accepted.
    step_ups: u32,
    /// The token we got last from the token endpoint, and when.
    fresh: Option<(String, std::time::Instant)>,
    /// The issuer a configured client without `issuer` was first used at.
    client_issuer: Option<String>,
    /// Looked in the store for a token covering this server.
    looked: bool,
}

/// OAuth for one HTTP server.
pub struct Authorizer {
    server: String,
    url: Url,
    http: reqwest::Client,
    store: Option<TokenStore>,
    config: OAuthConfig,
    /// The server's own settings, without the environment's client: used
    /// instead of `config` where that client is for another issuer.
    own: Option<OAuthConfig>,
    /// The environment's client was merged in for its issuer only.
    env_off: std::sync::atomic::AtomicBool,
    /// Who shows a sign-in page; `None`: never sign in here (a daemon with
    /// no host that can), say what to run instead.
    browser: Option<Arc<dyn Browser>>,
    login_timeout: Duration,
    state: parking_lot::Mutex<State>,
    /// One 401 is handled at a time; the others then find the new token.
    flight: Mutex<()>,
    /// Itself, once shared ([`Authorizer::into_shared`]): a sign-in then
    /// runs on its own task, so a request that gives up waiting (a probe's
    /// short limit, a handshake timeout) does not take the person's
    /// sign-in, and its listener, down with it.
    me: std::sync::Weak<Authorizer>,
    /// The sign-in under way, for every request that needs it.
    signing: parking_lot::Mutex<Option<SignIn>>,
    attempts: Arc<Attempts>,
    /// The DPoP nonces of the authorization and resource servers.
    nonces: dpop::Nonces,
}

type SignIn = tokio::sync::watch::Receiver<Option<Result<(), String>>>;

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

/// How long a sign-in waits for the browser's redirect by default.
pub const LOGIN_TIMEOUT: Duration = Duration::from_secs(300);

impl Authorizer {
    pub fn new(
        server: &str,
        url: &str,
        store: Option<TokenStore>,
        config: OAuthConfig,
        browser: Option<Arc<dyn Browser>>,
    ) -> Result<Authorizer, AuthError> {
        let url =
            Url::parse(url).map_err(|e| AuthError::Client(format!("server '{server}': {e}")))?;
        if url.scheme() == "http" && !discovery::is_loopback(&url) {
            warn!(server, %url, "plain http on a host that is not loopback: anyone on the network can read this server's traffic, and signing in to it is refused");
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(TOKEN_TIMEOUT)
            // Redirects of metadata and token requests are not followed:
            // a token request must reach the endpoint the metadata named.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("mcphost/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| AuthError::Client(format!("cannot build the HTTP client: {e}")))?;
        Ok(Authorizer {
            server: server.to_owned(),
            url,
            http,
            store,
            config,
            own: None,
            env_off: std::sync::atomic::AtomicBool::new(false),
            browser,
            login_timeout: LOGIN_TIMEOUT,
            state: parking_lot::Mutex::new(State::default()),
            flight: Mutex::new(()),
            me: std::sync::Weak::new(),
            signing: parking_lot::Mutex::new(None),
            attempts: Arc::new(Attempts::default()),
            nonces: dpop::Nonces::default(),
        })
    }

    /// Counts sign-in attempts in `attempts` (shared with the process's
    /// other authorizers of this server) instead of its own.
    pub fn with_attempts(mut self, attempts: Arc<Attempts>) -> Self {
        self.attempts = attempts;
        self
    }

    /// Shared, as the transport holds it; sign-ins then outlive the
    /// request that started them.
    pub fn into_shared(self) -> Arc<Authorizer> {
        Arc::new_cyclic(|me| Authorizer {
            me: me.clone(),
            ..self
        })
    }

    /// `config` holds the environment's client for its issuer only
    /// ([`OAuthConfig::issuer`]): where discovery finds another, `own` (the
    /// server's settings alone) is used instead.
    pub fn with_env_for_issuer(mut self, own: OAuthConfig) -> Self {
        self.own = Some(own);
        self
    }

    /// The settings in use: the environment's client only at its issuer.
    fn cfg(&self) -> &OAuthConfig {
        match &self.own {
            Some(own) if self.env_off.load(std::sync::atomic::Ordering::Acquire) => own,
            _ => &self.config,
        }
    }

    /// A configured client (config or environment) goes to its issuer
    /// only; one that names none is bound to the first it is used with.
    /// Checked on every discovery, before anything is sent to the
    /// authorization server: a hostile server cannot point it elsewhere.
    fn check_client_issuer(&self, issuer: &str) -> Result<(), AuthError> {
        let same = |a: &str| a.trim_end_matches('/') == issuer.trim_end_matches('/');
        if self.own.is_some() {
            let off = !self.config.issuer.as_deref().is_some_and(same);
            if off {
                debug!(server = %self.server, %issuer, "the environment's client is for another issuer; not used here");
            }
            self.env_off
                .store(off, std::sync::atomic::Ordering::Release);
            return Ok(());
        }
        let c = &self.config;
        let Some(client_id) = c.client_id.clone() else {
            return Ok(());
        };
        let mismatch = |expected: &str, why| AuthError::ClientIssuer {
            server: self.server.clone(),
            client_id: client_id.clone(),
            expected: expected.to_owned(),
            found: issuer.to_owned(),
            why,
        };
        if let Some(want) = &c.issuer {
            return if same(want) {
                Ok(())
            } else {
                Err(mismatch(want, "its \"issuer\""))
            };
        }
        let mut st = self.state();
        match &st.client_issuer {
            Some(p) if same(p) => Ok(()),
            Some(p) => Err(mismatch(
                p,
                "the first one it was used with; it names no \"issuer\"",
            )),
            None => {
                warn!(server = %self.server, %client_id, %issuer, "the configured client names no \"issuer\"; it is bound to this one for the life of this process. Set \"issuer\" beside its clientId");
                st.client_issuer = Some(issuer.to_owned());
                Ok(())
            }
        }
    }

    pub fn with_login_timeout(mut self, t: Duration) -> Self {
        self.login_timeout = t;
        self
    }

    fn state(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }

    fn current(&self) -> Option<String> {
        self.state()
            .tokens
            .as_ref()
            .map(|t| t.access_token.expose().to_owned())
    }

    /// A stored token whose resource covers this server, found before any
    /// 401 so that a signed-in server costs no extra round trip.
    fn look_in_store(&self) {
        let mut st = self.state();
        if st.looked || st.tokens.is_some() {
            return;
        }
        st.looked = true;
        let Some(store) = &self.store else { return };
        let found = match store.list() {
            Ok(v) => v,
            Err(e) => {
                warn!(server = %self.server, "token store: {e}");
                return;
            }
        };
        let mine = found.into_iter().find(|(k, e)| {
            e.tokens.is_some()
                && Url::parse(&k.resource)
                    .is_ok_and(|r| discovery::canonical(&r) == discovery::canonical(&self.url))
        });
        if let Some((k, e)) = mine {
            debug!(server = %self.server, "using a stored token");
            hold(&mut st, &k, e);
        }
    }

    /// Discovery, once: the protected resource, its authorization server
    /// and that server's metadata.
    async fn discover(
        &self,
        challenge: &BearerChallenge,
        protocol_version: Option<&str>,
    ) -> Result<Found, AuthError> {
        if let Some(f) = self.state().found.clone() {
            return Ok(f);
        }
        let prm = discovery::protected_resource(
            &self.http,
            &self.url,
            challenge.resource_metadata.as_deref(),
            protocol_version,
        )
        .await?;
        let (issuer, resource, prm_scopes) = match prm {
            Some((prm, prm_url)) => {
                let resource = match prm.resource.as_deref() {
                    Some(r) if discovery::resource_matches(r, &prm_url, &self.url) => r.to_owned(),
                    other => {
                        return Err(AuthError::ResourceMismatch {
                            server: self.server.clone(),
                            url: discovery::canonical(&self.url),
                            prm: prm_url.to_string(),
                            declared: other.map_or_else(
                                || "no resource (the field is missing)".to_owned(),
                                |r| format!("{:?}", discovery::escape_controls(r)),
                            ),
                        });
                    }
                };
                let issuer = prm.authorization_servers.first().cloned().ok_or_else(|| {
                    AuthError::NoAuthServer {
                        server: self.url.to_string(),
                        reason: "its protected-resource metadata lists no authorization_servers"
                            .into(),
                    }
                })?;
                (Some(issuer), resource, prm.scopes_supported)
            }
            None => (None, discovery::canonical(&self.url), None),
        };
        let meta = match &issuer {
            Some(iss) => discovery::server_metadata(&self.http, &self.url, iss, protocol_version)
                .await?
                .ok_or_else(|| AuthError::NoAuthServer {
                    server: self.url.to_string(),
                    reason: format!("{iss} publishes no OAuth or OpenID Connect metadata"),
                })?,
            // 2025-03-26: the server's origin is its authorization server.
            None => {
                discovery::legacy_server_metadata(&self.http, &self.url, protocol_version).await?
            }
        };
        let issuer = if meta.issuer.is_empty() {
            issuer.unwrap_or_default()
        } else {
            meta.issuer.clone()
        };
        for (what, url) in [
            ("authorization_endpoint", &meta.authorization_endpoint),
            ("token_endpoint", &meta.token_endpoint),
            ("registration_endpoint", &meta.registration_endpoint),
        ] {
            if let Some(u) = url {
                let what = format!("{issuer}'s {what}");
                let u = discovery::secure_url(u, &what)?;
                discovery::require_not_metadata(&u, &self.url, &what)?;
            }
        }
        self.check_client_issuer(&issuer)?;
        let scope = self
            .cfg()
            .scope
            .clone()
            .or_else(|| challenge.scope.clone())
            .or_else(|| prm_scopes.filter(|s| !s.is_empty()).map(|s| s.join(" ")));
        let found = Found {
            key: TokenKey { issuer, resource },
            meta,
            scope,
        };
        info!(server = %self.server, issuer = %found.key.issuer, resource = %found.key.resource, "authorization server found");
        self.state().found = Some(found.clone());
        Ok(found)
    }

    fn entry(&self, key: &TokenKey) -> Option<StoredSignIn> {
        let store = self.store.as_ref()?;
        match store.load(key) {
            Ok(e) => e,
            Err(e) => {
                warn!(server = %self.server, "token store: {e}");
                None
            }
        }
    }

    fn save(
        &self,
        key: &TokenKey,
        update: impl FnOnce(&mut StoredSignIn),
    ) -> Result<(), AuthError> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        let mut e = store.load(key)?.unwrap_or_default();
        update(&mut e);
        e.server = Some(self.server.clone());
        e.writer = Some(std::process::id());
        e.updated_at = now_secs();
        store.save(key, &e)?;
        Ok(())
    }

    /// The client we are at this authorization server, registering if we
    /// must: configured (or scripted), stored, a client ID metadata document,
    /// dynamic registration.
    async fn client(
        &self,
        found: &Found,
        redirect_uri: Option<&str>,
    ) -> Result<ClientAuth, AuthError> {
        let meta = &found.meta;
        let c = self.cfg();
        if let Some(id) = &c.client_id {
            return self.auth_for(
                id,
                c.client_secret.clone(),
                c.token_endpoint_auth_method.clone(),
                found,
            );
        }
        if let Some(reg) = self.entry(&found.key).and_then(|e| e.client) {
            return self.auth_for(
                &reg.client_id,
                reg.client_secret,
                reg.token_endpoint_auth_method,
                found,
            );
        }
        if meta.client_id_metadata_document_supported
            && let Some(url) = &c.client_metadata_url
        {
            return Ok(ClientAuth::None {
                client_id: url.clone(),
            });
        }
        let Some(endpoint) = &meta.registration_endpoint else {
            return Err(AuthError::NoRegistration {
                issuer: found.key.issuer.clone(),
            });
        };
        let endpoint = discovery::secure_url(endpoint, "registration_endpoint")?;
        let method = if meta.supports_auth_method("none")
            || meta.token_endpoint_auth_methods_supported.is_none()
        {
            "none"
        } else if meta.supports_auth_method("client_secret_basic") {
            "client_secret_basic"
        } else {
            "client_secret_post"
        };
        let body = serde_json::json!({
            "client_name": "mcphost",
            "application_type": "native",
            "redirect_uris": [redirect_uri.unwrap_or("http://127.0.0.1/callback")],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": method,
            "software_id": "mcphost",
            "software_version": env!("CARGO_PKG_VERSION"),
        });
        let resp = self
            .http
            .post(endpoint.clone())
            .json(&body)
            .send()
            .await
            .map_err(|e| AuthError::Http {
                url: endpoint.to_string(),
                reason: mcphost_transport::http::error_chain(&e),
            })?;
        let status = resp.status();
        let text = discovery::read_body(resp, 64 * 1024, &endpoint).await?;
        if !status.is_success() {
            return Err(AuthError::Http {
                url: endpoint.to_string(),
                reason: format!(
                    "client registration refused: HTTP {status}: {}",
                    discovery::escape_controls(&text.chars().take(300).collect::<String>())
                ),
            });
        }
        let reg: Registration = serde_json::from_str(&text).map_err(|e| AuthError::Metadata {
            url: endpoint.to_string(),
            reason: format!("not a registration response: {e}"),
        })?;
        info!(server = %self.server, client_id = %reg.client_id, "registered with the authorization server");
        let auth = self.auth_for(
            &reg.client_id,
            reg.client_secret.clone(),
            reg.token_endpoint_auth_method.clone(),
            found,
        )?;
        self.save(&found.key, |e| e.client = Some(reg))?;
        Ok(auth)
    }

    /// The token endpoint authentication for a client: as registered or
    /// configured, else the best the server lists for what we hold.
    fn auth_for(
        &self,
        client_id: &str,
        secret: Option<Secret>,
        method: Option<String>,
        found: &Found,
    ) -> Result<ClientAuth, AuthError> {
        let meta = &found.meta;
        let method = method.unwrap_or_else(|| {
            if self.cfg().private_key_pem.is_some() {
                "private_key_jwt".into()
            } else if secret.is_none() {
                "none".into()
            } else if meta.supports_auth_method("client_secret_basic")
                || meta.token_endpoint_auth_methods_supported.is_none()
            {
                "client_secret_basic".into()
            } else if meta.supports_auth_method("client_secret_post") {
                "client_secret_post".into()
            } else {
                "client_secret_basic".into()
            }
        });
        let id = client_id.to_owned();
        let need_secret = |m: &str| {
            secret.clone().ok_or_else(|| {
                AuthError::Client(format!(
                    "token_endpoint_auth_method {m} needs a client secret (clientSecret)"
                ))
            })
        };
        Ok(match method.as_str() {
            "none" => ClientAuth::None { client_id: id },
            "client_secret_basic" => ClientAuth::Basic {
                client_id: id,
                secret: need_secret("client_secret_basic")?,
            },
            "client_secret_post" => ClientAuth::Post {
                client_id: id,
                secret: need_secret("client_secret_post")?,
            },
            "private_key_jwt" => ClientAuth::PrivateKeyJwt {
                client_id: id,
                key_pem: self.cfg().private_key_pem.clone().ok_or_else(|| {
                    AuthError::Client(
                        "token_endpoint_auth_method private_key_jwt needs private_key_pem".into(),
                    )
                })?,
                algorithm: self
                    .config
                    .signing_algorithm
                    .clone()
                    .unwrap_or_else(|| "ES256".into()),
                audience: found.key.issuer.clone(),
            },
            other => {
                return Err(AuthError::Client(format!(
                    "token_endpoint_auth_method {other:?} is not supported (client_secret_basic, client_secret_post, none, private_key_jwt)"
                )));
            }
        })
    }

    fn token_endpoint(&self, found: &Found) -> Result<Url, AuthError> {
        let t = found
            .meta
            .token_endpoint
            .as_deref()
            .ok_or_else(|| AuthError::NoAuthServer {
                server: self.url.to_string(),
                reason: format!("{} lists no token_endpoint", found.key.issuer),
            })?;
        discovery::secure_url(t, "token_endpoint")
    }

    /// New tokens from the token endpoint, saved under the store's lock so
    /// that they never land in the middle of another process's refresh.
    async fn adopt(&self, key: &TokenKey, tokens: Tokens) -> Result<(), AuthError> {
        let _lock = match &self.store {
            Some(s) => Some(s.lock(key).await?),
            None => None,
        };
        self.adopt_locked(key, tokens)
    }

    /// [`Authorizer::adopt`], the store's lock already held.
    fn adopt_locked(&self, key: &TokenKey, tokens: Tokens) -> Result<(), AuthError> {
        let endpoint = self
            .state()
            .found
            .as_ref()
            .and_then(|f| f.meta.token_endpoint.clone());
        self.save(key, |e| {
            e.tokens = Some(tokens.clone());
            e.token_endpoint = endpoint;
        })?;
        let mut st = self.state();
        st.fresh = Some((
            tokens.access_token.expose().to_owned(),
            std::time::Instant::now(),
        ));
        st.tokens = Some(tokens);
        st.issued_at = now_secs();
        st.tokens_key = Some(key.clone());
        Ok(())
    }

    /// The DPoP key for a token request to `found`'s authorization server:
    /// where it issues DPoP tokens (or `bound`: the token to refresh is
    /// one), the one in the store beside the tokens, else a new one, saved
    /// there before it is used so that every process proves the same key.
    fn dpop_key(&self, found: &Found, bound: bool) -> Result<Option<dpop::DpopKey>, AuthError> {
        if !bound && !dpop::supported(&found.meta) {
            return Ok(None);
        }
        if let Some((k, key)) = &self.state().dpop
            && *k == found.key
        {
            return Ok(Some(key.clone()));
        }
        let key = match self.entry(&found.key).and_then(|e| e.dpop_key) {
            Some(k) => k,
            None => {
                let k = dpop::DpopKey::generate()?;
                self.save(&found.key, |e| e.dpop_key = Some(k.clone()))?;
                debug!(server = %self.server, "new DPoP key");
                k
            }
        };
        self.state().dpop = Some((found.key.clone(), key.clone()));
        Ok(Some(key))
    }

    /// Refresh, single-flight across processes: under the store's lock, a
    /// token someone else already refreshed is taken as it is, and the
    /// newest refresh token is the one used, once.
    async fn refresh(&self, found: &Found, failed: Option<&str>) -> Result<bool, AuthError> {
        let _lock = match &self.store {
            Some(s) => Some(s.lock(&found.key).await?),
            None => None,
        };
        let entry = self.entry(&found.key).filter(|e| e.tokens.is_some());
        let stored = entry
            .as_ref()
            .and_then(|e| Some((e.tokens.clone()?, e.updated_at)));
        let current = stored.or_else(|| {
            let st = self.state();
            st.tokens
                .clone()
                .filter(|_| st.tokens_key.as_ref() == Some(&found.key))
                .map(|t| (t, st.issued_at))
        });
        let Some((current, issued_at)) = current else {
            return Ok(false);
        };
        if Some(current.access_token.expose()) != failed && !refresh_due(&current, issued_at) {
            debug!(server = %self.server, "another process refreshed the token");
            if let Some(e) = entry {
                hold(&mut self.state(), &found.key, e);
            }
            return Ok(true);
        }
        let Some(rt) = current.refresh_token.clone() else {
            return Ok(false);
        };
        let auth = self.client(found, None).await?;
        let dpop = self.dpop_key(found, current.token_type == "DPoP")?;
        let endpoint = self.token_endpoint(found)?;
        self.attempts.take(&self.server, Attempt::Token)?;
        match grant::request(
            &self.http,
            &endpoint,
            &auth,
            Grant::Refresh {
                refresh_token: rt.expose(),
            },
            &found.key.resource,
            current.scope.as_deref(),
            TOKEN_TIMEOUT,
            dpop.as_ref().map(|key| grant::Dpop {
                key,
                nonces: &self.nonces,
            }),
        )
        .await
        {
            Ok(mut t) => {
                // A server that does not rotate keeps the old refresh token.
                if t.refresh_token.is_none() {
                    t.refresh_token = Some(rt);
                }
                info!(server = %self.server, "token refreshed");
                self.adopt_locked(&found.key, t)?;
                Ok(true)
            }
            Err(AuthError::Token {
                invalid_grant: true,
                reason,
                ..
            }) => {
                warn!(server = %self.server, "refresh refused ({reason}); signing in again is needed");
                // Only the refresh token we used is dead: a sign-in that
                // another process saved meanwhile stays.
                let stored_rt = self.entry(&found.key).and_then(|e| e.tokens?.refresh_token);
                if stored_rt.is_none() || stored_rt.as_ref() == Some(&rt) {
                    self.save(&found.key, |e| e.tokens = None)?;
                } else {
                    debug!(server = %self.server, "another process saved new tokens meanwhile; kept");
                }
                let mut st = self.state();
                st.tokens = None;
                st.tokens_key = None;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    async fn machine_grant(&self, found: &Found, scope: Option<&str>) -> Result<(), AuthError> {
        let auth = self.client(found, None).await?;
        let endpoint = self.token_endpoint(found)?;
        let c = self.cfg();
        let jag;
        let grant = if let Some(w) = &c.workload {
            // Read afresh for every grant (platforms rotate it); sent only
            // to the issuer check_client_issuer let through.
            jag = wif::read(w, &self.server).await?;
            Grant::JwtBearer { assertion: &jag }
        } else if c.grant_type.as_deref() == Some(grant::JWT_BEARER) {
            let (Some(idp), Some(id_token)) = (&c.idp_token_endpoint, &c.idp_id_token) else {
                return Err(AuthError::Client(
                    "enterprise-managed authorization needs idp_token_endpoint and idp_id_token"
                        .into(),
                ));
            };
            let idp = discovery::secure_url(idp, "idp_token_endpoint")?;
            jag = grant::exchange_for_id_jag(
                &self.http,
                &grant::IdpExchange {
                    token_endpoint: &idp,
                    id_token: id_token.expose(),
                    client_id: c.idp_client_id.as_deref(),
                    client_secret: c.idp_client_secret.as_ref().map(Secret::expose),
                },
                &found.key.issuer,
                &found.key.resource,
                scope,
                TOKEN_TIMEOUT,
            )
            .await?;
            Grant::JwtBearer { assertion: &jag }
        } else {
            Grant::ClientCredentials
        };
        self.attempts.take(&self.server, Attempt::Token)?;
        let dpop = self.dpop_key(found, false)?;
        let t = grant::request(
            &self.http,
            &endpoint,
            &auth,
            grant,
            &found.key.resource,
            scope,
            TOKEN_TIMEOUT,
            dpop.as_ref().map(|key| grant::Dpop {
                key,
                nonces: &self.nonces,
            }),
        )
        .await?;
        info!(server = %self.server, grant = c.grant_type.as_deref().unwrap_or(""), "token granted");
        self.adopt(&found.key, t).await
    }

    /// The authorization code flow: the page goes to `browser`, the
    /// redirect comes back to our loopback listener.
    async fn sign_in(
        &self,
        found: &Found,
        scope: Option<String>,
        browser: &dyn Browser,
    ) -> Result<(), AuthError> {
        let meta = &found.meta;
        let methods = meta
            .code_challenge_methods_supported
            .clone()
            .unwrap_or_default();
        if !methods.iter().any(|m| m == "S256") {
            return Err(AuthError::NoS256 {
                issuer: found.key.issuer.clone(),
                listed: if methods.is_empty() {
                    "absent".into()
                } else {
                    methods.join(", ")
                },
            });
        }
        let authorize =
            meta.authorization_endpoint
                .as_deref()
                .ok_or_else(|| AuthError::NoAuthServer {
                    server: self.url.to_string(),
                    reason: format!("{} lists no authorization_endpoint", found.key.issuer),
                })?;
        // Only an https page (or loopback) is ever opened: not file:,
        // javascript: or a custom scheme a hostile server names.
        let mut authorize = discovery::secure_url(authorize, "authorization_endpoint")?;
        self.attempts.take(&self.server, Attempt::Browser)?;
        let listener = flow::Loopback::bind().await?;
        let auth = self.client(found, Some(&listener.redirect_uri)).await?;
        let verifier = flow::random_token()?;
        let state = flow::random_token()?;
        // offline_access only where the authorization server offers it.
        let mut scope = scope;
        if meta
            .scopes_supported
            .as_ref()
            .is_some_and(|s| s.iter().any(|x| x == "offline_access"))
        {
            let s = scope.get_or_insert_with(String::new);
            if !s.split(' ').any(|x| x == "offline_access") {
                if !s.is_empty() {
                    s.push(' ');
                }
                s.push_str("offline_access");
            }
        }
        {
            let mut q = authorize.query_pairs_mut();
            q.append_pair("response_type", "code")
                .append_pair("client_id", auth.client_id())
                .append_pair("redirect_uri", &listener.redirect_uri)
                .append_pair("state", &state)
                .append_pair("code_challenge", &flow::challenge(&verifier))
                .append_pair("code_challenge_method", "S256")
                .append_pair("resource", &found.key.resource);
            if let Some(s) = scope.as_deref().filter(|s| !s.is_empty()) {
                q.append_pair("scope", s);
            }
        }
        let redirect_uri = listener.redirect_uri.clone();
        info!(server = %self.server, by = %browser.describe(), "sign-in started");
        // The listener waits while the page is being handed over: a host
        // that opens it itself (loads it and follows the redirect) answers
        // only once the redirect has been answered.
        let wait = listener.wait(&state, self.login_timeout);
        let open = browser.open(&self.server, authorize.as_str());
        tokio::pin!(wait, open);
        let mut opened = false;
        let callback = tokio::select! {
            cb = &mut wait => match cb {
                Ok(cb) => cb,
                Err(e) => {
                    let _ = open.await;
                    return Err(e);
                }
            },
            r = &mut open => {
                r.map_err(|e| {
                    AuthError::Browser(format!("{e}; run `mcphost auth login {}`", self.server))
                })?;
                opened = true;
                wait.await?
            }
        };
        let outcome = self
            .redeem(
                found,
                &auth,
                &callback.query,
                &verifier,
                &redirect_uri,
                scope,
            )
            .await;
        // The browser hears "signed in" only now; a host that loads the
        // page itself finishes its `open` once it has been answered.
        callback.finish(outcome.is_ok()).await;
        if !opened {
            let _ = open.await;
        }
        outcome
    }

    /// The redirect (its `state` already ours): `iss`, then the code.
    async fn redeem(
        &self,
        found: &Found,
        auth: &ClientAuth,
        q: &std::collections::HashMap<String, String>,
        verifier: &str,
        redirect_uri: &str,
        scope: Option<String>,
    ) -> Result<(), AuthError> {
        let meta = &found.meta;
        // RFC 9207: checked before the code is redeemed.
        match q.get("iss") {
            // Exactly as the metadata says: no normalisation (SEP-2468).
            Some(iss) if iss != &found.key.issuer => {
                return Err(AuthError::IssMismatch {
                    expected: found.key.issuer.clone(),
                    found: iss.clone(),
                });
            }
            None if meta.authorization_response_iss_parameter_supported => {
                return Err(AuthError::IssMismatch {
                    expected: found.key.issuer.clone(),
                    found: "(none, though the server says it sends one)".into(),
                });
            }
            _ => {}
        }
        if let Some(err) = q.get("error") {
            let desc = q
                .get("error_description")
                .map(|d| format!(": {d}"))
                .unwrap_or_default();
            return Err(AuthError::Refused(discovery::escape_controls(&format!(
                "{err}{desc}"
            ))));
        }
        let code = q
            .get("code")
            .ok_or_else(|| AuthError::Refused("the redirect carried no code".into()))?;
        let endpoint = self.token_endpoint(found)?;
        self.attempts.take(&self.server, Attempt::Token)?;
        let dpop = self.dpop_key(found, false)?;
        let mut t = grant::request(
            &self.http,
            &endpoint,
            auth,
            Grant::Code {
                code,
                redirect_uri,
                verifier,
            },
            &found.key.resource,
            scope.as_deref(),
            TOKEN_TIMEOUT,
            dpop.as_ref().map(|key| grant::Dpop {
                key,
                nonces: &self.nonces,
            }),
        )
        .await?;
        if t.scope.is_none() {
            t.scope = scope;
        }
        info!(server = %self.server, "signed in");
        self.adopt(&found.key, t).await
    }

    /// `mcphost auth login`: discovery from the server's own 401, then a
    /// sign-in, whatever is stored.
    pub async fn login(&self, browser: &dyn Browser) -> Result<(), AuthError> {
        let _flight = self.flight.lock().await;
        let challenge = self.probe().await?;
        let found = self.discover(&challenge, None).await?;
        if self.cfg().machine() {
            return self.machine_grant(&found, found.scope.as_deref()).await;
        }
        let scope = found.scope.clone();
        self.sign_in(&found, scope, browser).await
    }

    /// Forget this server's tokens (and its registration).
    pub async fn logout(&self) -> Result<bool, AuthError> {
        let challenge = self.probe().await.unwrap_or_default();
        let found = self.discover(&challenge, None).await?;
        {
            let mut st = self.state();
            st.tokens = None;
            st.tokens_key = None;
        }
        match &self.store {
            Some(s) => Ok(s.remove(&found.key)?),
            None => Ok(false),
        }
    }

    /// An unauthenticated POST, for the challenge of a server we are not
    /// talking to yet.
    async fn probe(&self) -> Result<BearerChallenge, AuthError> {
        let body = r#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#;
        let resp = self
            .http
            .post(self.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            )
            .body(body)
            .send()
            .await
            .map_err(|e| AuthError::Http {
                url: self.url.to_string(),
                reason: mcphost_transport::http::error_chain(&e),
            })?;
        let values: Vec<String> = resp
            .headers()
            .get_all(reqwest::header::WWW_AUTHENTICATE)
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect();
        Ok(BearerChallenge::find(values.iter().map(String::as_str)).unwrap_or_default())
    }

    async fn handle(&self, c: &Challenged) -> Result<(), AuthError> {
        // RFC 9449 §9: the resource server wants a nonce in the proof. Sent
        // again with the new one; the same one refused again is an error
        // (the transport bounds the tries of one request as well).
        if let Some(nonce) = &c.dpop_nonce
            && challenge::dpop_error(c.www_authenticate.iter().map(String::as_str)).as_deref()
                == Some("use_dpop_nonce")
        {
            if c.sent_dpop_nonce.as_ref() == Some(nonce) {
                return Err(AuthError::Refused(
                    "the server refused the DPoP nonce it had just given (use_dpop_nonce again)"
                        .into(),
                ));
            }
            debug!(server = %self.server, "the server wants a DPoP nonce; sending it");
            self.nonces.set(&self.url, nonce);
            return Ok(());
        }
        let _flight = self.flight.lock().await;
        // Someone got a new token while we waited: try that first.
        let current = self.current();
        if current.is_some() && current != c.sent {
            return Ok(());
        }
        let challenge = BearerChallenge::find(c.www_authenticate.iter().map(String::as_str))
            .unwrap_or_default();
        // A token just issued and already refused: a server that refuses
        // them all is not signed in to again and again.
        let fresh = self.state().fresh.clone();
        if let (Some(sent), Some((tok, at))) = (&c.sent, fresh)
            && *sent == tok
            && at.elapsed() < ATTEMPT_WINDOW
        {
            self.state().fresh = None;
            let why = format!(
                "HTTP {} (error {:?}) for a token issued {}s before",
                c.status,
                challenge.error.as_deref().unwrap_or("none"),
                at.elapsed().as_secs()
            );
            self.attempts.refused(&self.server, why);
            self.attempts.take(&self.server, Attempt::Refusal)?;
        }
        if c.sent.is_some() && c.status == 401 {
            // Our token was refused: the server may have moved to another
            // authorization server (SEP-2352). Discover again.
            self.state().found = None;
        }
        let found = self
            .discover(&challenge, c.protocol_version.as_deref())
            .await?;
        if c.status == 403 {
            if !challenge.insufficient_scope() {
                return Err(AuthError::Refused(format!(
                    "HTTP 403 (error {:?}): the token is valid but not allowed here",
                    challenge.error.as_deref().unwrap_or("none")
                )));
            }
            let n = {
                let mut st = self.state();
                st.step_ups = st.step_ups.saturating_add(1);
                st.step_ups
            };
            if n > MAX_STEP_UPS {
                return Err(AuthError::Refused(format!(
                    "the server still answers insufficient_scope after {MAX_STEP_UPS} sign-ins for more scope (it wants {:?})",
                    challenge.scope.as_deref().unwrap_or("")
                )));
            }
            let had = self.state().tokens.as_ref().and_then(|t| t.scope.clone());
            let scope = union_scopes(&[had.as_deref(), challenge.scope.as_deref()]);
            return self.obtain(&found, scope).await;
        }
        // A stored token we did not send yet (another process signed in).
        if let Some(e) = self.entry(&found.key)
            && let Some(t) = &e.tokens
            && Some(t.access_token.expose()) != c.sent.as_deref()
        {
            hold(&mut self.state(), &found.key, e);
            return Ok(());
        }
        if self.refresh(&found, c.sent.as_deref()).await? {
            return Ok(());
        }
        let scope = if self.cfg().machine() {
            found.scope.clone()
        } else {
            union_scopes(&[found.scope.as_deref(), challenge.scope.as_deref()])
        };
        self.obtain(&found, scope).await
    }

    /// A new token for `scope`, the way this client gets them: a machine
    /// grant, else a person's sign-in.
    async fn obtain(&self, found: &Found, scope: Option<String>) -> Result<(), AuthError> {
        if self.cfg().machine() {
            self.machine_grant(found, scope.as_deref()).await
        } else {
            self.interactive(found, scope).await
        }
    }

    async fn interactive(&self, found: &Found, scope: Option<String>) -> Result<(), AuthError> {
        let Some(browser) = self.browser.clone() else {
            return Err(AuthError::NeedsLogin(format!(
                "run `mcphost auth login {}`",
                self.server
            )));
        };
        let Some(me) = self.me.upgrade() else {
            return self.sign_in(found, scope, browser.as_ref()).await;
        };
        let mut rx = {
            let mut slot = self.signing.lock();
            match slot.as_ref() {
                // One page at a time: join the sign-in under way.
                Some(rx) if rx.borrow().is_none() => rx.clone(),
                _ => {
                    let (tx, rx) = tokio::sync::watch::channel(None);
                    let found = found.clone();
                    tokio::spawn(async move {
                        let r = me
                            .sign_in(&found, scope, browser.as_ref())
                            .await
                            .map_err(|e| e.to_string());
                        let _ = tx.send(Some(r));
                    });
                    *slot = Some(rx.clone());
                    rx
                }
            }
        };
        let outcome = rx
            .wait_for(Option::is_some)
            .await
            .map(|v| v.clone())
            .map_err(|_| AuthError::Client("the sign-in task ended".into()))?;
        match outcome {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(AuthError::Client(e)),
            None => Err(AuthError::Client("the sign-in task ended".into())),
        }
    }
}

/// The union of space-separated scope lists, in first-seen order.
fn union_scopes(lists: &[Option<&str>]) -> Option<String> {
    let mut out: Vec<&str> = Vec::new();
    for s in lists.iter().flatten() {
        for x in s.split(' ').filter(|x| !x.is_empty()) {
            if !out.contains(&x) {
                out.push(x);
            }
        }
    }
    (!out.is_empty()).then(|| out.join(" "))
}

/// Takes a stored entry's tokens, and the key they are bound to.
fn hold(st: &mut State, key: &TokenKey, e: StoredSignIn) {
    st.tokens = e.tokens;
    st.issued_at = e.updated_at;
    st.tokens_key = Some(key.clone());
    if let Some(k) = e.dpop_key {
        st.dpop = Some((key.clone(), k));
    }
}

impl Credentials for Authorizer {
    fn authorization<'a>(
        &'a self,
        method: &'a reqwest::Method,
        url: &'a Url,
    ) -> BoxFuture<'a, Option<Presented>> {
        Box::pin(async move {
            self.look_in_store();
            let (tokens, issued_at, found) = {
                let st = self.state();
                (st.tokens.clone(), st.issued_at, st.found.clone())
            };
            let t = tokens?;
            if refresh_due(&t, issued_at)
                && t.refresh_token.is_some()
                && let Some(found) = found
            {
                let _flight = self.flight.lock().await;
                if self.current().as_deref() == Some(t.access_token.expose())
                    && let Err(e) = self.refresh(&found, Some(t.access_token.expose())).await
                {
                    warn!(server = %self.server, "refresh before expiry failed: {e}");
                }
            }
            let st = self.state();
            let t = st.tokens.as_ref()?;
            if t.token_type != "DPoP" {
                return Some(Presented {
                    token: t.access_token.expose().to_owned(),
                    authorization: format!("Bearer {}", t.access_token.expose()),
                    dpop: None,
                    dpop_nonce: None,
                });
            }
            // A DPoP token goes with a proof of its key, never as Bearer.
            let key = st
                .dpop
                .as_ref()
                .filter(|(k, _)| Some(k) == st.tokens_key.as_ref())
                .map(|(_, key)| key);
            let nonce = self.nonces.get(url);
            let proof = key.map(|k| {
                k.proof(
                    method.as_str(),
                    url,
                    Some(t.access_token.expose()),
                    nonce.as_deref(),
                )
            });
            let dpop = match proof {
                Some(Ok(p)) => Some(p),
                Some(Err(e)) => {
                    warn!(server = %self.server, "cannot make a DPoP proof: {e}");
                    None
                }
                None => {
                    warn!(server = %self.server, "the DPoP token's key is not in the store; the server will refuse it");
                    None
                }
            };
            Some(Presented {
                token: t.access_token.expose().to_owned(),
                authorization: format!("DPoP {}", t.access_token.expose()),
                dpop,
                dpop_nonce: nonce,
            })
        })
    }

    fn challenged<'a>(&'a self, c: &'a Challenged) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.handle(c).await.map_err(|e| {
                warn!(server = %self.server, "authorization: {e}");
                e.to_string()
            })
        })
    }

    fn accepted(&self, token: &str) {
        // Step-ups count for one token's refusals, not for the server's
        // life: once a token of ours is taken, the server may ask again;
        // and a token it took is no longer a fresh one it refuses.
        let mut st = self.state();
        if st.step_ups > 0
            && st
                .tokens
                .as_ref()
                .is_some_and(|t| t.access_token.expose() == token)
        {
            st.step_ups = 0;
        }
        if st.fresh.as_ref().is_some_and(|(t, _)| t == token) {
            st.fresh = None;
        }
    }

    fn login_hint(&self) -> String {
        format!("run `mcphost auth login {}`", self.server)
    }
}

/// What every server's authorizer shares in one process: the token store,
/// who shows sign-in pages, the scripted client of the environment.
pub struct AuthContext {
    pub store: Option<TokenStore>,
    pub browser: Option<Arc<dyn Browser>>,
    pub env: OAuthConfig,
    pub login_timeout: Duration,
    /// Sign-in attempts per server, across its restarts.
    pub attempts: Arc<Attempts>,
}

impl std::fmt::Debug for AuthContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthContext")
            .field("store", &self.store.as_ref().map(|s| s.dir().to_owned()))
            .field("browser", &self.browser.as_ref().map(|b| b.describe()))
            .finish_non_exhaustive()
    }
}

/// `MCPHOST_OAUTH_TIMEOUT`: seconds a sign-in waits for the redirect.
pub const TIMEOUT_ENV: &str = "MCPHOST_OAUTH_TIMEOUT";

impl AuthContext {
    /// For a process that serves host apps (the daemon, an embedded
    /// library): sign-in pages go to `host` as URL elicitations, then to
    /// `MCPHOST_BROWSER`; never to a browser the process opens on its own.
    /// `None` (logged) when the environment's OAuth settings are broken.
    pub fn for_host(host: browser::HostBrowser) -> Option<Arc<AuthContext>> {
        let mut chain: Vec<Arc<dyn Browser>> = vec![Arc::new(host)];
        if let Some(cmd) = std::env::var(browser::BROWSER_ENV)
            .ok()
            .filter(|s| !s.trim().is_empty())
        {
            chain.push(Arc::new(browser::CommandBrowser(cmd)));
        }
        match AuthContext::from_env(Some(Arc::new(browser::Chain(chain)))) {
            Ok(a) => Some(Arc::new(a)),
            Err(e) => {
                warn!("OAuth is off: {e}");
                None
            }
        }
    }

    /// The user's token store and the environment's settings. A store that
    /// cannot be opened is logged and tokens are then kept in memory only.
    pub fn from_env(browser: Option<Arc<dyn Browser>>) -> Result<AuthContext, String> {
        let env = OAuthConfig::from_env(&|k| std::env::var(k).ok())?;
        let store = match TokenStore::open_default() {
            Ok(s) => Some(s),
            Err(e) => {
                warn!("tokens will not be kept: {e}");
                None
            }
        };
        let login_timeout = match std::env::var(TIMEOUT_ENV) {
            Ok(s) => s
                .trim()
                .parse::<u64>()
                .map(Duration::from_secs)
                .map_err(|_| format!("{TIMEOUT_ENV}={s:?}: must be a number of seconds"))?,
            Err(_) => LOGIN_TIMEOUT,
        };
        Ok(AuthContext {
            store,
            browser,
            env,
            login_timeout,
            attempts: Arc::new(Attempts::default()),
        })
    }

    /// The authorizer of the HTTP server `server` at `url` with these
    /// settings (a config entry's [`mcphost_config::HttpServer::oauth_client`]),
    /// completed from `MCPHOST_OAUTH_CLIENT` where it may be.
    pub fn authorizer(
        &self,
        server: &str,
        url: &str,
        oauth: &OAuthConfig,
    ) -> Result<Arc<Authorizer>, AuthError> {
        let own = oauth.clone();
        let env = &self.env;
        let named = env
            .servers
            .as_ref()
            .is_some_and(|v| v.iter().any(|s| s == server));
        let by_issuer = env.servers.is_none() && env.issuer.is_some() && own.client_id.is_none();
        // The environment's client only where it names the server, or (for
        // its issuer only, checked at discovery) when it names no servers.
        let config = if named || by_issuer {
            own.clone().or(env.clone())
        } else {
            own.clone().or(env.without_client())
        };
        Authorizer::new(
            server,
            url,
            self.store.clone(),
            config,
            self.browser.clone(),
        )
        .map(|a| {
            let a = if by_issuer {
                a.with_env_for_issuer(own.or(env.without_client()))
            } else {
                a
            };
            // One count per server for the whole process, across its
            // restarts (a new authorizer each time).
            a.with_login_timeout(self.login_timeout)
                .with_attempts(self.attempts.clone())
                .into_shared()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_union_in_order() {
        assert_eq!(
            union_scopes(&[Some("a b"), Some("b c")]).as_deref(),
            Some("a b c")
        );
        assert_eq!(union_scopes(&[None, Some("")]), None);
    }

    #[test]
    fn scripted_client_from_the_environment() {
        let env = |k: &str| {
            match k {
            CLIENT_ENV => Some(
                r#"{"client_id":"c","client_secret":"s","grant_type":"client_credentials","servers":["a"],"issuer":"https://as"}"#.into(),
            ),
            _ => None,
        }
        };
        let c = OAuthConfig::from_env(&env).unwrap();
        assert_eq!(c.client_id.as_deref(), Some("c"));
        assert!(c.machine());
        assert_eq!(c.servers.as_deref(), Some(&["a".to_owned()][..]));
        assert_eq!(c.issuer.as_deref(), Some("https://as"));
        // Naming neither, the client is not for any server.
        let unbound = |k: &str| {
            (k == CLIENT_ENV).then(|| r#"{"client_id":"c","client_secret":"s"}"#.to_owned())
        };
        let u = OAuthConfig::from_env(&unbound).unwrap();
        assert_eq!((u.client_id, u.client_secret), (None, None));
        assert!(!format!("{c:?}").contains("\"s\""));
        let bad = |k: &str| (k == CLIENT_ENV).then(|| "[1]".to_owned());
        assert!(
            OAuthConfig::from_env(&bad)
                .unwrap_err()
                .contains("JSON object")
        );
        let cfg = OAuthConfig {
            client_id: Some("mine".into()),
            ..OAuthConfig::default()
        };
        let merged = cfg.or(c);
        assert_eq!(merged.client_id.as_deref(), Some("mine"));
        assert_eq!(
            merged.client_secret, None,
            "a secret belongs to its client id"
        );
    }
}
