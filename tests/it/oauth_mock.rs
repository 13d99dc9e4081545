//! The mock OAuth authorization server and protected MCP server
//! (tests/common/oauth_server.rs), driven by hand with reqwest: the OAuth
//! client tests are only as good as the peer they run against.

use crate::common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::oauth_server::{
    AuthorizeMode, Discovery, ES256_OTHER_PRIVATE_PEM, ES256_PRIVATE_PEM, ES256_PUBLIC_PEM,
    JWT_BEARER, JwtAlg, OAuthOptions, OAuthServer, RS256_PRIVATE_PEM, RS256_PUBLIC_PEM,
    RevokeReason, TokenFail, WRONG_ISS, random_token, s256, sign_claims, sign_client_assertion,
};
use serde_json::{Value, json};
use url::form_urlencoded;

const REDIRECT: &str = "http://127.0.0.1:49152/callback";

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn get_json(c: &reqwest::Client, url: &str) -> (u16, Value) {
    let r = c.get(url).send().await.unwrap();
    let st = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        st,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn form(pairs: &[(&str, &str)]) -> String {
    let mut s = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        s.append_pair(k, v);
    }
    s.finish()
}

/// RFC 6749 2.3.1: id and secret are form-urlencoded before base64.
fn basic(id: &str, secret: &str) -> String {
    use base64::Engine as _;
    let enc = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", enc(id), enc(secret)))
    )
}

struct TokenAnswer {
    status: u16,
    body: Value,
    www_authenticate: Option<String>,
}

impl TokenAnswer {
    fn error(&self) -> &str {
        self.body["error"].as_str().unwrap_or("")
    }
    fn access(&self) -> String {
        self.body["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no access_token: {} {}", self.status, self.body))
            .to_owned()
    }
    fn refresh(&self) -> String {
        self.body["refresh_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no refresh_token: {} {}", self.status, self.body))
            .to_owned()
    }
}

async fn token(
    c: &reqwest::Client,
    srv: &OAuthServer,
    pairs: &[(&str, &str)],
    authorization: Option<String>,
) -> TokenAnswer {
    let mut r = c
        .post(srv.token_url())
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(pairs));
    if let Some(a) = authorization {
        r = r.header("authorization", a);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let www_authenticate = r
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned());
    let text = r.text().await.unwrap();
    TokenAnswer {
        status,
        body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
        www_authenticate,
    }
}

struct McpAnswer {
    status: u16,
    www_authenticate: Option<String>,
    body: Value,
}

async fn mcp(
    c: &reqwest::Client,
    srv: &OAuthServer,
    bearer: Option<&str>,
    msg: Value,
) -> McpAnswer {
    let mut r = c
        .post(srv.mcp_url())
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(msg.to_string());
    if let Some(t) = bearer {
        r = r.header("authorization", format!("Bearer {t}"));
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let www_authenticate = r
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned());
    let text = r.text().await.unwrap();
    McpAnswer {
        status,
        www_authenticate,
        body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
    }
}

