//! The token endpoint: code redemption, refresh, client credentials, with
//! the client authentication the server and registration call for
//! (`client_secret_basic`, `client_secret_post`, `none`, `private_key_jwt`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use serde::Deserialize;
use tracing::debug;
use url::Url;

use super::AuthError;
use super::store::Tokens;
use mcphost_config::Secret;

const TOKEN_BYTES: usize = 64 * 1024;

/// How we prove who we are at the token endpoint.
#[derive(Clone)]
pub enum ClientAuth {
    /// A public client: `client_id` in the body.
    None {
        client_id: String,
    },
    Basic {
        client_id: String,
        secret: Secret,
    },
    Post {
        client_id: String,
        secret: Secret,
    },
    /// RFC 7523: a JWT signed with our key, audience the issuer.
    PrivateKeyJwt {
        client_id: String,
        key_pem: Secret,
        algorithm: String,
        audience: String,
    },
}

impl std::fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({})", self.method(), self.client_id())
    }
}

impl ClientAuth {
    pub fn client_id(&self) -> &str {
        match self {
            ClientAuth::None { client_id }
            | ClientAuth::Basic { client_id, .. }
            | ClientAuth::Post { client_id, .. }
            | ClientAuth::PrivateKeyJwt { client_id, .. } => client_id,
        }
    }

