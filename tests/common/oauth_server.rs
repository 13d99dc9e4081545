//! A mock OAuth 2.1 authorization server and the MCP server it protects, in
//! process, for the OAuth tests.
//!
//! One port serves both roles unless [`OAuthOptions::separate_as`] puts the
//! authorization server on a second one:
//!
//! - `POST /mcp`: a minimal stateless Streamable HTTP MCP server (plain JSON
//!   replies: `initialize`, `ping`, `tools/list`, `tools/call whoami`,
//!   notifications 202, anything else -32601) behind a Bearer check: 401 with
//!   `WWW-Authenticate: Bearer resource_metadata="…"` (RFC 9728), 403
//!   `insufficient_scope` for a `tools/call` whose token lacks
//!   [`OAuthOptions::call_scopes`].
//! - `GET /.well-known/oauth-protected-resource/mcp` (and the root form): the
//!   protected resource metadata.
//! - `GET /.well-known/oauth-authorization-server[/path]` (RFC 8414) and/or
//!   the OpenID Connect discovery locations ([`Discovery`]).
//! - `POST /register` (RFC 7591), `GET /authorize` (code + PKCE S256, loopback
//!   redirects only), `POST /token` (`authorization_code`, `refresh_token`,
//!   `client_credentials`, the JWT bearer grant with a workload token; client
//!   auth `client_secret_basic`, `client_secret_post`, `none`,
//!   `private_key_jwt`).
//! - DPoP ([`OAuthOptions::dpop`]): tokens bound to the key of the token
//!   request's proof, taken at `/mcp` only with a valid proof of that key,
//!   nonces on demand ([`DpopNonce`]).
//!
//! Refresh tokens rotate; every authorization code grant starts a *family*,
//! and presenting a refresh token that was already rotated revokes the whole
//! family (RFC 9700 4.14.2), as real servers do: a client that refreshes twice
//! in parallel, or retries a refresh whose answer it lost, loses its grant.
//!
//! Everything received is recorded; the options can be changed at any time
//! with [`OAuthServer::set`]. The server runs on its own runtime thread, so it
//! works under `#[test]` (driving the `mcphost` binary) and `#[tokio::test]`.
//! It never prints to stdout.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, request::Parts};
use axum::response::Response;
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde_json::{Value, json};
use sha2::Digest as _;
use tokio::sync::oneshot;
use url::form_urlencoded;

/// Streamable HTTP revisions `initialize` echoes; others get [`LATEST`].
pub const VERSIONS: [&str; 3] = ["2025-03-26", "2025-06-18", "2025-11-25"];
pub const LATEST: &str = "2025-11-25";
pub const SERVER_NAME: &str = "oauth-mock";
/// `client_assertion_type` of private_key_jwt (RFC 7523).
pub const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
/// The `iss` that [`AuthorizeMode::WrongIss`] puts on the redirect.
pub const WRONG_ISS: &str = "https://attacker.invalid";

/// Test-only keys (tests/fixtures/oauth), PKCS#8 / SPKI PEM.
pub const ES256_PRIVATE_PEM: &str = include_str!("../fixtures/oauth/es256_private.pem");
pub const ES256_PUBLIC_PEM: &str = include_str!("../fixtures/oauth/es256_public.pem");
/// A P-256 key nobody registered: its signatures must be refused.
pub const ES256_OTHER_PRIVATE_PEM: &str = include_str!("../fixtures/oauth/es256_other_private.pem");
pub const RS256_PRIVATE_PEM: &str = include_str!("../fixtures/oauth/rs256_private.pem");
pub const RS256_PUBLIC_PEM: &str = include_str!("../fixtures/oauth/rs256_public.pem");

// ---------------------------------------------------------------------------
// Knobs

/// What `GET /authorize` does once the request is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthorizeMode {
    /// 302 to the redirect URI with `code` and the client's `state`.
    #[default]
    Normal,
    /// Like Normal, but `state` is not the client's (`<state>-tampered`).
    WrongState,
    /// 200 with an HTML page that never redirects (a user who never
    /// finishes signing in).
    NoRedirect,
    /// Like Normal, with `iss` = [`WRONG_ISS`] (whatever `iss_parameter`).
    WrongIss,
    /// The user refused: 302 with `error=access_denied` and `state`.
    Deny,
}

/// Where the authorization server metadata is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Discovery {
    /// RFC 8414 only: `/.well-known/oauth-authorization-server{path}`.
    #[default]
    OAuth,
    /// OpenID Connect only: `/.well-known/openid-configuration{path}` and
    /// `{path}/.well-known/openid-configuration`.
    OpenId,
    Both,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JwtAlg {
    ES256,
    RS256,
}

impl JwtAlg {
    fn algorithm(self) -> jsonwebtoken::Algorithm {
        match self {
            JwtAlg::ES256 => jsonwebtoken::Algorithm::ES256,
            JwtAlg::RS256 => jsonwebtoken::Algorithm::RS256,
        }
    }
}

/// Answer the next `remaining` token requests with this error instead.
#[derive(Debug, Clone)]
pub struct TokenFail {
    pub status: u16,
    /// The OAuth `error` code, e.g. `temporarily_unavailable`.
    pub error: String,
    pub remaining: usize,
}

/// Everything the server can be told. Change at runtime with
/// [`OAuthServer::set`]; `separate_as` only counts at start.
#[derive(Debug, Clone)]
pub struct OAuthOptions {
    // -- the protected resource
    /// PRM `resource` instead of `{base}/mcp`; `/authorize`, `/token` and
    /// the Bearer check all hold clients to it.
    pub prm_resource: Option<String>,
    /// Leave `resource` out of the PRM altogether.
    pub prm_resource_omitted: bool,
    /// PRM `scopes_supported` (omitted when `None`).
    pub prm_scopes_supported: Option<Vec<String>>,
    /// PRM `authorization_servers` instead of `[issuer]`.
    pub prm_authorization_servers: Option<Vec<String>>,
    /// Serve the PRM at all (else 404).
    pub serve_prm: bool,
    /// `scope="…"` in the 401 challenge.
    pub challenge_scope: Option<String>,
    /// `resource_metadata="…"` in the 401 challenge (else the client has to
    /// find the PRM at the well-known URL by itself).
    pub challenge_resource_metadata: bool,
    /// Appended raw to every challenge, e.g. `error_description="a, b"`.
    pub challenge_extra: Option<String>,
    /// Scopes a token needs for `tools/call` (else 403 insufficient_scope).
    pub call_scopes: Vec<String>,
    /// Answer 401 `invalid_token` to every token, valid or not (a server
    /// that rejects every sign-in).
    pub reject_all_tokens: bool,
    // -- the authorization server
    /// The authorization server on its own port (issuer `http://127.0.0.1:P2`).
    pub separate_as: bool,
    /// A path for the issuer (`/tenant` → `{as_base}/tenant`), so metadata
    /// is found by path insertion.
    pub issuer_path: Option<String>,
    /// The metadata's `issuer` field says this instead (a mismatch).
    pub issuer_override: Option<String>,
    /// Fields merged over the authorization server metadata last (a
    /// hostile server's `authorization_endpoint`, `token_endpoint`, …).
    pub metadata_extra: serde_json::Map<String, Value>,
    pub discovery: Discovery,
    /// Advertise and serve `/register`.
    pub registration_endpoint: bool,
    /// `code_challenge_methods_supported`; `None` omits it. The methods
    /// `/authorize` accepts (with `None`: S256).
    pub code_challenge_methods: Option<Vec<String>>,
    /// `grant_types_supported`; the token endpoint refuses the others.
    pub grant_types: Vec<String>,
    /// `token_endpoint_auth_methods_supported`; `/register` refuses others.
    pub token_auth_methods: Vec<String>,
    /// The AS metadata's `scopes_supported`; when set, `/authorize` refuses
    /// other scopes.
    pub scopes_supported: Option<Vec<String>>,
    /// Advertise `authorization_response_iss_parameter_supported` and put
    /// `iss` on the redirect (RFC 9207).
    pub iss_parameter: bool,
    pub authorize: AuthorizeMode,
    /// `/authorize` requires `resource` (RFC 8707); a wrong one is always
    /// refused.
    pub require_resource: bool,
    /// The subject of authorization_code tokens.
    pub user: String,
    pub code_ttl: Duration,
    // -- the token endpoint
    /// Access token lifetime (and `expires_in`).
    pub access_ttl: Duration,
    /// Refresh token lifetime (`None`: forever).
    pub refresh_ttl: Option<Duration>,
    /// Issue a new refresh token on each refresh (the old one becomes used);
    /// else answer without `refresh_token` and keep the old one valid.
    pub rotate_refresh: bool,
    /// Sleep this long after deciding a token request, before answering: the
    /// grant is already spent if the client gives up meanwhile.
    pub token_delay: Duration,
    pub token_type: String,
    pub send_expires_in: bool,
    pub token_fail: Option<TokenFail>,
    /// private_key_jwt clients: client_id → the public key (PEM) their
    /// assertions are signed with. Such a client needs no other registration.
    pub jwt_keys: HashMap<String, (JwtAlg, String)>,
    // -- DPoP (RFC 9449) and workload identity federation
    /// Advertise `dpop_signing_alg_values_supported: ["ES256"]`; a token
    /// request with a valid `DPoP` proof gets a token bound to its key
    /// (`token_type: DPoP`), which `/mcp` then takes only with a proof of
    /// that key (signature, `htm`, `htu`, `ath`, a `jti` never seen before).
    pub dpop: bool,
    pub dpop_nonce: DpopNonce,
    /// Workload tokens the JWT bearer grant
    /// (`urn:ietf:params:oauth:grant-type:jwt-bearer`) accepts as
    /// `assertion`; the grant must be in [`OAuthOptions::grant_types`].
    pub workload_tokens: Vec<String>,
}