fn call(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn whoami() -> Value {
    call(9, "tools/call", json!({"name": "whoami", "arguments": {}}))
}

fn pkce() -> (String, String) {
    // 43-128 unreserved characters (RFC 7636 4.1).
    let verifier = format!("{}{}", random_token("v"), random_token("w"));
    let challenge = s256(&verifier);
    (verifier, challenge)
}

async fn register_public(c: &reqwest::Client, srv: &OAuthServer) -> String {
    let r = c
        .post(srv.register_url())
        .header("content-type", "application/json")
        .body(
            json!({
                "client_name": "mcphost test",
                "redirect_uris": [REDIRECT],
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                "token_endpoint_auth_method": "none",
            })
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let v: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert!(
        v.get("client_secret").is_none(),
        "public client got a secret: {v}"
    );
    v["client_id"].as_str().unwrap().to_owned()
}

struct Authz {
    params: Vec<(&'static str, String)>,
}

impl Authz {
    fn new(srv: &OAuthServer, client_id: &str, challenge: &str, state: &str) -> Authz {
        Authz {
            params: vec![
                ("response_type", "code".into()),
                ("client_id", client_id.into()),
                ("redirect_uri", REDIRECT.into()),
                ("code_challenge", challenge.into()),
                ("code_challenge_method", "S256".into()),
                ("state", state.into()),
                ("resource", srv.resource()),
            ],
        }
    }
    fn set(mut self, k: &'static str, v: &str) -> Authz {
        self.params.retain(|(x, _)| *x != k);
        self.params.push((k, v.into()));
        self
    }
    fn without(mut self, k: &str) -> Authz {
        self.params.retain(|(x, _)| *x != k);
        self
    }
    async fn send(&self, c: &reqwest::Client, srv: &OAuthServer) -> reqwest::Response {
        let pairs: Vec<(&str, &str)> = self.params.iter().map(|(k, v)| (*k, v.as_str())).collect();
        c.get(format!("{}?{}", srv.authorize_url(), form(&pairs)))
            .send()
            .await
            .unwrap()
    }
}

/// The query of a 302's Location.
fn redirect_params(r: &reqwest::Response) -> HashMap<String, String> {
    assert_eq!(r.status().as_u16(), 302, "not a redirect");
    let loc = r.headers()["location"].to_str().unwrap();
    assert!(loc.starts_with(REDIRECT), "redirected to {loc}");
    url::Url::parse(loc)
        .unwrap()
        .query_pairs()
        .into_owned()
        .collect()
}

/// Register, authorize, redeem: the tokens and the client id.
async fn login(
    c: &reqwest::Client,
    srv: &OAuthServer,
    scope: Option<&str>,
) -> (String, TokenAnswer) {
    let client_id = register_public(c, srv).await;
    let (verifier, challenge) = pkce();
    let mut a = Authz::new(srv, &client_id, &challenge, "st-1");
    if let Some(sc) = scope {
        a = a.set("scope", sc);
    }
    let r = a.send(c, srv).await;
    let p = redirect_params(&r);
    let t = token(
        c,
        srv,
        &[
            ("grant_type", "authorization_code"),
            ("code", &p["code"]),
            ("redirect_uri", REDIRECT),
            ("code_verifier", &verifier),
            ("client_id", &client_id),
            ("resource", &srv.resource()),
        ],
        None,
    )
    .await;
    assert_eq!(t.status, 200, "token: {} / {}", t.body, srv.summary());
    (client_id, t)
}

async fn refresh(c: &reqwest::Client, srv: &OAuthServer, client_id: &str, rt: &str) -> TokenAnswer {
    token(
        c,
        srv,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", rt),
            ("client_id", client_id),
        ],
        None,
    )
    .await
}

// ---------------------------------------------------------------------------

#[tokio::test]
async fn metadata_documents_describe_both_roles() {
    let srv = OAuthServer::start(OAuthOptions::default());
    let c = client();
    let base = srv.base();

    let (st, prm) = get_json(
        &c,
        &format!("{base}/.well-known/oauth-protected-resource/mcp"),
    )
    .await;
    assert_eq!(st, 200);
    assert_eq!(prm["resource"], format!("{base}/mcp"));
    assert_eq!(prm["authorization_servers"], json!([base.clone()]));
    assert!(prm.get("scopes_supported").is_none());

    let (st, md) = get_json(
        &c,
        &format!("{base}/.well-known/oauth-authorization-server"),
    )
    .await;
    assert_eq!(st, 200, "{md}");
    assert_eq!(md["issuer"], base);
    assert_eq!(md["authorization_endpoint"], format!("{base}/authorize"));
    assert_eq!(md["token_endpoint"], format!("{base}/token"));
    assert_eq!(md["registration_endpoint"], format!("{base}/register"));
    assert_eq!(md["code_challenge_methods_supported"], json!(["S256"]));
    assert_eq!(
        md["grant_types_supported"],
        json!(["authorization_code", "refresh_token", "client_credentials"])
    );
    assert_eq!(
        md["token_endpoint_auth_methods_supported"],
        json!(["client_secret_basic", "client_secret_post", "none"])
    );
    assert!(
        md.get("authorization_response_iss_parameter_supported")
            .is_none()
    );
    // Discovery::OAuth: no OpenID document.
    let (st, _) = get_json(&c, &format!("{base}/.well-known/openid-configuration")).await;
    assert_eq!(st, 404);
}

#[tokio::test]
async fn metadata_knobs_change_the_documents() {
    let srv = OAuthServer::start(OAuthOptions {
        registration_endpoint: false,
        code_challenge_methods: None,
        issuer_override: Some("https://elsewhere.example".into()),
        iss_parameter: true,
        scopes_supported: Some(vec!["mcp:read".into(), "mcp:call".into()]),
        prm_scopes_supported: Some(vec!["mcp:read".into()]),
        discovery: Discovery::Both,
        ..Default::default()
    });
    let c = client();
    let base = srv.base();
    let (_, md) = get_json(&c, &srv.metadata_url()).await;
    assert_eq!(md["issuer"], "https://elsewhere.example");
    assert!(md.get("registration_endpoint").is_none(), "{md}");
    assert!(md.get("code_challenge_methods_supported").is_none(), "{md}");
    assert_eq!(md["authorization_response_iss_parameter_supported"], true);
    assert_eq!(md["scopes_supported"], json!(["mcp:read", "mcp:call"]));
    let (st, oidc) = get_json(&c, &format!("{base}/.well-known/openid-configuration")).await;
    assert_eq!(st, 200);
    assert_eq!(oidc["token_endpoint"], format!("{base}/token"));
    let (_, prm) = get_json(&c, &srv.prm_url()).await;
    assert_eq!(prm["scopes_supported"], json!(["mcp:read"]));
    // Not advertised, not served.
    let r = c.post(srv.register_url()).body("{}").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 404);
}

#[tokio::test]
async fn separate_authorization_server_with_issuer_path() {
    let srv = OAuthServer::start(OAuthOptions {
        separate_as: true,
        issuer_path: Some("/tenant-a".into()),
        discovery: Discovery::OpenId,
        ..Default::default()
    });
    let c = client();
    assert_ne!(srv.base(), srv.as_base());
    assert_eq!(srv.issuer(), format!("{}/tenant-a", srv.as_base()));
    let (_, prm) = get_json(&c, &srv.prm_url()).await;
    assert_eq!(prm["authorization_servers"], json!([srv.issuer()]));
    // Path insertion (RFC 8414 form is off), then path appending.
    let ins = format!(
        "{}/.well-known/openid-configuration/tenant-a",
        srv.as_base()
    );
    let app = format!(
        "{}/tenant-a/.well-known/openid-configuration",
        srv.as_base()
    );
    for u in [&ins, &app] {
        let (st, md) = get_json(&c, u).await;
        assert_eq!(st, 200, "{u}");
        assert_eq!(md["issuer"], srv.issuer());
    }
    let (st, _) = get_json(&c, &srv.metadata_url()).await;
    assert_eq!(st, 404, "RFC 8414 form served though discovery is OpenId");
    // Each role only on its own port.
    let (st, _) = get_json(
        &c,
        &format!("{}/.well-known/openid-configuration/tenant-a", srv.base()),
    )
    .await;
    assert_eq!(st, 404);
    let r = c
        .post(format!("{}/mcp", srv.as_base()))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    let ports: Vec<u16> = srv.requests().iter().map(|r| r.port).collect();
    assert!(ports.windows(2).any(|w| w[0] != w[1]), "{}", srv.summary());
}

#[tokio::test]
async fn full_authorization_code_flow_with_pkce() {
    let srv = OAuthServer::start(OAuthOptions::default());
    let c = client();
    let client_id = register_public(&c, &srv).await;
    assert_eq!(srv.registrations().len(), 1);
    assert_eq!(srv.registrations()[0]["redirect_uris"], json!([REDIRECT]));

    let (verifier, challenge) = pkce();
    let r = Authz::new(&srv, &client_id, &challenge, "xyz-state")
        .set("scope", "mcp:read")
        .send(&c, &srv)
        .await;
    let p = redirect_params(&r);
    assert_eq!(p["state"], "xyz-state");
    assert!(!p.contains_key("iss"), "iss without the option: {p:?}");
    let code = p["code"].clone();
    let a = &srv.authorize_requests()[0];
    assert_eq!(a.param("code_challenge"), Some(challenge.as_str()));
    assert_eq!(a.outcome, "redirected");

    let t = token(
        &c,
        &srv,
        &[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("redirect_uri", REDIRECT),
            ("code_verifier", &verifier),
            ("client_id", &client_id),
            ("resource", &srv.resource()),
        ],
        None,
    )
    .await;
    assert_eq!(t.status, 200, "{}", t.body);
    assert_eq!(t.body["token_type"], "Bearer");
    assert_eq!(t.body["expires_in"], 3600);
    assert_eq!(t.body["scope"], "mcp:read");
    let at = t.access();
    t.refresh();
    let rec = &srv.token_requests()[0];
    assert!(rec.ok());
    assert_eq!(rec.auth_method, "none");
    assert_eq!(rec.client_id.as_deref(), Some(client_id.as_str()));

    let init = mcp(
        &c,
        &srv,
        Some(&at),
        call(
            1,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}),
        ),
    )
    .await;
    assert_eq!(init.status, 200);
    assert_eq!(init.body["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(init.body["result"]["capabilities"], json!({"tools": {}}));
    let n = mcp(
        &c,
        &srv,
        Some(&at),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(n.status, 202);
    let list = mcp(&c, &srv, Some(&at), call(2, "tools/list", json!({}))).await;
    assert_eq!(list.body["result"]["tools"][0]["name"], "whoami");
    let who = mcp(&c, &srv, Some(&at), whoami()).await;
    let text = who.body["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(text.contains("subject=alice"), "{text}");
    assert!(text.contains(&format!("client={client_id}")), "{text}");
    let disc = mcp(&c, &srv, Some(&at), call(3, "server/discover", json!({}))).await;
    assert_eq!(disc.body["error"]["code"], -32601);
    let other = mcp(&c, &srv, Some(&at), call(4, "resources/list", json!({}))).await;
    assert_eq!(other.body["error"]["code"], -32601);
    let v = mcp(
        &c,
        &srv,
        Some(&at),
        call(5, "initialize", json!({"protocolVersion": "1999-01-01"})),
    )
    .await;
    assert_eq!(v.body["result"]["protocolVersion"], "2025-11-25");
    assert!(
        srv.mcp_requests()
            .iter()
            .all(|r| r.had_auth() && r.status < 300)
    );

    // A code is good once; the second try also revokes what the first got.
    let again = token(
        &c,
        &srv,
        &[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("redirect_uri", REDIRECT),
            ("code_verifier", &verifier),
            ("client_id", &client_id),
        ],
        None,
    )
    .await;
    assert_eq!((again.status, again.error()), (400, "invalid_grant"));
    assert_eq!(mcp(&c, &srv, Some(&at), whoami()).await.status, 401);
    assert_eq!(srv.revocations()[0].reason, RevokeReason::CodeReuse);
}

#[tokio::test]
async fn wrong_verifier_or_redirect_is_refused() {
    let srv = OAuthServer::start(OAuthOptions::default());
    let c = client();
    let client_id = register_public(&c, &srv).await;
    let (verifier, challenge) = pkce();
    let p = redirect_params(
        &Authz::new(&srv, &client_id, &challenge, "s")
            .send(&c, &srv)
            .await,
    );
    let redeem = |verifier: String, redirect: &'static str| {
        let (c, srv, code, client_id) = (&c, &srv, p["code"].clone(), client_id.clone());
        async move {
            token(
                c,
                srv,
                &[
                    ("grant_type", "authorization_code"),
                    ("code", &code),
                    ("redirect_uri", redirect),
                    ("code_verifier", &verifier),
                    ("client_id", &client_id),
                ],
                None,
            )
            .await
        }
    };
    let (other, _) = pkce();
    let t = redeem(other, REDIRECT).await;
    assert_eq!((t.status, t.error()), (400, "invalid_grant"), "{}", t.body);
    assert!(
        t.body["error_description"]
            .as_str()
            .unwrap()
            .contains("PKCE")
    );
    let t = redeem(verifier.clone(), "http://127.0.0.1:49152/other").await;
    assert_eq!((t.status, t.error()), (400, "invalid_grant"), "{}", t.body);
    // Neither spent the code: the right verifier still works.
    let t = redeem(verifier, REDIRECT).await;
    assert_eq!(t.status, 200, "{}", t.body);
}

#[tokio::test]
async fn state_is_echoed_and_the_modes_change_the_redirect() {
    let srv = OAuthServer::start(OAuthOptions {
        iss_parameter: true,
        ..Default::default()
    });
    let c = client();
    let client_id = register_public(&c, &srv).await;
    let (_, challenge) = pkce();
    let a = Authz::new(&srv, &client_id, &challenge, "my-state");

    let p = redirect_params(&a.send(&c, &srv).await);
    assert_eq!(p["state"], "my-state");
    assert_eq!(p["iss"], srv.issuer());

    srv.set(|o| o.authorize = AuthorizeMode::WrongState);
    let p = redirect_params(&a.send(&c, &srv).await);
    assert_ne!(p["state"], "my-state");
    assert!(p.contains_key("code"));

    srv.set(|o| o.authorize = AuthorizeMode::WrongIss);
    let p = redirect_params(&a.send(&c, &srv).await);
    assert_eq!(p["state"], "my-state");
    assert_eq!(p["iss"], WRONG_ISS);

    srv.set(|o| o.authorize = AuthorizeMode::Deny);
    let p = redirect_params(&a.send(&c, &srv).await);
    assert_eq!(p["error"], "access_denied");
    assert_eq!(p["state"], "my-state");
    assert!(!p.contains_key("code"));

    srv.set(|o| o.authorize = AuthorizeMode::NoRedirect);
    let r = a.send(&c, &srv).await;
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.headers().get("location").is_none());
    assert!(r.text().await.unwrap().contains("<h1>"));
    let outcomes: Vec<String> = srv
        .authorize_requests()
        .into_iter()
        .map(|a| a.outcome)
        .collect();
    assert_eq!(
        outcomes,
        [
            "redirected",
            "redirected",
            "redirected",
            "denied",
            "no-redirect"
        ]
    );
}

#[tokio::test]
async fn authorize_refuses_invalid_requests_with_400() {
    let srv = OAuthServer::start(OAuthOptions::default());
    let c = client();
    let client_id = register_public(&c, &srv).await;
    let (_, challenge) = pkce();
    let good = || Authz::new(&srv, &client_id, &challenge, "s");
    let cases: Vec<(&str, Authz)> = vec![
        ("response_type", good().set("response_type", "token")),
        ("unknown client_id", good().set("client_id", "nobody")),
        ("redirect_uri missing", good().without("redirect_uri")),
        (
            "not a loopback",
            good().set("redirect_uri", "https://evil.example/cb"),
        ),
        (
            "not registered",
            good().set("redirect_uri", "http://127.0.0.1:5000/elsewhere"),
        ),
        ("code_challenge missing", good().without("code_challenge")),
        (
            "plain not allowed",
            good().set("code_challenge_method", "plain"),
        ),
        ("state missing", good().without("state")),
        ("resource missing", good().without("resource")),
        (
            "wrong resource",
            good().set("resource", "http://127.0.0.1:1/mcp"),
        ),
    ];
    for (what, a) in &cases {
        let r = a.send(&c, &srv).await;
        assert_eq!(r.status().as_u16(), 400, "{what}: accepted");
        let text = r.text().await.unwrap();
        assert!(!text.is_empty(), "{what}: no explanation");
    }
    assert_eq!(srv.authorize_requests().len(), cases.len());
    assert!(srv.authorize_requests().iter().all(|a| a.status == 400));
    // Another loopback port for the registered path is fine (RFC 8252 7.3).
    let r = good()
        .set("redirect_uri", "http://127.0.0.1:61000/callback")
        .send(&c, &srv)
        .await;
    assert_eq!(r.status().as_u16(), 302);
    // And the valid one goes through: the cases failed for their reason.
    assert_eq!(good().send(&c, &srv).await.status().as_u16(), 302);
}

#[tokio::test]
async fn prm_resource_override_is_enforced() {
    let custom = "https://mcp.example.com/v1";
    let srv = OAuthServer::start(OAuthOptions {
        prm_resource: Some(custom.into()),
        ..Default::default()
    });
    let c = client();
    let (_, prm) = get_json(&c, &srv.prm_url()).await;
    assert_eq!(prm["resource"], custom);
    let client_id = register_public(&c, &srv).await;
    let (verifier, challenge) = pkce();
    let a = Authz::new(&srv, &client_id, &challenge, "s");
    let r = a.set("resource", &srv.mcp_url()).send(&c, &srv).await;
    assert_eq!(
        r.status().as_u16(),
        400,
        "the MCP URL is not the resource any more"
    );
    let a = Authz::new(&srv, &client_id, &challenge, "s").set("resource", custom);
    let p = redirect_params(&a.send(&c, &srv).await);
    let t = token(
        &c,
        &srv,
        &[
            ("grant_type", "authorization_code"),
            ("code", &p["code"]),
            ("redirect_uri", REDIRECT),
            ("code_verifier", &verifier),
            ("client_id", &client_id),
            ("resource", custom),
        ],
        None,
    )
    .await;
    assert_eq!(t.status, 200, "{}", t.body);
    assert_eq!(srv.token_requests()[0].resource.as_deref(), Some(custom));
    assert_eq!(mcp(&c, &srv, Some(&t.access()), whoami()).await.status, 200);
    // Tokens are bound to the resource they were issued for.
    srv.set(|o| o.prm_resource = Some("https://mcp.example.com/v2".into()));
    assert_eq!(mcp(&c, &srv, Some(&t.access()), whoami()).await.status, 401);
}

#[tokio::test]
async fn refresh_rotates_the_refresh_token() {
    let srv = OAuthServer::start(OAuthOptions::default());
    let c = client();
    let (client_id, t0) = login(&c, &srv, Some("mcp:read")).await;
    let t1 = refresh(&c, &srv, &client_id, &t0.refresh()).await;
    assert_eq!(t1.status, 200, "{}", t1.body);
    assert_ne!(t1.refresh(), t0.refresh());
    assert_ne!(t1.access(), t0.access());
    assert_eq!(t1.body["scope"], "mcp:read");
    let t2 = refresh(&c, &srv, &client_id, &t1.refresh()).await;
    assert_eq!(t2.status, 200, "{}", t2.body);
    assert_eq!(srv.refreshes(), 2);
    assert!(!srv.family_revoked());
    assert_eq!(
        mcp(&c, &srv, Some(&t2.access()), whoami()).await.status,
        200
    );
    let recs = srv.token_requests();
    assert_eq!(
        recs[1].refresh_token.as_deref(),
        Some(t0.refresh().as_str())
    );
    assert_eq!(recs[1].family, recs[0].family);
    // Narrowing is allowed, widening is not.
    let wide = token(
        &c,
        &srv,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", &t2.refresh()),
            ("client_id", &client_id),
            ("scope", "mcp:read mcp:admin"),
        ],
        None,
    )
    .await;
    assert_eq!((wide.status, wide.error()), (400, "invalid_scope"));
    // Without rotation: no new refresh token, the old one keeps working.
    srv.set(|o| o.rotate_refresh = false);
    let t3 = refresh(&c, &srv, &client_id, &t2.refresh()).await;
    assert_eq!(t3.status, 200);
    assert!(t3.body.get("refresh_token").is_none());
    assert_eq!(
        refresh(&c, &srv, &client_id, &t2.refresh()).await.status,
        200
    );
    assert!(!srv.family_revoked());
}