    pub fn method(&self) -> &'static str {
        match self {
            ClientAuth::None { .. } => "none",
            ClientAuth::Basic { .. } => "client_secret_basic",
            ClientAuth::Post { .. } => "client_secret_post",
            ClientAuth::PrivateKeyJwt { .. } => "private_key_jwt",
        }
    }

    /// Adds the credentials to a token request.
    fn apply(
        &self,
        req: reqwest::RequestBuilder,
        form: &mut Vec<(&'static str, String)>,
    ) -> Result<reqwest::RequestBuilder, AuthError> {
        Ok(match self {
            ClientAuth::None { client_id } => {
                form.push(("client_id", client_id.clone()));
                req
            }
            ClientAuth::Post { client_id, secret } => {
                form.push(("client_id", client_id.clone()));
                form.push(("client_secret", secret.expose().to_owned()));
                req
            }
            ClientAuth::Basic { client_id, secret } => {
                // RFC 6749 §2.3.1: each part form-urlencoded before base64.
                let enc = |s: &str| {
                    url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>()
                };
                let raw = format!("{}:{}", enc(client_id), enc(secret.expose()));
                let b64 = base64::engine::general_purpose::STANDARD.encode(raw);
                let mut v = reqwest::header::HeaderValue::from_str(&format!("Basic {b64}"))
                    .map_err(|_| {
                        AuthError::Client("the client credentials cannot go in a header".into())
                    })?;
                v.set_sensitive(true);
                req.header(reqwest::header::AUTHORIZATION, v)
            }
            ClientAuth::PrivateKeyJwt {
                client_id,
                key_pem,
                algorithm,
                audience,
            } => {
                form.push(("client_id", client_id.clone()));
                form.push((
                    "client_assertion_type",
                    "urn:ietf:params:oauth:client-assertion-type:jwt-bearer".into(),
                ));
                form.push((
                    "client_assertion",
                    assertion(client_id, key_pem.expose(), algorithm, audience)?,
                ));
                req
            }
        })
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A client assertion (RFC 7523 §3): iss = sub = our client id, aud the
/// authorization server, valid for five minutes, never reused.
fn assertion(
    client_id: &str,
    key_pem: &str,
    algorithm: &str,
    audience: &str,
) -> Result<String, AuthError> {
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    let alg: Algorithm = algorithm.parse().map_err(|_| {
        AuthError::Client(format!(
            "signing_algorithm {algorithm:?} is not a JWS algorithm"
        ))
    })?;
    let bad_key = |e: jsonwebtoken::errors::Error| {
        AuthError::Client(format!(
            "private_key_pem is not a {algorithm} private key: {e}"
        ))
    };
    let key = match alg {
        Algorithm::ES256 | Algorithm::ES384 => {
            EncodingKey::from_ec_pem(key_pem.as_bytes()).map_err(bad_key)?
        }
        Algorithm::EdDSA => EncodingKey::from_ed_pem(key_pem.as_bytes()).map_err(bad_key)?,
        Algorithm::RS256
        | Algorithm::RS384
        | Algorithm::RS512
        | Algorithm::PS256
        | Algorithm::PS384
        | Algorithm::PS512 => EncodingKey::from_rsa_pem(key_pem.as_bytes()).map_err(bad_key)?,
        _ => {
            return Err(AuthError::Client(format!(
                "signing_algorithm {algorithm}: use an asymmetric one (ES256, RS256, EdDSA)"
            )));
        }
    };
    let now = now_secs();
    let mut jti = [0u8; 16];
    getrandom::fill(&mut jti).map_err(|e| AuthError::Client(format!("no randomness: {e}")))?;
    let claims = serde_json::json!({
        "iss": client_id,
        "sub": client_id,
        "aud": audience,
        "iat": now,
        "exp": now.saturating_add(300),
        "jti": base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(jti),
    });
    jsonwebtoken::encode(&Header::new(alg), &claims, &key)
        .map_err(|e| AuthError::Client(format!("cannot sign the client assertion: {e}")))
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    token_type: Option<String>,
    #[serde(default)]
    expires_in: Option<serde_json::Value>,
    #[serde(default)]
    refresh_token: Option<String>,
    #[serde(default)]
    scope: Option<String>,
}

#[derive(Deserialize)]
struct ErrorResponse {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

/// What a token request asks for.
pub enum Grant<'a> {
    Code {
        code: &'a str,
        redirect_uri: &'a str,
        verifier: &'a str,
    },
    Refresh {
        refresh_token: &'a str,
    },
    ClientCredentials,
    /// RFC 7523 §2.1: an assertion (an ID-JAG from the enterprise IdP).
    JwtBearer {
        assertion: &'a str,
    },
}

pub use mcphost_config::oauth::JWT_BEARER;
const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ID_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:id_token";
const ID_JAG_TYPE: &str = "urn:ietf:params:oauth:token-type:id-jag";

/// Enterprise-managed authorization (SEP-990): the user's ID token from the
/// enterprise IdP, exchanged there (RFC 8693) for an identity assertion
/// grant (ID-JAG) addressed to the MCP server's authorization server.
pub struct IdpExchange<'a> {
    pub token_endpoint: &'a Url,
    pub id_token: &'a str,
    pub client_id: Option<&'a str>,
    pub client_secret: Option<&'a str>,
}

pub async fn exchange_for_id_jag(
    http: &reqwest::Client,
    idp: &IdpExchange<'_>,
    audience: &str,
    resource: &str,
    scope: Option<&str>,
    timeout: Duration,
) -> Result<String, AuthError> {
    let mut form: Vec<(&'static str, String)> = vec![
        ("grant_type", TOKEN_EXCHANGE.into()),
        ("requested_token_type", ID_JAG_TYPE.into()),
        ("subject_token", idp.id_token.into()),
        ("subject_token_type", ID_TOKEN_TYPE.into()),
        ("audience", audience.into()),
        ("resource", resource.into()),
    ];
    if let Some(s) = scope.filter(|s| !s.is_empty()) {
        form.push(("scope", s.into()));
    }
    let req = http
        .post(idp.token_endpoint.clone())
        .header(reqwest::header::ACCEPT, "application/json")
        .timeout(timeout);
    let req = match (idp.client_id, idp.client_secret) {
        (Some(id), Some(secret)) => ClientAuth::Basic {
            client_id: id.into(),
            secret: secret.into(),
        }
        .apply(req, &mut form)?,
        (Some(id), None) => ClientAuth::None {
            client_id: id.into(),
        }
        .apply(req, &mut form)?,
        _ => req,
    };
    let url = idp.token_endpoint;
    let resp = req.form(&form).send().await.map_err(|e| AuthError::Http {
        url: url.to_string(),
        reason: mcphost_transport::http::error_chain(&e),
    })?;
    let status = resp.status();
    let body = super::discovery::read_body(resp, TOKEN_BYTES, url).await?;
    let fail = |reason: String| AuthError::Token {
        grant: "token-exchange",
        url: url.to_string(),
        reason,
        invalid_grant: false,
    };
    if !status.is_success() {
        return Err(fail(match serde_json::from_str::<ErrorResponse>(&body) {
            Ok(e) => super::discovery::escape_controls(
                &e.error_description
                    .map_or(e.error.clone(), |d| format!("{}: {d}", e.error)),
            ),
            Err(_) => format!("HTTP {status}"),
        }));
    }
    #[derive(Deserialize)]
    struct Exchanged {
        access_token: String,
        #[serde(default)]
        issued_token_type: Option<String>,
    }
    let e: Exchanged = serde_json::from_str(&body)
        .map_err(|e| fail(format!("not a token exchange response: {e}")))?;
    if e.issued_token_type
        .as_deref()
        .is_some_and(|t| t != ID_JAG_TYPE)
    {
        return Err(fail(format!(
            "issued_token_type {:?}, not an ID-JAG",
            e.issued_token_type.unwrap_or_default()
        )));
    }
    Ok(e.access_token)
}

impl Grant<'_> {
    fn name(&self) -> &'static str {
        match self {
            Grant::Code { .. } => "authorization_code",
            Grant::Refresh { .. } => "refresh_token",
            Grant::ClientCredentials => "client_credentials",
            Grant::JwtBearer { .. } => JWT_BEARER,
        }
    }
}