/// When the mock asks for a DPoP nonce (`use_dpop_nonce`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DpopNonce {
    Off,
    /// The token endpoint and `/mcp` each want [`DPOP_NONCE`] in the proof.
    Required,
    /// `/mcp` refuses every proof with a nonce it has not just given: a
    /// server that always wants a new one.
    AlwaysNew,
}

pub const DPOP_NONCE: &str = "mock-nonce-1";
/// The JWT bearer grant (RFC 7523 §2.1).
pub const JWT_BEARER_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

impl Default for OAuthOptions {
    fn default() -> Self {
        OAuthOptions {
            prm_resource: None,
            prm_resource_omitted: false,
            prm_scopes_supported: None,
            prm_authorization_servers: None,
            serve_prm: true,
            challenge_scope: None,
            challenge_resource_metadata: true,
            challenge_extra: None,
            call_scopes: Vec::new(),
            reject_all_tokens: false,
            separate_as: false,
            issuer_path: None,
            issuer_override: None,
            metadata_extra: serde_json::Map::new(),
            discovery: Discovery::OAuth,
            registration_endpoint: true,
            code_challenge_methods: Some(vec!["S256".into()]),
            grant_types: strings(&["authorization_code", "refresh_token", "client_credentials"]),
            token_auth_methods: strings(&["client_secret_basic", "client_secret_post", "none"]),
            scopes_supported: None,
            iss_parameter: false,
            authorize: AuthorizeMode::Normal,
            require_resource: true,
            user: "alice".into(),
            code_ttl: Duration::from_secs(600),
            access_ttl: Duration::from_secs(3600),
            refresh_ttl: None,
            rotate_refresh: true,
            token_delay: Duration::ZERO,
            token_type: "Bearer".into(),
            send_expires_in: true,
            token_fail: None,
            jwt_keys: HashMap::new(),
            dpop: false,
            dpop_nonce: DpopNonce::Off,
            workload_tokens: Vec::new(),
        }
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

// ---------------------------------------------------------------------------
// What was received

/// Any HTTP request, on either port.
#[derive(Debug, Clone)]
pub struct Seen {
    pub seq: usize,
    pub at: Instant,
    pub port: u16,
    pub method: String,
    /// Path and query.
    pub path: String,
    pub status: Option<u16>,
}

/// One request to the token endpoint.
#[derive(Debug, Clone)]
pub struct TokenRequest {
    pub at: Instant,
    pub grant_type: Option<String>,
    /// The authenticated client, else the one the request named.
    pub client_id: Option<String>,
    /// How the client authenticated: `client_secret_basic`,
    /// `client_secret_post`, `private_key_jwt`, `none`, or "" (not at all).
    pub auth_method: String,
    pub refresh_token: Option<String>,
    pub code: Option<String>,
    pub redirect_uri: Option<String>,
    pub resource: Option<String>,
    pub scope: Option<String>,
    pub status: u16,
    /// `ok`, or the OAuth error code answered.
    pub outcome: String,
    pub description: String,
    /// The family the grant used or started.
    pub family: Option<u64>,
    /// The whole form, in order.
    pub form: Vec<(String, String)>,
    /// The `DPoP` proof's check: `ok`, what was wrong, or `None` (none sent).
    pub dpop: Option<String>,
}

impl TokenRequest {
    pub fn ok(&self) -> bool {
        self.outcome == "ok"
    }
    pub fn param(&self, name: &str) -> Option<&str> {
        param(&self.form, name)
    }
}

/// One `GET /authorize`.
#[derive(Debug, Clone)]
pub struct AuthorizeRequest {
    pub at: Instant,
    pub query: Vec<(String, String)>,
    pub status: u16,
    /// `redirected`, `denied`, `no-redirect`, or what was wrong.
    pub outcome: String,
    pub location: Option<String>,
}

impl AuthorizeRequest {
    pub fn param(&self, name: &str) -> Option<&str> {
        param(&self.query, name)
    }
}

/// One request to `/mcp`.
#[derive(Debug, Clone)]
pub struct McpRequest {
    pub at: Instant,
    pub http_method: String,
    pub rpc_method: Option<String>,
    /// The raw `Authorization` header.
    pub authorization: Option<String>,
    pub status: u16,
    pub www_authenticate: Option<String>,
    /// The `DPoP` proof's check: `ok`, what was wrong, or `None` (none sent).
    pub dpop: Option<String>,
    /// The proof's key thumbprint (RFC 7638), when it verified.
    pub dpop_jkt: Option<String>,
}

impl McpRequest {
    pub fn had_auth(&self) -> bool {
        self.authorization.is_some()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevokeReason {
    /// A rotated refresh token was presented again.
    RefreshReuse,
    /// An authorization code was redeemed twice.
    CodeReuse,
    /// [`OAuthServer::revoke_all`].
    Test,
}

#[derive(Debug, Clone)]
pub struct Revocation {
    pub family: u64,
    pub reason: RevokeReason,
    pub at: Instant,
}

/// Tokens minted by [`OAuthServer::issue_tokens_for_test`].
#[derive(Debug, Clone)]
pub struct Minted {
    pub access_token: String,
    pub refresh_token: String,
    pub family: u64,
    pub expires_in: u64,
    pub scope: Option<String>,
    pub client_id: String,
}

#[derive(Debug, Clone)]
pub struct RegisteredClient {
    pub client_id: String,
    pub client_secret: Option<String>,
    /// Its token_endpoint_auth_method.
    pub method: String,
    pub redirect_uris: Vec<String>,
    /// Through `/register` (else preregistered).
    pub dynamic: bool,
}

// ---------------------------------------------------------------------------
// State

struct Client {
    info: RegisteredClient,
    /// Grant types it registered (None: any).
    grant_types: Option<Vec<String>>,
    /// private_key_jwt through DCR: its `jwks`.
    jwks: Option<jsonwebtoken::jwk::JwkSet>,
}

struct Code {
    client_id: String,
    redirect_uri: String,
    challenge: String,
    method: String,
    scope: Option<String>,
    resource: Option<String>,
    issued: Instant,
    used: bool,
    family: Option<u64>,
}

struct Family {
    client_id: String,
    subject: String,
    scope: Option<String>,
    resource: Option<String>,
    revoked: bool,
}

struct Access {
    family: u64,
    scope: Option<String>,
    expires: Instant,
    /// DPoP: the thumbprint of the key the token is bound to.
    jkt: Option<String>,
}

struct Refresh {
    family: u64,
    issued: Instant,
    used: bool,
}

#[derive(Default)]
struct Grants {
    clients: HashMap<String, Client>,
    codes: HashMap<String, Code>,
    families: Vec<Family>,
    access: HashMap<String, Access>,
    refresh: HashMap<String, Refresh>,
    jtis: HashSet<String>,
    dpop_jtis: HashSet<String>,
    /// [`DpopNonce::AlwaysNew`]: the nonces handed out so far.
    nonces_given: u64,
    revocations: Vec<Revocation>,
    refreshes: usize,
}

impl Grants {
    fn new_family(&mut self, f: Family) -> u64 {
        self.families.push(f);
        (self.families.len() - 1) as u64
    }

    fn revoke(&mut self, family: u64, reason: RevokeReason) {
        let f = &mut self.families[family as usize];
        if !f.revoked {
            f.revoked = true;
            self.revocations.push(Revocation {
                family,
                reason,
                at: Instant::now(),
            });
        }
    }

    fn mint_access(&mut self, family: u64, scope: Option<String>, ttl: Duration) -> String {
        let t = random_token("at");
        self.access.insert(
            t.clone(),
            Access {
                family,
                scope,
                expires: Instant::now() + ttl,
                jkt: None,
            },
        );
        t
    }

    fn mint_refresh(&mut self, family: u64) -> String {
        let t = random_token("rt");
        self.refresh.insert(
            t.clone(),
            Refresh {
                family,
                issued: Instant::now(),
                used: false,
            },
        );
        t
    }
}

#[derive(Default)]
struct Log {
    seen: Vec<Seen>,
    token: Vec<TokenRequest>,
    authorize: Vec<AuthorizeRequest>,
    registrations: Vec<Value>,
    mcp: Vec<McpRequest>,
}

struct Shared {
    started: Instant,
    res_base: String,
    as_base: String,
    opts: Mutex<OAuthOptions>,
    grants: Mutex<Grants>,
    log: Mutex<Log>,
}

impl Shared {
    fn opts(&self) -> OAuthOptions {
        self.opts.lock().unwrap().clone()
    }

    fn issuer(&self, o: &OAuthOptions) -> String {
        format!("{}{}", self.as_base, issuer_path(o))
    }

    fn resource(&self, o: &OAuthOptions) -> String {
        o.prm_resource
            .clone()
            .unwrap_or_else(|| format!("{}/mcp", self.res_base))
    }

    fn prm_url(&self) -> String {
        format!("{}/.well-known/oauth-protected-resource/mcp", self.res_base)
    }

    fn token_url(&self) -> String {
        format!("{}/token", self.as_base)
    }
}

fn issuer_path(o: &OAuthOptions) -> String {
    match o.issuer_path.as_deref().map(|p| p.trim_matches('/')) {
        Some(p) if !p.is_empty() => format!("/{p}"),
        _ => String::new(),
    }
}

// ---------------------------------------------------------------------------
// The handle

/// A running mock; stopped on drop.
pub struct OAuthServer {
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Both,
    Resource,
    Auth,
}

#[derive(Clone)]
struct App {
    s: Arc<Shared>,
    role: Role,
    port: u16,
}

fn bind() -> (std::net::TcpListener, u16) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let port = l.local_addr().unwrap().port();
    (l, port)
}

impl OAuthServer {
    pub fn start(opts: OAuthOptions) -> OAuthServer {
        let (res_listener, res_port) = bind();
        let auth = opts.separate_as.then(bind);
        let res_base = format!("http://127.0.0.1:{res_port}");
        let as_base = match &auth {
            Some((_, p)) => format!("http://127.0.0.1:{p}"),
            None => res_base.clone(),
        };
        let shared = Arc::new(Shared {
            started: Instant::now(),
            res_base,
            as_base,
            opts: Mutex::new(opts),
            grants: Mutex::new(Grants::default()),
            log: Mutex::new(Log::default()),
        });
        let app = |role, port| {
            Router::new().fallback(handle).with_state(App {
                s: shared.clone(),
                role,
                port,
            })
        };
        let res_app = app(
            if auth.is_some() {
                Role::Resource
            } else {
                Role::Both
            },
            res_port,
        );
        let auth = auth.map(|(l, p)| (l, app(Role::Auth, p)));
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("oauth-mock".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    let res = tokio::net::TcpListener::from_std(res_listener).unwrap();
                    let res = axum::serve(res, res_app);
                    let auth = async move {
                        match auth {
                            Some((l, a)) => {
                                let l = tokio::net::TcpListener::from_std(l).unwrap();
                                axum::serve(l, a).await
                            }
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        r = res => if let Err(e) = r { eprintln!("oauth mock: {e}"); },
                        r = auth => if let Err(e) = r { eprintln!("oauth mock (AS): {e}"); },
                        _ = stopped => {}
                    }
                });
                rt.shutdown_background();
            })
            .unwrap();
        OAuthServer {
            shared,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The protected resource's origin, `http://127.0.0.1:PORT`.
    pub fn base(&self) -> String {
        self.shared.res_base.clone()
    }

    /// The authorization server's origin (`base()` unless `separate_as`).
    pub fn as_base(&self) -> String {
        self.shared.as_base.clone()
    }

    /// `{base}/mcp`.
    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.shared.res_base)
    }

    /// The real issuer (not `issuer_override`).
    pub fn issuer(&self) -> String {
        self.shared.issuer(&self.shared.opts())
    }

    /// The resource clients must ask for: the PRM's `resource`.
    pub fn resource(&self) -> String {
        self.shared.resource(&self.shared.opts())
    }

    /// `resource_metadata` of the challenge.
    pub fn prm_url(&self) -> String {
        self.shared.prm_url()
    }

    /// Where the RFC 8414 metadata is.
    pub fn metadata_url(&self) -> String {
        let o = self.shared.opts();
        format!(
            "{}/.well-known/oauth-authorization-server{}",
            self.shared.as_base,
            issuer_path(&o)
        )
    }

    pub fn token_url(&self) -> String {
        self.shared.token_url()
    }

    pub fn authorize_url(&self) -> String {
        format!("{}/authorize", self.shared.as_base)
    }

    pub fn register_url(&self) -> String {
        format!("{}/register", self.shared.as_base)
    }

    /// Changes the options.
    pub fn set(&self, f: impl FnOnce(&mut OAuthOptions)) {
        f(&mut self.shared.opts.lock().unwrap());
    }

    pub fn options(&self) -> OAuthOptions {
        self.shared.opts()
    }

    /// A client known without `/register`. `method` is its
    /// token_endpoint_auth_method; any loopback redirect URI is accepted.
    pub fn preregister(&self, client_id: &str, secret: Option<&str>, method: &str) {
        self.shared.grants.lock().unwrap().clients.insert(
            client_id.to_owned(),
            Client {
                info: RegisteredClient {
                    client_id: client_id.to_owned(),
                    client_secret: secret.map(str::to_owned),
                    method: method.to_owned(),
                    redirect_uris: Vec::new(),
                    dynamic: false,
                },
                grant_types: None,
                jwks: None,
            },
        );
    }

    /// A private_key_jwt client whose assertions are signed by the key of
    /// this public PEM (sets `jwt_keys`).
    pub fn preregister_jwt(&self, client_id: &str, alg: JwtAlg, public_pem: &str) {
        self.preregister(client_id, None, "private_key_jwt");
        self.set(|o| {
            o.jwt_keys
                .insert(client_id.to_owned(), (alg, public_pem.to_owned()));
        });
    }

    /// Mints a family (access + refresh token) as an authorization code grant
    /// would, without a browser. An unknown client is preregistered as a
    /// public one (`none`).
    pub fn issue_tokens_for_test(&self, client_id: &str, scope: Option<&str>) -> Minted {
        let o = self.shared.opts();
        if !self
            .shared
            .grants
            .lock()
            .unwrap()
            .clients
            .contains_key(client_id)
        {
            self.preregister(client_id, None, "none");
        }
        let mut g = self.shared.grants.lock().unwrap();
        let family = g.new_family(Family {
            client_id: client_id.to_owned(),
            subject: o.user.clone(),
            scope: scope.map(str::to_owned),
            resource: Some(self.shared.resource(&o)),
            revoked: false,
        });
        let access_token = g.mint_access(family, scope.map(str::to_owned), o.access_ttl);
        let refresh_token = g.mint_refresh(family);
        Minted {
            access_token,
            refresh_token,
            family,
            expires_in: o.access_ttl.as_secs(),
            scope: scope.map(str::to_owned),
            client_id: client_id.to_owned(),
        }
    }

    /// Every access token issued so far stops working (as if expired);
    /// refresh tokens still do.
    pub fn expire_access_tokens(&self) {
        let now = Instant::now();
        for a in self.shared.grants.lock().unwrap().access.values_mut() {
            a.expires = now;
        }
    }

    /// Revokes every family: all access and refresh tokens stop working.
    pub fn revoke_all(&self) {
        let mut g = self.shared.grants.lock().unwrap();
        for f in 0..g.families.len() {
            g.revoke(f as u64, RevokeReason::Test);
        }
    }

    /// Whether `/mcp` would accept this access token now.
    pub fn access_token_valid(&self, token: &str) -> bool {
        let o = self.shared.opts();
        check_access(&self.shared, token, &self.shared.resource(&o)).is_ok()
    }

    pub fn token_requests(&self) -> Vec<TokenRequest> {
        self.shared.log.lock().unwrap().token.clone()
    }

    pub fn authorize_requests(&self) -> Vec<AuthorizeRequest> {
        self.shared.log.lock().unwrap().authorize.clone()
    }

    /// The bodies POSTed to `/register` (a string if not JSON).
    pub fn registrations(&self) -> Vec<Value> {
        self.shared.log.lock().unwrap().registrations.clone()
    }

    /// Clients known, preregistered or registered.
    pub fn clients(&self) -> Vec<RegisteredClient> {
        let g = self.shared.grants.lock().unwrap();
        g.clients.values().map(|c| c.info.clone()).collect()
    }

    pub fn mcp_requests(&self) -> Vec<McpRequest> {
        self.shared.log.lock().unwrap().mcp.clone()
    }

    /// Every HTTP request, either port.
    pub fn requests(&self) -> Vec<Seen> {
        self.shared.log.lock().unwrap().seen.clone()
    }

    /// Whether any family was revoked by reuse (of a refresh token or code).
    pub fn family_revoked(&self) -> bool {
        self.revocations()
            .iter()
            .any(|r| r.reason != RevokeReason::Test)
    }

    pub fn revocations(&self) -> Vec<Revocation> {
        self.shared.grants.lock().unwrap().revocations.clone()
    }

    /// Successful refresh_token grants.
    pub fn refreshes(&self) -> usize {
        self.shared.grants.lock().unwrap().refreshes
    }

    pub fn started(&self) -> Instant {
        self.shared.started
    }

    /// Every request, one line each, for failure messages.
    pub fn summary(&self) -> String {
        let start = self.shared.started;
        let log = self.shared.log.lock().unwrap();
        let mut lines: Vec<String> = log
            .seen
            .iter()
            .map(|r| {
                format!(
                    "#{} +{}ms :{} {} {} [{}]",
                    r.seq,
                    r.at.saturating_duration_since(start).as_millis(),
                    r.port,
                    r.method,
                    r.path,
                    r.status.map(|s| s.to_string()).unwrap_or("-".into())
                )
            })
            .collect();
        for t in &log.token {
            lines.push(format!(
                "token +{}ms {:?} by {:?} via {} -> {} {} {}",
                t.at.saturating_duration_since(start).as_millis(),
                t.grant_type,
                t.client_id,
                t.auth_method,
                t.status,
                t.outcome,
                t.description
            ));
        }
        for a in &log.authorize {
            lines.push(format!("authorize -> {} {}", a.status, a.outcome));
        }
        format!("{} requests:\n  {}", log.seen.len(), lines.join("\n  "))
    }

    /// Waits (blocking the thread) until `pred` holds; past `limit` the test
    /// fails with the summary.
    pub fn wait_until(&self, what: &str, limit: Duration, pred: impl Fn(&OAuthServer) -> bool) {
        let deadline = Instant::now() + limit;
        while !pred(self) {
            if Instant::now() >= deadline {
                panic!("{what}: not within {limit:?}; {}", self.summary());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// [`OAuthServer::wait_until`] for async tests.
    pub async fn wait_until_async(
        &self,
        what: &str,
        limit: Duration,
        pred: impl Fn(&OAuthServer) -> bool,
    ) {
        let deadline = Instant::now() + limit;
        while !pred(self) {
            if Instant::now() >= deadline {
                panic!("{what}: not within {limit:?}; {}", self.summary());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for OAuthServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A private_key_jwt client assertion: iss = sub = `client_id`, `aud`, a
/// fresh `jti`, expiring in `exp_in_secs` (negative: already expired).
pub fn sign_client_assertion(
    client_id: &str,
    aud: &str,
    alg: JwtAlg,
    private_pem: &str,
    exp_in_secs: i64,
) -> String {
    sign_claims(
        alg,
        private_pem,
        &json!({
            "iss": client_id,
            "sub": client_id,
            "aud": aud,
            "exp": unix_now() as i64 + exp_in_secs,
            "iat": unix_now(),
            "jti": random_token("jti"),
        }),
    )
}

/// Any claims, signed (for assertions wrong in one particular way).
pub fn sign_claims(alg: JwtAlg, private_pem: &str, claims: &Value) -> String {
    let key = match alg {
        JwtAlg::ES256 => jsonwebtoken::EncodingKey::from_ec_pem(private_pem.as_bytes()),
        JwtAlg::RS256 => jsonwebtoken::EncodingKey::from_rsa_pem(private_pem.as_bytes()),
    }
    .unwrap();
    jsonwebtoken::encode(&jsonwebtoken::Header::new(alg.algorithm()), claims, &key).unwrap()
}

/// The S256 challenge of a PKCE verifier.
pub fn s256(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier.as_bytes()))
}

pub fn random_token(prefix: &str) -> String {
    let mut b = [0u8; 24];
    getrandom::fill(&mut b).unwrap();
    format!("{prefix}_{}", URL_SAFE_NO_PAD.encode(b))
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn param<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

// ---------------------------------------------------------------------------
// HTTP

async fn handle(State(app): State<App>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let at = Instant::now();
    let seq = {
        let mut log = app.s.log.lock().unwrap();
        let seq = log.seen.len();
        log.seen.push(Seen {
            seq,
            at,
            port: app.port,
            method: parts.method.to_string(),
            path: parts
                .uri
                .path_and_query()
                .map(|p| p.to_string())
                .unwrap_or_default(),
            status: None,
        });
        seq
    };
    let resp = route(&app, &parts, &bytes, at).await;
    app.s.log.lock().unwrap().seen[seq].status = Some(resp.status().as_u16());
    resp
}

async fn route(app: &App, parts: &Parts, body: &[u8], at: Instant) -> Response {
    let s = &app.s;
    let o = s.opts();
    let path = parts.uri.path();
    let resource_role = app.role != Role::Auth;
    let auth_role = app.role != Role::Resource;
    let get = parts.method == Method::GET;
    if resource_role && path == "/mcp" {
        return mcp(s, parts, body, &o, at);
    }
    if resource_role
        && get
        && o.serve_prm
        && (path == "/.well-known/oauth-protected-resource/mcp"
            || path == "/.well-known/oauth-protected-resource")
    {
        return json_response(StatusCode::OK, &prm(s, &o));
    }
    if auth_role && get {
        let ip = issuer_path(&o);
        let oauth = path == format!("/.well-known/oauth-authorization-server{ip}");
        let openid = path == format!("/.well-known/openid-configuration{ip}")
            || (!ip.is_empty() && path == format!("{ip}/.well-known/openid-configuration"));
        let served = match o.discovery {
            Discovery::OAuth => oauth,
            Discovery::OpenId => openid,
            Discovery::Both => oauth || openid,
        };
        if served {
            return json_response(StatusCode::OK, &as_metadata(s, &o, openid));
        }
        if path == "/authorize" {
            return authorize(s, parts, &o, at);
        }
    }
    if auth_role && path == "/token" {
        if parts.method != Method::POST {
            return plain(StatusCode::METHOD_NOT_ALLOWED, "POST only");
        }
        return token(s, parts, body, at).await;
    }
    if auth_role && path == "/register" && o.registration_endpoint {
        if parts.method != Method::POST {
            return plain(StatusCode::METHOD_NOT_ALLOWED, "POST only");
        }
        return register(s, body, &o);
    }
    plain(StatusCode::NOT_FOUND, "not found")
}

fn plain(status: StatusCode, text: &str) -> Response {
    Response::builder()
        .status(status)
        .header("content-type", "text/plain")
        .body(Body::from(text.to_owned()))
        .unwrap()
}

fn json_response(status: StatusCode, v: &Value) -> Response {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(v.to_string()))
        .unwrap()
}

// ---------------------------------------------------------------------------
// Metadata

fn prm(s: &Shared, o: &OAuthOptions) -> Value {
    let mut v = json!({
        "resource": s.resource(o),
        "authorization_servers": o.prm_authorization_servers.clone()
            .unwrap_or_else(|| vec![s.issuer(o)]),
        "bearer_methods_supported": ["header"],
    });
    if let Some(sc) = &o.prm_scopes_supported {
        v["scopes_supported"] = json!(sc);
    }
    if o.prm_resource_omitted
        && let Some(m) = v.as_object_mut()
    {
        m.remove("resource");
    }
    v
}

fn as_metadata(s: &Shared, o: &OAuthOptions, openid: bool) -> Value {
    let mut v = json!({
        "issuer": o.issuer_override.clone().unwrap_or_else(|| s.issuer(o)),
        "authorization_endpoint": format!("{}/authorize", s.as_base),
        "token_endpoint": s.token_url(),
        "response_types_supported": ["code"],
        "grant_types_supported": o.grant_types,
        "token_endpoint_auth_methods_supported": o.token_auth_methods,
    });
    if o.registration_endpoint {
        v["registration_endpoint"] = json!(format!("{}/register", s.as_base));
    }
    if let Some(m) = &o.code_challenge_methods {
        v["code_challenge_methods_supported"] = json!(m);
    }
    if let Some(sc) = &o.scopes_supported {
        v["scopes_supported"] = json!(sc);
    }
    if o.iss_parameter {
        v["authorization_response_iss_parameter_supported"] = json!(true);
    }
    if o.dpop {
        v["dpop_signing_alg_values_supported"] = json!(["ES256"]);
    }
    if o.token_auth_methods.iter().any(|m| m == "private_key_jwt") {
        v["token_endpoint_auth_signing_alg_values_supported"] = json!(["ES256", "RS256"]);
    }
    if openid {
        v["subject_types_supported"] = json!(["public"]);
        v["id_token_signing_alg_values_supported"] = json!(["RS256"]);
    }
    for (k, x) in &o.metadata_extra {
        v[k] = x.clone();
    }
    v
}

// ---------------------------------------------------------------------------
// /register

fn register(s: &Shared, body: &[u8], o: &OAuthOptions) -> Response {
    let parsed = serde_json::from_slice::<Value>(body);
    s.log.lock().unwrap().registrations.push(match &parsed {
        Ok(v) => v.clone(),
        Err(_) => Value::String(String::from_utf8_lossy(body).into_owned()),
    });
    let bad = |error: &str, d: &str| {
        json_response(
            StatusCode::BAD_REQUEST,
            &json!({"error": error, "error_description": d}),
        )
    };
    let Ok(Value::Object(meta)) = parsed else {
        return bad("invalid_client_metadata", "body must be a JSON object");
    };
    let method = meta
        .get("token_endpoint_auth_method")
        .and_then(Value::as_str)
        .unwrap_or("client_secret_basic")
        .to_owned();
    if !o.token_auth_methods.contains(&method) {
        return bad(
            "invalid_client_metadata",
            &format!("token_endpoint_auth_method {method} is not supported"),
        );
    }
    let grant_types: Option<Vec<String>> = meta.get("grant_types").map(|g| {
        g.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    });
    let wants_code = grant_types
        .as_ref()
        .is_none_or(|g| g.iter().any(|x| x == "authorization_code"));
    let redirect_uris: Vec<String> = meta
        .get("redirect_uris")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if wants_code && redirect_uris.is_empty() {
        return bad("invalid_redirect_uri", "redirect_uris is required");
    }
    if let Some(u) = redirect_uris.iter().find(|u| loopback(u).is_none()) {
        return bad(
            "invalid_redirect_uri",
            &format!("{u} is not a loopback http URI"),
        );
    }
    let jwks = match meta.get("jwks") {
        Some(j) => match serde_json::from_value::<jsonwebtoken::jwk::JwkSet>(j.clone()) {
            Ok(set) if !set.keys.is_empty() => Some(set),
            _ => return bad("invalid_client_metadata", "jwks is not a usable JWK set"),
        },
        None => None,
    };
    if method == "private_key_jwt" && jwks.is_none() {
        return bad(
            "invalid_client_metadata",
            "private_key_jwt needs jwks (jwks_uri is not supported here)",
        );
    }
    let client_id = random_token("client");
    let secret = matches!(
        method.as_str(),
        "client_secret_basic" | "client_secret_post"
    )
    .then(|| random_token("secret"));
    let mut out = Value::Object(meta.clone());
    out["client_id"] = json!(client_id);
    out["client_id_issued_at"] = json!(unix_now());
    out["token_endpoint_auth_method"] = json!(method);
    if let Some(sec) = &secret {
        out["client_secret"] = json!(sec);
        out["client_secret_expires_at"] = json!(0);
    }
    s.grants.lock().unwrap().clients.insert(
        client_id.clone(),
        Client {
            info: RegisteredClient {
                client_id,
                client_secret: secret,
                method,
                redirect_uris,
                dynamic: true,
            },
            grant_types,
            jwks,
        },
    );
    json_response(StatusCode::CREATED, &out)
}

/// The parsed URI if it is `http://` on a loopback host.
fn loopback(uri: &str) -> Option<url::Url> {
    let u = url::Url::parse(uri).ok()?;
    let host_ok = matches!(
        u.host(),
        Some(url::Host::Ipv4(ip)) if ip.is_loopback()
    ) || matches!(u.host(), Some(url::Host::Ipv6(ip)) if ip.is_loopback())
        || u.host_str() == Some("localhost");
    (u.scheme() == "http" && host_ok).then_some(u)
}

/// A redirect URI matches a registered one exactly, or but for the port
/// (RFC 8252 7.3: loopback ports are chosen at run time).
fn redirect_matches(registered: &[String], got: &url::Url) -> bool {
    registered.is_empty()
        || registered.iter().any(|r| match url::Url::parse(r) {
            Ok(r) => {
                r == *got
                    || (r.scheme() == got.scheme()
                        && r.host() == got.host()
                        && r.path() == got.path()
                        && r.query() == got.query())
            }
            Err(_) => false,
        })
}

// ---------------------------------------------------------------------------
// /authorize

fn authorize(s: &Shared, parts: &Parts, o: &OAuthOptions, at: Instant) -> Response {
    let query: Vec<(String, String)> =
        form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes())
            .into_owned()
            .collect();
    let (resp, outcome, location) = match authorize_checked(s, &query, o) {
        Ok(r) => r,
        Err(e) => (plain(StatusCode::BAD_REQUEST, &e), e, None),
    };
    s.log.lock().unwrap().authorize.push(AuthorizeRequest {
        at,
        query,
        status: resp.status().as_u16(),
        outcome,
        location,
    });
    resp
}

fn is_pkce_text(v: &str) -> bool {
    (43..=128).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
}

type Authorized = (Response, String, Option<String>);

fn authorize_checked(
    s: &Shared,
    q: &[(String, String)],
    o: &OAuthOptions,
) -> Result<Authorized, String> {
    let mut seen = HashSet::new();
    if let Some((k, _)) = q.iter().find(|(k, _)| !seen.insert(k.as_str())) {
        return Err(format!("parameter {k} repeated"));
    }
    let get = |k: &str| param(q, k);
    if get("response_type") != Some("code") {
        return Err(format!(
            "response_type must be code, got {:?}",
            get("response_type")
        ));
    }
    let client_id = get("client_id").ok_or("client_id missing")?;
    let registered = {
        let g = s.grants.lock().unwrap();
        match g.clients.get(client_id) {
            Some(c) => c.info.redirect_uris.clone(),
            None if o.jwt_keys.contains_key(client_id) => Vec::new(),
            None => return Err(format!("unknown client_id {client_id}")),
        }
    };
    let redirect_uri = get("redirect_uri").ok_or("redirect_uri missing")?;
    let parsed = loopback(redirect_uri)
        .ok_or_else(|| format!("redirect_uri {redirect_uri} is not a loopback http URI"))?;
    if !redirect_matches(&registered, &parsed) {
        return Err(format!(
            "redirect_uri {redirect_uri} is not registered for this client"
        ));
    }
    let challenge = get("code_challenge").ok_or("code_challenge missing (PKCE is required)")?;
    let allowed = o
        .code_challenge_methods
        .clone()
        .unwrap_or_else(|| vec!["S256".into()]);
    let method = get("code_challenge_method").unwrap_or("plain");
    if !allowed.iter().any(|m| m == method) {
        return Err(format!(
            "code_challenge_method {method} not allowed (want one of {allowed:?})"
        ));
    }
    if !is_pkce_text(challenge) {
        return Err("code_challenge must be 43-128 unreserved characters".into());
    }
    let state = get("state")
        .filter(|v| !v.is_empty())
        .ok_or("state missing")?;
    let want = s.resource(o);
    match get("resource") {
        Some(r) if r != want => return Err(format!("resource {r} is not {want}")),
        None if o.require_resource => return Err(format!("resource missing (want {want})")),
        _ => {}
    }
    let scope = get("scope").map(str::to_owned);
    if let (Some(sc), Some(supported)) = (&scope, &o.scopes_supported)
        && let Some(bad) = sc.split(' ').find(|x| !supported.iter().any(|y| y == x))
    {
        return Err(format!("unknown scope {bad}"));
    }

    let iss = match o.authorize {
        AuthorizeMode::WrongIss => Some(WRONG_ISS.to_owned()),
        _ if o.iss_parameter => Some(s.issuer(o)),
        _ => None,
    };
    let mut location = parsed;
    match o.authorize {
        AuthorizeMode::NoRedirect => {
            return Ok((
                Response::builder()
                    .status(StatusCode::OK)
                    .header("content-type", "text/html")
                    .body(Body::from(
                        "<!doctype html><title>Sign in</title><h1>Sign in to oauth-mock</h1>\
                         <p>This page never redirects.</p>",
                    ))
                    .unwrap(),
                "no-redirect".into(),
                None,
            ));
        }
        AuthorizeMode::Deny => {
            let mut qp = location.query_pairs_mut();
            qp.append_pair("error", "access_denied");
            qp.append_pair("error_description", "the user said no");
            qp.append_pair("state", state);
            if let Some(i) = &iss {
                qp.append_pair("iss", i);
            }
        }
        _ => {
            let code = random_token("code");
            s.grants.lock().unwrap().codes.insert(
                code.clone(),
                Code {
                    client_id: client_id.to_owned(),
                    redirect_uri: redirect_uri.to_owned(),
                    challenge: challenge.to_owned(),
                    method: method.to_owned(),
                    scope,
                    resource: get("resource").map(str::to_owned),
                    issued: Instant::now(),
                    used: false,
                    family: None,
                },
            );
            let state = if o.authorize == AuthorizeMode::WrongState {
                format!("{state}-tampered")
            } else {
                state.to_owned()
            };
            let mut qp = location.query_pairs_mut();
            qp.append_pair("code", &code);
            qp.append_pair("state", &state);
            if let Some(i) = &iss {
                qp.append_pair("iss", i);
            }
        }
    }
    let outcome = if o.authorize == AuthorizeMode::Deny {
        "denied"
    } else {
        "redirected"
    };
    let loc = location.to_string();
    Ok((
        Response::builder()
            .status(StatusCode::FOUND)
            .header("location", &loc)
            .body(Body::empty())
            .unwrap(),
        outcome.into(),
        Some(loc),
    ))
}

// ---------------------------------------------------------------------------
// /token

struct OErr {
    status: u16,
    error: String,
    description: String,
    /// The client used HTTP Basic: a 401 carries a Basic challenge.
    basic: bool,
}

fn oerr(status: u16, error: &str, description: impl Into<String>) -> OErr {
    OErr {
        status,
        error: error.to_owned(),
        description: description.into(),
        basic: false,
    }
}

fn invalid_client(description: impl Into<String>, basic: bool) -> OErr {
    OErr {
        basic,
        ..oerr(401, "invalid_client", description)
    }
}

async fn token(s: &Arc<Shared>, parts: &Parts, body: &[u8], at: Instant) -> Response {
    let o = s.opts();
    let form: Vec<(String, String)> = form_urlencoded::parse(body).into_owned().collect();
    let get = |k: &str| param(&form, k).map(str::to_owned);
    let mut rec = TokenRequest {
        at,
        grant_type: get("grant_type"),
        client_id: get("client_id"),
        auth_method: String::new(),
        refresh_token: get("refresh_token"),
        code: get("code"),
        redirect_uri: get("redirect_uri"),
        resource: get("resource"),
        scope: get("scope"),
        status: 0,
        outcome: String::new(),
        description: String::new(),
        family: None,
        form: form.clone(),
        dpop: None,
    };
    // The proof is checked before the grant is spent.
    let mut jkt = None;
    let mut nonce_wanted = false;
    if o.dpop
        && let Some(proof) = parts.headers.get("dpop").and_then(|v| v.to_str().ok())
    {
        match check_proof(proof, "POST", &s.token_url(), None) {
            Ok(p) => {
                if o.dpop_nonce == DpopNonce::Required && p.nonce.as_deref() != Some(DPOP_NONCE) {
                    nonce_wanted = true;
                    rec.dpop = Some("no nonce".into());
                } else {
                    rec.dpop = Some("ok".into());
                    jkt = Some(p.jkt);
                }
            }
            Err(e) => rec.dpop = Some(e),
        }
    }
    let result = match &rec.dpop {
        Some(e) if nonce_wanted => Err(oerr(400, "use_dpop_nonce", e.clone())),
        Some(e) if e != "ok" => Err(oerr(400, "invalid_dpop_proof", e.clone())),
        _ => grant(s, parts, &form, &o, &mut rec),
    };
    let result = result.map(|mut v| {
        if let (Some(jkt), Some(at)) = (&jkt, v["access_token"].as_str()) {
            if let Some(a) = s.grants.lock().unwrap().access.get_mut(at) {
                a.jkt = Some(jkt.clone());
            }
            v["token_type"] = json!("DPoP");
        }
        v
    });
    let resp = match result {
        Ok(v) => {
            rec.status = 200;
            rec.outcome = "ok".into();
            let mut r = json_response(StatusCode::OK, &v);
            r.headers_mut()
                .insert("cache-control", "no-store".parse().unwrap());
            r
        }
        Err(e) => {
            rec.status = e.status;
            rec.outcome = e.error.clone();
            rec.description = e.description.clone();
            let mut r = json_response(
                StatusCode::from_u16(e.status).unwrap(),
                &json!({"error": e.error, "error_description": e.description}),
            );
            if e.basic && e.status == 401 {
                r.headers_mut().insert(
                    "www-authenticate",
                    r#"Basic realm="oauth-mock""#.parse().unwrap(),
                );
            }
            if nonce_wanted {
                r.headers_mut()
                    .insert("dpop-nonce", DPOP_NONCE.parse().unwrap());
            }
            r
        }
    };
    s.log.lock().unwrap().token.push(rec);
    // Decided already: a client that gives up now has spent its grant.
    if !o.token_delay.is_zero() {
        tokio::time::sleep(o.token_delay).await;
    }
    resp
}

fn grant(
    s: &Shared,
    parts: &Parts,
    form: &[(String, String)],
    o: &OAuthOptions,
    rec: &mut TokenRequest,
) -> Result<Value, OErr> {
    {
        let mut opts = s.opts.lock().unwrap();
        if let Some(f) = opts.token_fail.as_mut()
            && f.remaining > 0
        {
            f.remaining -= 1;
            return Err(oerr(f.status, &f.error, "injected failure"));
        }
    }
    let ctype = parts
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !ctype.starts_with("application/x-www-form-urlencoded") {
        return Err(oerr(
            400,
            "invalid_request",
            format!("content-type must be application/x-www-form-urlencoded, got {ctype:?}"),
        ));
    }
    let mut seen = HashSet::new();
    if let Some((k, _)) = form
        .iter()
        .find(|(k, _)| k != "resource" && !seen.insert(k.as_str()))
    {
        return Err(oerr(
            400,
            "invalid_request",
            format!("parameter {k} repeated"),
        ));
    }
    let resources: Vec<&str> = form
        .iter()
        .filter(|(k, _)| k == "resource")
        .map(|(_, v)| v.as_str())
        .collect();
    if resources.len() > 1 {
        return Err(oerr(400, "invalid_target", "one resource at a time here"));
    }
    let resource = resources.first().copied();
    let get = |k: &str| param(form, k);
    let grant_type =
        get("grant_type").ok_or_else(|| oerr(400, "invalid_request", "grant_type missing"))?;
    if !o.grant_types.iter().any(|g| g == grant_type) {
        return Err(oerr(
            400,
            "unsupported_grant_type",
            format!("{grant_type} is not supported"),
        ));
    }
    let (client_id, method) = authenticate(s, parts, form, o, rec)?;
    rec.client_id = Some(client_id.clone());
    {
        let g = s.grants.lock().unwrap();
        if let Some(allowed) = g
            .clients
            .get(&client_id)
            .and_then(|c| c.grant_types.as_ref())
            && !allowed.iter().any(|x| x == grant_type)
        {
            return Err(oerr(
                400,
                "unauthorized_client",
                format!("client registered without {grant_type}"),
            ));
        }
    }
    let mut g = s.grants.lock().unwrap();
    let token_body = |access: &str, refresh: Option<&str>, scope: &Option<String>| {
        let mut v = json!({"access_token": access, "token_type": o.token_type});
        if o.send_expires_in {
            v["expires_in"] = json!(o.access_ttl.as_secs());
        }
        if let Some(sc) = scope {
            v["scope"] = json!(sc);
        }
        if let Some(r) = refresh {
            v["refresh_token"] = json!(r);
        }
        v
    };
    match grant_type {
        "authorization_code" => {
            let code = get("code").ok_or_else(|| oerr(400, "invalid_request", "code missing"))?;
            let c = g
                .codes
                .get(code)
                .ok_or_else(|| oerr(400, "invalid_grant", "unknown code"))?;
            if c.used {
                if let Some(f) = c.family {
                    rec.family = Some(f);
                    g.revoke(f, RevokeReason::CodeReuse);
                }
                return Err(oerr(
                    400,
                    "invalid_grant",
                    "code already used; its tokens are revoked",
                ));
            }
            if c.issued.elapsed() > o.code_ttl {
                return Err(oerr(400, "invalid_grant", "code expired"));
            }
            if c.client_id != client_id {
                return Err(oerr(
                    400,
                    "invalid_grant",
                    "code was issued to another client",
                ));
            }
            if get("redirect_uri") != Some(c.redirect_uri.as_str()) {
                return Err(oerr(
                    400,
                    "invalid_grant",
                    format!(
                        "redirect_uri {:?} is not the one authorized ({})",
                        get("redirect_uri"),
                        c.redirect_uri
                    ),
                ));
            }
            let verifier = get("code_verifier")
                .ok_or_else(|| oerr(400, "invalid_request", "code_verifier missing"))?;
            if !is_pkce_text(verifier) {
                return Err(oerr(
                    400,
                    "invalid_grant",
                    "code_verifier must be 43-128 unreserved characters",
                ));
            }
            let derived = if c.method == "S256" {
                s256(verifier)
            } else {
                verifier.to_owned()
            };
            if derived != c.challenge {
                return Err(oerr(400, "invalid_grant", "PKCE verification failed"));
            }
            if let Some(r) = resource
                && Some(r) != c.resource.as_deref()
            {
                return Err(oerr(
                    400,
                    "invalid_target",
                    format!("resource {r} is not the one authorized"),
                ));
            }
            let (scope, res) = (c.scope.clone(), c.resource.clone());
            let family = g.new_family(Family {
                client_id,
                subject: o.user.clone(),
                scope: scope.clone(),
                resource: res,
                revoked: false,
            });
            if let Some(c) = g.codes.get_mut(code) {
                c.used = true;
                c.family = Some(family);
            }
            rec.family = Some(family);
            let access = g.mint_access(family, scope.clone(), o.access_ttl);
            let refresh = g.mint_refresh(family);
            Ok(token_body(&access, Some(&refresh), &scope))
        }
        "refresh_token" => {
            let rt = get("refresh_token")
                .ok_or_else(|| oerr(400, "invalid_request", "refresh_token missing"))?;
            let r = g
                .refresh
                .get(rt)
                .ok_or_else(|| oerr(400, "invalid_grant", "unknown refresh token"))?;
            let (family, used, issued) = (r.family, r.used, r.issued);
            rec.family = Some(family);
            let f = &g.families[family as usize];
            if f.client_id != client_id {
                return Err(oerr(
                    400,
                    "invalid_grant",
                    "refresh token of another client",
                ));
            }
            if used {
                g.revoke(family, RevokeReason::RefreshReuse);
                return Err(oerr(
                    400,
                    "invalid_grant",
                    "refresh token already used; the whole grant is revoked",
                ));
            }
            if f.revoked {
                return Err(oerr(400, "invalid_grant", "grant revoked"));
            }
            if o.refresh_ttl.is_some_and(|ttl| issued.elapsed() > ttl) {
                return Err(oerr(400, "invalid_grant", "refresh token expired"));
            }
            if let Some(r) = resource
                && Some(r) != f.resource.as_deref()
            {
                return Err(oerr(
                    400,
                    "invalid_target",
                    format!("resource {r} is not the one authorized"),
                ));
            }
            let scope = match get("scope") {
                Some(want) => {
                    let granted: Vec<&str> = f.scope.as_deref().unwrap_or("").split(' ').collect();
                    if let Some(extra) = want.split(' ').find(|x| !granted.contains(x)) {
                        return Err(oerr(
                            400,
                            "invalid_scope",
                            format!("scope {extra} was not granted"),
                        ));
                    }
                    Some(want.to_owned())
                }
                None => f.scope.clone(),
            };
            let new_refresh = if o.rotate_refresh {
                if let Some(r) = g.refresh.get_mut(rt) {
                    r.used = true;
                }
                Some(g.mint_refresh(family))
            } else {
                None
            };
            let access = g.mint_access(family, scope.clone(), o.access_ttl);
            g.refreshes += 1;
            Ok(token_body(&access, new_refresh.as_deref(), &scope))
        }
        "client_credentials" => {
            if method == "none" {
                return Err(oerr(
                    400,
                    "unauthorized_client",
                    "a public client cannot use client_credentials",
                ));
            }
            let want = s.resource(o);
            if let Some(r) = resource
                && r != want
            {
                return Err(oerr(
                    400,
                    "invalid_target",
                    format!("resource {r} is not {want}"),
                ));
            }
            let scope = get("scope").map(str::to_owned);
            let family = g.new_family(Family {
                client_id: client_id.clone(),
                subject: client_id,
                scope: scope.clone(),
                resource: resource.map(str::to_owned),
                revoked: false,
            });
            rec.family = Some(family);
            let access = g.mint_access(family, scope.clone(), o.access_ttl);
            Ok(token_body(&access, None, &scope))
        }
        JWT_BEARER_GRANT => {
            let assertion = get("assertion")
                .ok_or_else(|| oerr(400, "invalid_request", "assertion missing"))?;
            if !o.workload_tokens.iter().any(|t| t == assertion) {
                return Err(oerr(400, "invalid_grant", "unknown workload token"));
            }
            let scope = get("scope").map(str::to_owned);
            let family = g.new_family(Family {
                client_id: client_id.clone(),
                subject: format!("workload:{client_id}"),
                scope: scope.clone(),
                resource: resource.map(str::to_owned),
                revoked: false,
            });
            rec.family = Some(family);
            let access = g.mint_access(family, scope.clone(), o.access_ttl);
            Ok(token_body(&access, None, &scope))
        }
        other => Err(oerr(
            400,
            "unsupported_grant_type",
            format!("{other} is not supported"),
        )),
    }
}

/// A DPoP proof that checked out.
pub struct Proof {
    pub jkt: String,
    pub nonce: Option<String>,
    pub jti: String,
}

/// RFC 9449 §4.3: the proof's own checks, and `ath` for `access_token`.
/// (`jti` reuse and the token's binding are the caller's.)
pub fn check_proof(
    proof: &str,
    method: &str,
    url: &str,
    access_token: Option<&str>,
) -> Result<Proof, String> {
    let h = jsonwebtoken::decode_header(proof).map_err(|e| format!("not a JWT: {e}"))?;
    if h.typ.as_deref() != Some("dpop+jwt") {
        return Err(format!("typ {:?}, not dpop+jwt", h.typ));
    }
    let jwk = h.jwk.ok_or("no jwk in the header")?;
    let key = jsonwebtoken::DecodingKey::from_jwk(&jwk).map_err(|e| format!("bad jwk: {e}"))?;
    let mut v = jsonwebtoken::Validation::new(h.alg);
    v.required_spec_claims.clear();
    v.validate_exp = false;
    let c = jsonwebtoken::decode::<Value>(proof, &key, &v)
        .map_err(|e| format!("signature: {e}"))?
        .claims;
    if c["htm"] != method {
        return Err(format!("htm {} for a {method}", c["htm"]));
    }
    if c["htu"] != url {
        return Err(format!("htu {} for {url}", c["htu"]));
    }
    let iat = c["iat"].as_u64().ok_or("no iat")?;
    if unix_now().abs_diff(iat) > 300 {
        return Err("iat too far off".into());
    }
    let jti = c["jti"].as_str().ok_or("no jti")?.to_owned();
    if let Some(t) = access_token {
        let want = URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(t.as_bytes()));
        if c["ath"] != want.as_str() {
            return Err("ath is not the token's hash".into());
        }
    }
    let jkt = jwk
        .thumbprint(jsonwebtoken::jwk::ThumbprintHash::SHA256)
        .map_err(|e| format!("thumbprint: {e}"))?;
    Ok(Proof {
        jkt,
        nonce: c["nonce"].as_str().map(str::to_owned),
        jti,
    })
}

/// `%XX` and `+` decoding (application/x-www-form-urlencoded).
fn form_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// Who the client is and how it proved it.
fn authenticate(
    s: &Shared,
    parts: &Parts,
    form: &[(String, String)],
    o: &OAuthOptions,
    rec: &mut TokenRequest,
) -> Result<(String, String), OErr> {
    let get = |k: &str| param(form, k);
    let basic = parts
        .headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.get(..6)
                .filter(|p| p.eq_ignore_ascii_case("basic "))
                .map(|_| v[6..].trim().to_owned())
        });
    let jwt = get("client_assertion_type").is_some() || get("client_assertion").is_some();
    let post = get("client_secret");
    let used = [basic.is_some(), jwt, post.is_some()]
        .iter()
        .filter(|x| **x)
        .count();
    if used > 1 {
        return Err(oerr(
            400,
            "invalid_request",
            "more than one client authentication method",
        ));
    }
    let form_id = get("client_id");
    let known = |id: &str| -> Option<(String, Option<String>)> {
        let g = s.grants.lock().unwrap();
        match g.clients.get(id) {
            Some(c) => Some((c.info.method.clone(), c.info.client_secret.clone())),
            None => o
                .jwt_keys
                .contains_key(id)
                .then(|| ("private_key_jwt".to_owned(), None)),
        }
    };
    if let Some(b) = basic {
        rec.auth_method = "client_secret_basic".into();
        let decoded = STANDARD
            .decode(b.as_bytes())
            .ok()
            .and_then(|d| String::from_utf8(d).ok())
            .ok_or_else(|| invalid_client("Basic credentials are not base64", true))?;
        let (id, secret) = decoded
            .split_once(':')
            .ok_or_else(|| invalid_client("Basic credentials lack ':'", true))?;
        let (id, secret) = (
            form_decode(id).ok_or_else(|| invalid_client("bad %-encoding in client id", true))?,
            form_decode(secret)
                .ok_or_else(|| invalid_client("bad %-encoding in client secret", true))?,
        );
        rec.client_id = Some(id.clone());
        if form_id.is_some_and(|f| f != id) {
            return Err(oerr(
                400,
                "invalid_request",
                "client_id in the body is not the Basic one",
            ));
        }
        let (method, want) =
            known(&id).ok_or_else(|| invalid_client(format!("unknown client {id}"), true))?;
        if method != "client_secret_basic" {
            return Err(invalid_client(
                format!("client authenticates with {method}, not client_secret_basic"),
                true,
            ));
        }
        if want.as_deref() != Some(secret.as_str()) {
            return Err(invalid_client("wrong client secret", true));
        }
        return Ok((id, method));
    }
    if jwt {
        rec.auth_method = "private_key_jwt".into();
        let id = verify_assertion(s, form, o, &known)?;
        rec.client_id = Some(id.clone());
        return Ok((id, "private_key_jwt".into()));
    }
    if let Some(secret) = post {
        rec.auth_method = "client_secret_post".into();
        let id = form_id.ok_or_else(|| oerr(400, "invalid_request", "client_id missing"))?;
        let (method, want) =
            known(id).ok_or_else(|| invalid_client(format!("unknown client {id}"), false))?;
        if method != "client_secret_post" {
            return Err(invalid_client(
                format!("client authenticates with {method}, not client_secret_post"),
                false,
            ));
        }
        if want.as_deref() != Some(secret) {
            return Err(invalid_client("wrong client secret", false));
        }
        return Ok((id.to_owned(), method));
    }
    let Some(id) = form_id else {
        return Err(invalid_client(
            "no client authentication and no client_id",
            false,
        ));
    };
    rec.auth_method = "none".into();
    let (method, _) =
        known(id).ok_or_else(|| invalid_client(format!("unknown client {id}"), false))?;
    if method != "none" {
        return Err(invalid_client(
            format!("client must authenticate ({method})"),
            false,
        ));
    }
    Ok((id.to_owned(), method))
}

/// A client's auth method and secret, if it is known.
type Known<'a> = dyn Fn(&str) -> Option<(String, Option<String>)> + 'a;

fn verify_assertion(
    s: &Shared,
    form: &[(String, String)],
    o: &OAuthOptions,
    known: &Known<'_>,
) -> Result<String, OErr> {
    let get = |k: &str| param(form, k);
    if get("client_assertion_type") != Some(JWT_BEARER) {
        return Err(invalid_client(
            format!("client_assertion_type must be {JWT_BEARER}"),
            false,
        ));
    }
    let jwt =
        get("client_assertion").ok_or_else(|| invalid_client("client_assertion missing", false))?;
    let claims: Value = jsonwebtoken::dangerous::insecure_decode_claims(jwt)
        .map_err(|e| invalid_client(format!("client_assertion malformed: {e}"), false))?;
    let id = claims["sub"]
        .as_str()
        .ok_or_else(|| invalid_client("client_assertion has no sub", false))?
        .to_owned();
    if get("client_id").is_some_and(|f| f != id) {
        return Err(invalid_client(
            "client_id is not the assertion's sub",
            false,
        ));
    }
    let (method, _) =
        known(&id).ok_or_else(|| invalid_client(format!("unknown client {id}"), false))?;
    if method != "private_key_jwt" {
        return Err(invalid_client(
            format!("client authenticates with {method}, not private_key_jwt"),
            false,
        ));
    }
    let header = jsonwebtoken::decode_header(jwt)
        .map_err(|e| invalid_client(format!("client_assertion header: {e}"), false))?;
    let (alg, key) = match o.jwt_keys.get(&id) {
        Some((alg, pem)) => {
            let key = match alg {
                JwtAlg::ES256 => jsonwebtoken::DecodingKey::from_ec_pem(pem.as_bytes()),
                JwtAlg::RS256 => jsonwebtoken::DecodingKey::from_rsa_pem(pem.as_bytes()),
            }
            .map_err(|e| invalid_client(format!("registered key unusable: {e}"), false))?;
            (alg.algorithm(), key)
        }
        None => {
            let g = s.grants.lock().unwrap();
            let set = g
                .clients
                .get(&id)
                .and_then(|c| c.jwks.as_ref())
                .ok_or_else(|| invalid_client("no key registered", false))?;
            let jwk = header
                .kid
                .as_deref()
                .and_then(|k| set.find(k))
                .or(set.keys.first())
                .ok_or_else(|| invalid_client("no key registered", false))?;
            let key = jsonwebtoken::DecodingKey::from_jwk(jwk)
                .map_err(|e| invalid_client(format!("registered JWK unusable: {e}"), false))?;
            if !matches!(
                header.alg,
                jsonwebtoken::Algorithm::ES256 | jsonwebtoken::Algorithm::RS256
            ) {
                return Err(invalid_client("alg must be ES256 or RS256", false));
            }
            (header.alg, key)
        }
    };
    if header.alg != alg {
        return Err(invalid_client(
            format!("client_assertion alg {:?}, registered {alg:?}", header.alg),
            false,
        ));
    }
    let mut v = jsonwebtoken::Validation::new(alg);
    v.leeway = 5;
    v.set_audience(&[s.token_url(), s.issuer(o)]);
    v.set_issuer(&[id.as_str()]);
    v.sub = Some(id.clone());
    v.set_required_spec_claims(&["exp", "iss", "sub", "aud"]);
    jsonwebtoken::decode::<Value>(jwt, &key, &v)
        .map_err(|e| invalid_client(format!("client_assertion rejected: {e}"), false))?;
    let jti = claims["jti"]
        .as_str()
        .filter(|j| !j.is_empty())
        .ok_or_else(|| invalid_client("client_assertion has no jti", false))?;
    if !s.grants.lock().unwrap().jtis.insert(jti.to_owned()) {
        return Err(invalid_client("client_assertion jti replayed", false));
    }
    Ok(id)
}

// ---------------------------------------------------------------------------
// /mcp

struct Holder {
    subject: String,
    client_id: String,
    family: u64,
    scope: Option<String>,
    jkt: Option<String>,
}

/// The holder of a valid access token for `resource`, or why not.
fn check_access(s: &Shared, token: &str, resource: &str) -> Result<Holder, &'static str> {
    let g = s.grants.lock().unwrap();
    let a = g.access.get(token).ok_or("unknown token")?;
    let f = &g.families[a.family as usize];
    if f.revoked {
        return Err("token revoked");
    }
    if Instant::now() >= a.expires {
        return Err("token expired");
    }
    if f.resource.as_deref().is_some_and(|r| r != resource) {
        return Err("token is for another resource");
    }
    Ok(Holder {
        subject: f.subject.clone(),
        client_id: f.client_id.clone(),
        family: a.family,
        scope: a.scope.clone(),
        jkt: a.jkt.clone(),
    })
}

fn challenge(s: &Shared, o: &OAuthOptions, error: Option<&str>) -> String {
    let mut p = Vec::new();
    if o.challenge_resource_metadata {
        p.push(format!(r#"resource_metadata="{}""#, s.prm_url()));
    }
    if let Some(sc) = &o.challenge_scope {
        p.push(format!(r#"scope="{sc}""#));
    }
    if let Some(e) = error {
        p.push(format!(r#"error="{e}""#));
    }
    if let Some(x) = &o.challenge_extra {
        p.push(x.clone());
    }
    if p.is_empty() {
        "Bearer".into()
    } else {
        format!("Bearer {}", p.join(", "))
    }
}

fn mcp(s: &Shared, parts: &Parts, body: &[u8], o: &OAuthOptions, at: Instant) -> Response {
    let authorization = parts
        .headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let msg = serde_json::from_slice::<Value>(body).ok();
    let rpc_method = msg
        .as_ref()
        .and_then(|m| m["method"].as_str())
        .map(str::to_owned);
    let mut dpop = None;
    let resp = mcp_answer(s, parts, authorization.as_deref(), msg, o, &mut dpop);
    let (dpop, dpop_jkt) = match dpop {
        Some(Ok(jkt)) => (Some("ok".to_owned()), Some(jkt)),
        Some(Err(e)) => (Some(e), None),
        None => (None, None),
    };
    s.log.lock().unwrap().mcp.push(McpRequest {
        dpop,
        dpop_jkt,
        at,
        http_method: parts.method.to_string(),
        rpc_method,
        authorization,
        status: resp.status().as_u16(),
        www_authenticate: resp
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
    });
    resp
}

fn unauthorized(s: &Shared, o: &OAuthOptions, error: Option<&str>, why: &str) -> Response {
    let mut r = json_response(
        StatusCode::UNAUTHORIZED,
        &json!({"error": error.unwrap_or("unauthorized"), "error_description": why}),
    );
    r.headers_mut()
        .insert("www-authenticate", challenge(s, o, error).parse().unwrap());
    r
}

fn mcp_answer(
    s: &Shared,
    parts: &Parts,
    authorization: Option<&str>,
    msg: Option<Value>,
    o: &OAuthOptions,
    dpop: &mut Option<Result<String, String>>,
) -> Response {
    let scheme = |name: &str| {
        authorization.and_then(|v| {
            v.split_once(' ')
                .filter(|(p, _)| p.eq_ignore_ascii_case(name))
                .map(|(_, t)| t.trim())
        })
    };
    let (token, as_dpop) = match (scheme("bearer"), scheme("dpop")) {
        (Some(t), _) => (t, false),
        (None, Some(t)) => (t, true),
        (None, None) => return unauthorized(s, o, None, "no Bearer token"),
    };
    let proof = parts.headers.get("dpop").and_then(|v| v.to_str().ok());
    if o.reject_all_tokens {
        return unauthorized(s, o, Some("invalid_token"), "every token is refused here");
    }
    let holder = match check_access(s, token, &s.resource(o)) {
        Ok(h) => h,
        Err(why) => return unauthorized(s, o, Some("invalid_token"), why),
    };
    if let Some(jkt) = &holder.jkt {
        if !as_dpop {
            return unauthorized(s, o, Some("invalid_token"), "a DPoP token sent as Bearer");
        }
        let checked = proof
            .ok_or_else(|| "no DPoP proof".to_owned())
            .and_then(|p| {
                check_proof(
                    p,
                    parts.method.as_str(),
                    &format!("{}/mcp", s.res_base),
                    Some(token),
                )
            })
            .and_then(|p| {
                let mut g = s.grants.lock().unwrap();
                if !g.dpop_jtis.insert(p.jti.clone()) {
                    return Err("jti seen before (a replayed proof)".into());
                }
                if &p.jkt != jkt {
                    return Err("the proof's key is not the token's (cnf.jkt)".into());
                }
                Ok(p)
            });
        let p = match checked {
            Ok(p) => p,
            Err(e) => {
                *dpop = Some(Err(e.clone()));
                return unauthorized(s, o, Some("invalid_dpop_proof"), &e);
            }
        };
        let want = match o.dpop_nonce {
            DpopNonce::Off => None,
            DpopNonce::Required => Some(DPOP_NONCE.to_owned()),
            DpopNonce::AlwaysNew => {
                let mut g = s.grants.lock().unwrap();
                g.nonces_given += 1;
                Some(format!("mock-nonce-{}", g.nonces_given + 100))
            }
        };
        if let Some(n) = want
            && p.nonce.as_deref() != Some(n.as_str())
        {
            *dpop = Some(Err("no nonce or a stale one".into()));
            let mut r = json_response(
                StatusCode::UNAUTHORIZED,
                &json!({"error": "use_dpop_nonce"}),
            );
            r.headers_mut().insert(
                "www-authenticate",
                r#"DPoP error="use_dpop_nonce", algs="ES256""#.parse().unwrap(),
            );
            r.headers_mut().insert("dpop-nonce", n.parse().unwrap());
            return r;
        }
        *dpop = Some(Ok(p.jkt));
    }
    if parts.method != Method::POST {
        let mut r = plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "POST only (stateless server)",
        );
        r.headers_mut().insert("allow", "POST".parse().unwrap());
        return r;
    }
    let Some(msg) = msg.filter(Value::is_object) else {
        return json_response(
            StatusCode::BAD_REQUEST,
            &json!({"jsonrpc": "2.0", "id": null,
                    "error": {"code": -32700, "message": "parse error (one JSON object per POST)"}}),
        );
    };
    let Some(method) = msg["method"].as_str() else {
        return plain(StatusCode::ACCEPTED, "");
    };
    let Some(id) = msg.get("id").cloned() else {
        return plain(StatusCode::ACCEPTED, "");
    };
    let result = match method {
        "initialize" => {
            let asked = msg["params"]["protocolVersion"].as_str().unwrap_or("");
            let v = if VERSIONS.contains(&asked) {
                asked
            } else {
                LATEST
            };
            Ok(json!({
                "protocolVersion": v,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": SERVER_NAME, "version": "0.1.0"},
            }))
        }
        "ping" => Ok(json!({})),
        "tools/list" => Ok(json!({"tools": [{
            "name": "whoami",
            "description": "Names the holder of the access token",
            "inputSchema": {"type": "object"},
        }]})),
        "tools/call" => {
            let granted: Vec<&str> = holder.scope.as_deref().unwrap_or("").split(' ').collect();
            if o.call_scopes.iter().any(|c| !granted.contains(&c.as_str())) {
                let needed = o.call_scopes.join(" ");
                let mut r = json_response(
                    StatusCode::FORBIDDEN,
                    &json!({"error": "insufficient_scope", "error_description": format!("tools/call needs {needed}")}),
                );
                r.headers_mut().insert(
                    "www-authenticate",
                    format!(
                        r#"Bearer error="insufficient_scope", scope="{needed}", resource_metadata="{}""#,
                        s.prm_url()
                    )
                    .parse()
                    .unwrap(),
                );
                return r;
            }
            match msg["params"]["name"].as_str() {
                Some("whoami") => Ok(json!({"content": [{"type": "text", "text": format!(
                    "subject={} client={} family={} scope={}",
                    holder.subject,
                    holder.client_id,
                    holder.family,
                    holder.scope.as_deref().unwrap_or("")
                )}]})),
                other => Err((-32602, format!("unknown tool {other:?}"))),
            }
        }
        other => Err((-32601, format!("method not found: {other}"))),
    };
    let body = match result {
        Ok(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
        Err((code, m)) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": m}})
        }
    };
    json_response(StatusCode::OK, &body)
}