#[tokio::test]
async fn reusing_a_rotated_refresh_token_revokes_the_family() {
    let srv = OAuthServer::start(OAuthOptions::default());
    let c = client();
    let (client_id, t0) = login(&c, &srv, None).await;
    // An unrelated grant of the same client must survive.
    let (_, other) = login(&c, &srv, None).await;
    let t1 = refresh(&c, &srv, &client_id, &t0.refresh()).await;
    assert_eq!(t1.status, 200);
    let newest = t1.access();
    assert_eq!(mcp(&c, &srv, Some(&newest), whoami()).await.status, 200);

    let reuse = refresh(&c, &srv, &client_id, &t0.refresh()).await;
    assert_eq!(
        (reuse.status, reuse.error()),
        (400, "invalid_grant"),
        "{}",
        reuse.body
    );
    assert!(srv.family_revoked());
    assert_eq!(srv.revocations()[0].reason, RevokeReason::RefreshReuse);

    let m = mcp(&c, &srv, Some(&newest), whoami()).await;
    assert_eq!(m.status, 401);
    assert!(
        m.www_authenticate
            .unwrap()
            .contains(r#"error="invalid_token""#)
    );
    let t2 = refresh(&c, &srv, &client_id, &t1.refresh()).await;
    assert_eq!(
        (t2.status, t2.error()),
        (400, "invalid_grant"),
        "newest refresh token survived"
    );
    assert_eq!(
        mcp(&c, &srv, Some(&other.access()), whoami()).await.status,
        200
    );
    assert_eq!(srv.refreshes(), 1);
}

#[tokio::test]
async fn access_ttl_expires_tokens_and_refresh_renews_them() {
    let srv = OAuthServer::start(OAuthOptions {
        access_ttl: Duration::from_secs(1),
        ..Default::default()
    });
    let c = client();
    let (client_id, t0) = login(&c, &srv, None).await;
    assert_eq!(t0.body["expires_in"], 1);
    assert_eq!(
        mcp(&c, &srv, Some(&t0.access()), whoami()).await.status,
        200
    );
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let m = mcp(&c, &srv, Some(&t0.access()), whoami()).await;
    assert_eq!(m.status, 401);
    assert!(
        m.www_authenticate
            .unwrap()
            .contains(r#"error="invalid_token""#)
    );
    let t1 = refresh(&c, &srv, &client_id, &t0.refresh()).await;
    assert_eq!(
        mcp(&c, &srv, Some(&t1.access()), whoami()).await.status,
        200
    );
    // expire_access_tokens does the same without waiting.
    srv.expire_access_tokens();
    assert_eq!(
        mcp(&c, &srv, Some(&t1.access()), whoami()).await.status,
        401
    );
}

#[tokio::test]
async fn challenges_carry_the_right_www_authenticate() {
    let srv = OAuthServer::start(OAuthOptions::default());
    let c = client();
    let prm = srv.prm_url();

    let m = mcp(&c, &srv, None, call(1, "initialize", json!({}))).await;
    assert_eq!(m.status, 401);
    assert_eq!(
        m.www_authenticate.as_deref(),
        Some(format!(r#"Bearer resource_metadata="{prm}""#).as_str())
    );
    let m = mcp(
        &c,
        &srv,
        Some("at_made_up"),
        call(1, "initialize", json!({})),
    )
    .await;
    assert_eq!(m.status, 401);
    assert_eq!(
        m.www_authenticate.as_deref(),
        Some(format!(r#"Bearer resource_metadata="{prm}", error="invalid_token""#).as_str())
    );
    srv.set(|o| o.challenge_scope = Some("mcp:read mcp:call".into()));
    let m = mcp(&c, &srv, None, call(1, "initialize", json!({}))).await;
    assert_eq!(
        m.www_authenticate.as_deref(),
        Some(format!(r#"Bearer resource_metadata="{prm}", scope="mcp:read mcp:call""#).as_str())
    );
    let recorded = srv.mcp_requests();
    assert_eq!(recorded.len(), 3);
    assert!(!recorded[0].had_auth() && recorded[1].had_auth());
    assert!(recorded.iter().all(|r| r.status == 401));
}

#[tokio::test]
async fn insufficient_scope_for_tools_call_gets_403() {
    let srv = OAuthServer::start(OAuthOptions {
        call_scopes: vec!["mcp:call".into()],
        ..Default::default()
    });
    let c = client();
    let (_, narrow) = login(&c, &srv, Some("mcp:read")).await;
    let at = narrow.access();
    assert_eq!(
        mcp(&c, &srv, Some(&at), call(1, "tools/list", json!({})))
            .await
            .status,
        200
    );
    let m = mcp(&c, &srv, Some(&at), whoami()).await;
    assert_eq!(m.status, 403);
    assert_eq!(
        m.www_authenticate.as_deref(),
        Some(
            format!(
                r#"Bearer error="insufficient_scope", scope="mcp:call", resource_metadata="{}""#,
                srv.prm_url()
            )
            .as_str()
        )
    );
    let (_, wide) = login(&c, &srv, Some("mcp:read mcp:call")).await;
    let m = mcp(&c, &srv, Some(&wide.access()), whoami()).await;
    assert_eq!(m.status, 200, "{}", m.body);
}

#[tokio::test]
async fn client_credentials_with_client_secret_basic() {
    let srv = OAuthServer::start(OAuthOptions::default());
    let c = client();
    // Characters that must be form-urlencoded inside Basic (RFC 6749 2.3.1).
    let (id, secret) = ("svc:one", "s3cr+t/=&%:x");
    srv.preregister(id, Some(secret), "client_secret_basic");
    let cc = [("grant_type", "client_credentials"), ("scope", "mcp:call")];

    let t = token(&c, &srv, &cc, Some(basic(id, secret))).await;
    assert_eq!(t.status, 200, "{}", t.body);
    assert_eq!(t.body["scope"], "mcp:call");
    assert!(t.body.get("refresh_token").is_none());
    let who = mcp(&c, &srv, Some(&t.access()), whoami()).await;
    assert!(
        who.body.to_string().contains("subject=svc:one"),
        "{}",
        who.body
    );
    assert_eq!(srv.token_requests()[0].auth_method, "client_secret_basic");

    // Unencoded credentials, a wrong secret: invalid_client with a Basic challenge.
    use base64::Engine as _;
    let raw = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{id}:{secret}"))
    );
    for auth in [raw, basic(id, "nope")] {
        let t = token(&c, &srv, &cc, Some(auth)).await;
        assert_eq!((t.status, t.error()), (401, "invalid_client"), "{}", t.body);
        assert!(t.www_authenticate.unwrap().starts_with("Basic"));
    }
    // The right secret by the wrong method.
    let mut post = cc.to_vec();
    post.extend([("client_id", id), ("client_secret", secret)]);
    let t = token(&c, &srv, &post, None).await;
    assert_eq!((t.status, t.error()), (401, "invalid_client"), "{}", t.body);
    // Both methods at once.
    let t = token(&c, &srv, &post, Some(basic(id, secret))).await;
    assert_eq!((t.status, t.error()), (400, "invalid_request"));
    // A client_secret_post client.
    srv.preregister("poster", Some("pw"), "client_secret_post");
    let mut post = cc.to_vec();
    post.extend([("client_id", "poster"), ("client_secret", "pw")]);
    let t = token(&c, &srv, &post, None).await;
    assert_eq!(t.status, 200, "{}", t.body);
    assert_eq!(
        srv.token_requests().last().unwrap().auth_method,
        "client_secret_post"
    );
    // A public client cannot use client_credentials.
    srv.preregister("public", None, "none");
    let mut post = cc.to_vec();
    post.push(("client_id", "public"));
    let t = token(&c, &srv, &post, None).await;
    assert_eq!((t.status, t.error()), (400, "unauthorized_client"));
}

#[tokio::test]
async fn client_credentials_with_private_key_jwt() {
    let srv = OAuthServer::start(OAuthOptions::default());
    let c = client();
    srv.preregister_jwt("ec-client", JwtAlg::ES256, ES256_PUBLIC_PEM);
    srv.preregister_jwt("rsa-client", JwtAlg::RS256, RS256_PUBLIC_PEM);
    let send = |assertion: String| {
        let (c, srv) = (&c, &srv);
        async move {
            token(
                c,
                srv,
                &[
                    ("grant_type", "client_credentials"),
                    ("client_assertion_type", JWT_BEARER),
                    ("client_assertion", &assertion),
                    ("resource", &srv.resource()),
                ],
                None,
            )
            .await
        }
    };
    let tok = srv.token_url();
    let iss = srv.issuer();

    let t = send(sign_client_assertion(
        "ec-client",
        &tok,
        JwtAlg::ES256,
        ES256_PRIVATE_PEM,
        60,
    ))
    .await;
    assert_eq!(t.status, 200, "{}", t.body);
    let who = mcp(&c, &srv, Some(&t.access()), whoami()).await;
    assert!(
        who.body.to_string().contains("client=ec-client"),
        "{}",
        who.body
    );
    // The issuer is an acceptable audience too.
    let t = send(sign_client_assertion(
        "rsa-client",
        &iss,
        JwtAlg::RS256,
        RS256_PRIVATE_PEM,
        60,
    ))
    .await;
    assert_eq!(t.status, 200, "{}", t.body);
    assert_eq!(srv.token_requests()[1].auth_method, "private_key_jwt");

    let now = jsonwebtoken::get_current_timestamp();
    let claims = |aud: &str, exp: u64, jti: Option<&str>| {
        let mut v = json!({"iss": "ec-client", "sub": "ec-client", "aud": aud, "exp": exp});
        if let Some(j) = jti {
            v["jti"] = json!(j);
        }
        v
    };
    let replayed = sign_claims(
        JwtAlg::ES256,
        ES256_PRIVATE_PEM,
        &claims(&tok, now + 60, Some("once")),
    );
    assert_eq!(send(replayed.clone()).await.status, 200);
    let bad: Vec<(&str, String)> = vec![
        (
            "unregistered key",
            sign_client_assertion(
                "ec-client",
                &tok,
                JwtAlg::ES256,
                ES256_OTHER_PRIVATE_PEM,
                60,
            ),
        ),
        (
            "expired",
            sign_client_assertion("ec-client", &tok, JwtAlg::ES256, ES256_PRIVATE_PEM, -120),
        ),
        (
            "wrong audience",
            sign_client_assertion(
                "ec-client",
                "https://other.example/token",
                JwtAlg::ES256,
                ES256_PRIVATE_PEM,
                60,
            ),
        ),
        (
            "RS256 for an ES256 client",
            sign_client_assertion("ec-client", &tok, JwtAlg::RS256, RS256_PRIVATE_PEM, 60),
        ),
        (
            "no jti",
            sign_claims(
                JwtAlg::ES256,
                ES256_PRIVATE_PEM,
                &claims(&tok, now + 60, None),
            ),
        ),
        ("jti replayed", replayed),
        (
            "unknown client",
            sign_client_assertion("nobody", &tok, JwtAlg::ES256, ES256_PRIVATE_PEM, 60),
        ),
    ];
    for (what, a) in bad {
        let t = send(a).await;
        assert_eq!(
            (t.status, t.error()),
            (401, "invalid_client"),
            "{what}: {}",
            t.body
        );
    }
    // The wrong assertion type.
    let a = sign_client_assertion("ec-client", &tok, JwtAlg::ES256, ES256_PRIVATE_PEM, 60);
    let t = token(
        &c,
        &srv,
        &[
            ("grant_type", "client_credentials"),
            ("client_assertion_type", "urn:other"),
            ("client_assertion", &a),
        ],
        None,
    )
    .await;
    assert_eq!((t.status, t.error()), (401, "invalid_client"));
}

#[tokio::test]
async fn issue_tokens_for_test_mints_a_working_family() {
    let srv = OAuthServer::start(OAuthOptions::default());
    let c = client();
    let m = srv.issue_tokens_for_test("seeded", Some("mcp:read"));
    assert!(srv.access_token_valid(&m.access_token));
    let who = mcp(&c, &srv, Some(&m.access_token), whoami()).await;
    assert!(
        who.body.to_string().contains("client=seeded"),
        "{}",
        who.body
    );
    let t = refresh(&c, &srv, "seeded", &m.refresh_token).await;
    assert_eq!(t.status, 200, "{}", t.body);
    assert_eq!(srv.token_requests()[0].family, Some(m.family));
    srv.revoke_all();
    assert!(!srv.access_token_valid(&t.access()));
    assert!(!srv.family_revoked(), "revoke_all is not reuse");
}

#[tokio::test]
async fn token_delay_and_injected_failures() {
    let srv = OAuthServer::start(OAuthOptions {
        token_delay: Duration::from_millis(400),
        ..Default::default()
    });
    let c = client();
    let m = srv.issue_tokens_for_test("slow", None);
    let start = Instant::now();
    let t = refresh(&c, &srv, "slow", &m.refresh_token).await;
    assert!(start.elapsed() >= Duration::from_millis(400));
    assert_eq!(t.status, 200);
    // Decided before the delay: a client that gave up has spent its token.
    let m2 = srv.issue_tokens_for_test("slow", None);
    let quick = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let r = quick
        .post(srv.token_url())
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", &m2.refresh_token),
            ("client_id", "slow"),
        ]))
        .send()
        .await;
    assert!(r.is_err(), "the client should have timed out");
    let retry = refresh(&c, &srv, "slow", &m2.refresh_token).await;
    assert_eq!((retry.status, retry.error()), (400, "invalid_grant"));
    assert!(srv.family_revoked());

    srv.set(|o| {
        o.token_delay = Duration::ZERO;
        o.token_fail = Some(TokenFail {
            status: 503,
            error: "temporarily_unavailable".into(),
            remaining: 1,
        });
    });
    let m3 = srv.issue_tokens_for_test("slow", None);
    let t = refresh(&c, &srv, "slow", &m3.refresh_token).await;
    assert_eq!((t.status, t.error()), (503, "temporarily_unavailable"));
    assert_eq!(
        refresh(&c, &srv, "slow", &m3.refresh_token).await.status,
        200
    );
}

#[tokio::test]
async fn token_endpoint_wants_a_form() {
    let srv = OAuthServer::start(OAuthOptions::default());
    let c = client();
    let m = srv.issue_tokens_for_test("f", None);
    let r = c
        .post(srv.token_url())
        .header("content-type", "application/json")
        .body(json!({"grant_type": "refresh_token", "refresh_token": m.refresh_token, "client_id": "f"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(v["error"], "invalid_request");
    let t = token(
        &c,
        &srv,
        &[("grant_type", "password"), ("client_id", "f")],
        None,
    )
    .await;
    assert_eq!((t.status, t.error()), (400, "unsupported_grant_type"));
    // Still unspent.
    assert_eq!(refresh(&c, &srv, "f", &m.refresh_token).await.status, 200);
}