/// The key a token request proves possession of (DPoP), and where the
/// servers' nonces are kept.
#[derive(Clone, Copy)]
pub struct Dpop<'a> {
    pub key: &'a super::dpop::DpopKey,
    pub nonces: &'a super::dpop::Nonces,
}

/// One token request. `resource` (RFC 8707) goes on every grant. With
/// `dpop`, it carries a proof and is sent once more with the server's nonce
/// if the server asks for one (`use_dpop_nonce`, RFC 9449 §8).
#[allow(clippy::too_many_arguments)]
pub async fn request(
    http: &reqwest::Client,
    endpoint: &Url,
    auth: &ClientAuth,
    grant: Grant<'_>,
    resource: &str,
    scope: Option<&str>,
    timeout: Duration,
    dpop: Option<Dpop<'_>>,
) -> Result<Tokens, AuthError> {
    let form = form_of(&grant, resource, scope);
    let mut nonce_tries = 0u8;
    let (status, body) = loop {
        let req = http
            .post(endpoint.clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .timeout(timeout);
        let mut form = form.clone();
        let mut req = auth.apply(req, &mut form)?;
        if let Some(d) = dpop {
            let nonce = d.nonces.get(endpoint);
            req = req.header(
                "DPoP",
                d.key.proof("POST", endpoint, None, nonce.as_deref())?,
            );
        }
        debug!(endpoint = %endpoint, grant = grant.name(), client_auth = auth.method(), dpop = dpop.is_some(), "token request");
        let resp = req.form(&form).send().await.map_err(|e| AuthError::Http {
            url: endpoint.to_string(),
            reason: mcphost_transport::http::error_chain(&e),
        })?;
        let status = resp.status();
        let new_nonce = super::dpop::nonce_header(resp.headers());
        let body = super::discovery::read_body(resp, TOKEN_BYTES, endpoint).await?;
        if let (Some(d), Some(n)) = (dpop, &new_nonce) {
            d.nonces.set(endpoint, n);
        }
        // Once: a server that wants yet another nonce gets the error.
        let wants_nonce = status == reqwest::StatusCode::BAD_REQUEST
            && new_nonce.is_some()
            && serde_json::from_str::<ErrorResponse>(&body)
                .is_ok_and(|e| e.error == "use_dpop_nonce");
        if dpop.is_some() && wants_nonce && nonce_tries == 0 {
            nonce_tries = 1;
            debug!(endpoint = %endpoint, "the token endpoint wants a DPoP nonce; sending it");
            continue;
        }
        break (status, body);
    };
    if !status.is_success() {
        return Err(token_error(&grant, endpoint, status, &body));
    }
    let t: TokenResponse = serde_json::from_str(&body).map_err(|e| AuthError::Token {
        grant: grant.name(),
        url: endpoint.to_string(),
        reason: format!("not a token response: {e}"),
        invalid_grant: false,
    })?;
    tokens_from(t, &grant, endpoint, scope, dpop.is_some())
}

/// The form of a token request, without the client's credentials.
fn form_of(grant: &Grant<'_>, resource: &str, scope: Option<&str>) -> Vec<(&'static str, String)> {
    let mut form: Vec<(&'static str, String)> = vec![("grant_type", grant.name().into())];
    match grant {
        Grant::Code {
            code,
            redirect_uri,
            verifier,
        } => {
            form.push(("code", (*code).into()));
            form.push(("redirect_uri", (*redirect_uri).into()));
            form.push(("code_verifier", (*verifier).into()));
        }
        Grant::Refresh { refresh_token } => form.push(("refresh_token", (*refresh_token).into())),
        Grant::ClientCredentials => {}
        Grant::JwtBearer { assertion } => form.push(("assertion", (*assertion).into())),
    }
    form.push(("resource", resource.into()));
    if let Some(s) = scope.filter(|s| !s.is_empty())
        && !matches!(grant, Grant::Code { .. })
    {
        form.push(("scope", s.into()));
    }
    form
}

/// A token endpoint's refusal: its OAuth error, else the status.
fn token_error(
    grant: &Grant<'_>,
    endpoint: &Url,
    status: reqwest::StatusCode,
    body: &str,
) -> AuthError {
    let reason = match serde_json::from_str::<ErrorResponse>(body) {
        Ok(e) => super::discovery::escape_controls(&match e.error_description {
            Some(d) => format!("{}: {d}", e.error),
            None => e.error,
        }),
        Err(_) => format!("HTTP {status}"),
    };
    AuthError::Token {
        grant: grant.name(),
        url: endpoint.to_string(),
        reason,
        invalid_grant: body.contains("\"invalid_grant\""),
    }
}

/// The tokens of a successful response; `dpop_asked` when the request
/// carried a DPoP proof (a DPoP token is taken only then).
fn tokens_from(
    t: TokenResponse,
    grant: &Grant<'_>,
    endpoint: &Url,
    scope: Option<&str>,
    dpop_asked: bool,
) -> Result<Tokens, AuthError> {
    let token_type = t.token_type.unwrap_or_else(|| "Bearer".into());
    let token_type = if token_type.eq_ignore_ascii_case("bearer") {
        "Bearer"
    } else if token_type.eq_ignore_ascii_case("dpop") && dpop_asked {
        "DPoP"
    } else {
        return Err(AuthError::Token {
            grant: grant.name(),
            url: endpoint.to_string(),
            reason: format!(
                "token_type {token_type:?}: only Bearer tokens, and DPoP tokens where we asked for one, are supported"
            ),
            invalid_grant: false,
        });
    };
    // Some servers send expires_in as a string.
    let expires_in = match t.expires_in {
        Some(serde_json::Value::Number(n)) => n.as_u64(),
        Some(serde_json::Value::String(s)) => s.parse().ok(),
        _ => None,
    };
    debug!(endpoint = %endpoint, grant = grant.name(), token_type, expires_in, refresh = t.refresh_token.is_some(), "token granted");
    Ok(Tokens {
        access_token: t.access_token.into(),
        token_type: token_type.into(),
        refresh_token: t.refresh_token.map(Secret::from),
        expires_at: expires_in.map(|s| now_secs().saturating_add(s)),
        scope: t.scope.or_else(|| scope.map(str::to_owned)),
    })
}

/// Whether a token is expired or about to be (within `margin`).
pub fn expiring(t: &Tokens, margin: Duration) -> bool {
    t.expires_at
        .is_some_and(|at| now_secs().saturating_add(margin.as_secs()) >= at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_auth_encodes_each_part_first() {
        let a = ClientAuth::Basic {
            client_id: "id:1".into(),
            secret: "s+/ é".into(),
        };
        let req = reqwest::Client::new().post("http://x/token");
        let req = a.apply(req, &mut Vec::new()).unwrap().build().unwrap();
        let h = req.headers()[reqwest::header::AUTHORIZATION]
            .to_str()
            .unwrap()
            .to_owned();
        let raw = base64::engine::general_purpose::STANDARD
            .decode(h.strip_prefix("Basic ").unwrap())
            .unwrap();
        assert_eq!(String::from_utf8(raw).unwrap(), "id%3A1:s%2B%2F+%C3%A9");
        assert!(req.headers()[reqwest::header::AUTHORIZATION].is_sensitive());
        assert!(!format!("{a:?}").contains("s+/"));
    }

    #[test]
    fn expiry_margin() {
        let mut t = Tokens::default();
        assert!(!expiring(&t, Duration::from_secs(60)));
        t.expires_at = Some(now_secs() + 30);
        assert!(expiring(&t, Duration::from_secs(60)));
        assert!(!expiring(&t, Duration::from_secs(5)));
    }
}
