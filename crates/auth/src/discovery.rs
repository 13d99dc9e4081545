//! Finding the authorization server of an MCP server: protected-resource
//! metadata (RFC 9728), then authorization-server metadata (RFC 8414, then
//! OpenID Connect discovery), with the 2025-03-26 fallbacks.

use serde::Deserialize;
use tracing::debug;
use url::Url;

use super::AuthError;

/// Limit for a metadata document.
const METADATA_BYTES: usize = 256 * 1024;

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ProtectedResource {
    #[serde(default)]
    pub resource: Option<String>,
    #[serde(default)]
    pub authorization_servers: Vec<String>,
    #[serde(default)]
    pub scopes_supported: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ServerMetadata {
    #[serde(default)]
    pub issuer: String,
    #[serde(default)]
    pub authorization_endpoint: Option<String>,
    #[serde(default)]
    pub token_endpoint: Option<String>,
    #[serde(default)]
    pub registration_endpoint: Option<String>,
    #[serde(default)]
    pub scopes_supported: Option<Vec<String>>,
    #[serde(default)]
    pub code_challenge_methods_supported: Option<Vec<String>>,
    #[serde(default)]
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
    #[serde(default)]
    pub grant_types_supported: Option<Vec<String>>,
    #[serde(default)]
    pub client_id_metadata_document_supported: bool,
    #[serde(default)]
    pub authorization_response_iss_parameter_supported: bool,
    /// RFC 9449 §5.1: the server issues DPoP-bound tokens.
    #[serde(default)]
    pub dpop_signing_alg_values_supported: Option<Vec<String>>,
}

impl ServerMetadata {
    pub fn supports_auth_method(&self, m: &str) -> bool {
        self.token_endpoint_auth_methods_supported
            .as_ref()
            .is_some_and(|v| v.iter().any(|x| x == m))
    }
}

/// The canonical URI of a resource (RFC 8707, MCP): lowercase scheme and
/// host (as `Url` keeps them), no fragment, no trailing slash on an empty
/// path.
pub fn canonical(url: &Url) -> String {
    let mut u = url.clone();
    u.set_fragment(None);
    let s = u.to_string();
    if u.path() == "/" && u.query().is_none() {
        s.trim_end_matches('/').to_owned()
    } else {
        s
    }
}

const PRM_WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// Whether the protected resource `declared` (the `resource` of the
/// metadata fetched from `prm_url`) is the server at `server` (RFC 9728
/// §3.3): its URL exactly, query included. The one other identifier taken
/// is the origin, from the origin's own root well-known document (that
/// document describes the origin, and the MCP spec's fallback reads it).
/// A parent path, another query or another origin is another resource,
/// and its tokens must not be ours.
pub fn resource_matches(declared: &str, prm_url: &Url, server: &Url) -> bool {
    let Ok(d) = Url::parse(declared) else {
        return false;
    };
    let d = canonical(&d);
    if d == canonical(server) {
        return true;
    }
    prm_url.origin() == server.origin()
        && prm_url.path() == PRM_WELL_KNOWN
        && server.join("/").is_ok_and(|o| d == canonical(&o))
}

pub use mcphost_protocol::escape_controls;

pub use mcphost_config::oauth::{is_loopback, is_secure};

/// A link-local or cloud metadata address (169.254.0.0/16 with AWS, GCP
/// and Azure's 169.254.169.254, fe80::/10, AWS's fd00:ec2::254, Alibaba's
/// 100.100.100.200, their well-known names), where a request from this
/// machine can read its cloud credentials.
pub fn is_metadata_address(url: &Url) -> bool {
    let v4 = |a: std::net::Ipv4Addr| {
        a.is_link_local() || a.is_unspecified() || a == std::net::Ipv4Addr::new(100, 100, 100, 200)
    };
    match url.host() {
        Some(url::Host::Ipv4(a)) => v4(a),
        Some(url::Host::Ipv6(a)) => {
            a.to_ipv4_mapped().is_some_and(v4)
                || a.is_unspecified()
                || (a.segments()[0] & 0xffc0) == 0xfe80
                || a == std::net::Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)
        }
        Some(url::Host::Domain(d)) => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            [
                "metadata.google.internal",
                "metadata.goog",
                "metadata",
                "instance-data",
                "instance-data.ec2.internal",
            ]
            .contains(&d.as_str())
        }
        None => false,
    }
}

/// Discovery and registration never go to a metadata address
/// ([`is_metadata_address`]) a server names, unless the MCP server itself
/// is on that host.
pub fn require_not_metadata(url: &Url, server: &Url, what: &str) -> Result<(), AuthError> {
    if is_metadata_address(url) && url.host() != server.host() {
        return Err(AuthError::MetadataAddress {
            what: what.to_owned(),
            url: escape_controls(url.as_str()),
        });
    }
    Ok(())
}

/// [`is_secure`], or the error naming `what` (the metadata field) and the URL.
pub fn require_secure(url: &Url, what: &str) -> Result<(), AuthError> {
    if is_secure(url) {
        Ok(())
    } else {
        Err(AuthError::Insecure {
            what: what.to_owned(),
            url: url.to_string(),
        })
    }
}

/// A URL string from metadata: parsed, then [`require_secure`].
pub fn secure_url(s: &str, what: &str) -> Result<Url, AuthError> {
    let u = Url::parse(s).map_err(|e| AuthError::Metadata {
        url: s.to_owned(),
        reason: format!("{what}: not a URL: {e}"),
    })?;
    require_secure(&u, what)?;
    Ok(u)
}

/// Where the protected-resource metadata may be: the challenge's URL, else
/// the path-inserted well-known URL, then the root one.
pub fn prm_candidates(server: &Url, from_challenge: Option<&str>) -> Vec<Url> {
    if let Some(u) = from_challenge.and_then(|u| server.join(u).ok()) {
        return vec![u];
    }
    let mut out = Vec::new();
    let path = server.path().trim_end_matches('/');
    if !path.is_empty()
        && let Ok(u) = server.join(&format!("{PRM_WELL_KNOWN}{path}"))
    {
        out.push(u);
    }
    if let Ok(u) = server.join(PRM_WELL_KNOWN) {
        out.push(u);
    }
    out
}

/// Where an issuer's metadata may be (MCP 2025-11-25): with a path,
/// OAuth path-inserted, OIDC path-inserted, OIDC path-appended; without,
/// OAuth then OIDC.
pub fn as_candidates(issuer: &Url) -> Vec<Url> {
    let path = issuer.path().trim_end_matches('/');
    let rel: Vec<String> = if path.is_empty() {
        vec![
            "/.well-known/oauth-authorization-server".into(),
            "/.well-known/openid-configuration".into(),
        ]
    } else {
        vec![
            format!("/.well-known/oauth-authorization-server{path}"),
            format!("/.well-known/openid-configuration{path}"),
            format!("{path}/.well-known/openid-configuration"),
        ]
    };
    rel.iter().filter_map(|r| issuer.join(r).ok()).collect()
}

/// Fetch a JSON document; `Ok(None)` when it is not there (4xx).
pub async fn fetch_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: &Url,
    protocol_version: Option<&str>,
) -> Result<Option<T>, AuthError> {
    let mut req = http
        .get(url.clone())
        .header(reqwest::header::ACCEPT, "application/json");
    if let Some(v) = protocol_version {
        req = req.header("MCP-Protocol-Version", v);
    }
    let resp = req.send().await.map_err(|e| AuthError::Http {
        url: url.to_string(),
        reason: mcphost_transport::http::error_chain(&e),
    })?;
    let status = resp.status();
    debug!(%url, %status, "metadata");
    if status.is_client_error() {
        return Ok(None);
    }
    if !status.is_success() {
        return Err(AuthError::Http {
            url: url.to_string(),
            reason: format!("HTTP {status}"),
        });
    }
    let body = read_body(resp, METADATA_BYTES, url).await?;
    serde_json::from_str(&body)
        .map(Some)
        .map_err(|e| AuthError::Metadata {
            url: url.to_string(),
            reason: format!("not the JSON document expected: {e}"),
        })
}

pub(super) async fn read_body(
    mut resp: reqwest::Response,
    limit: usize,
    url: &Url,
) -> Result<String, AuthError> {
    let mut buf = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(c)) => {
                if buf.len().saturating_add(c.len()) > limit {
                    return Err(AuthError::Metadata {
                        url: url.to_string(),
                        reason: format!("larger than {limit} bytes"),
                    });
                }
                buf.extend_from_slice(&c);
            }
            Ok(None) => break,
            Err(e) => {
                return Err(AuthError::Http {
                    url: url.to_string(),
                    reason: mcphost_transport::http::error_chain(&e),
                });
            }
        }
    }
    String::from_utf8(buf).map_err(|_| AuthError::Metadata {
        url: url.to_string(),
        reason: "not UTF-8".into(),
    })
}

/// The protected-resource metadata, from the first candidate that has it,
/// and where it was.
pub async fn protected_resource(
    http: &reqwest::Client,
    server: &Url,
    from_challenge: Option<&str>,
    protocol_version: Option<&str>,
) -> Result<Option<(ProtectedResource, Url)>, AuthError> {
    for url in prm_candidates(server, from_challenge) {
        require_not_metadata(&url, server, "the protected-resource metadata URL")?;
        require_secure(&url, "the protected-resource metadata URL")?;
        if let Some(prm) = fetch_json::<ProtectedResource>(http, &url, protocol_version).await? {
            return Ok(Some((prm, url)));
        }
    }
    Ok(None)
}

/// The authorization server's metadata. `issuer` must be the one its URL
/// was built from, character for character (RFC 8414 §3.3): a document
/// naming another issuer is refused, not used; nor is an issuer on a
/// metadata address that the MCP server at `server` is not on.
pub async fn server_metadata(
    http: &reqwest::Client,
    server: &Url,
    issuer: &str,
    protocol_version: Option<&str>,
) -> Result<Option<ServerMetadata>, AuthError> {
    if let Ok(u) = Url::parse(issuer) {
        require_not_metadata(&u, server, "the authorization server")?;
    }
    let url = secure_url(issuer, "the authorization server (issuer)")?;
    for url in as_candidates(&url) {
        if let Some(m) = fetch_json::<ServerMetadata>(http, &url, protocol_version).await? {
            if m.issuer != issuer {
                return Err(AuthError::IssuerMismatch {
                    url: url.to_string(),
                    expected: issuer.to_owned(),
                    found: m.issuer,
                });
            }
            return Ok(Some(m));
        }
    }
    Ok(None)
}

/// 2025-03-26: no protected-resource metadata; the authorization server is
/// the MCP server's origin, its metadata at the root well-known URL, and
/// without that the default endpoints.
pub async fn legacy_server_metadata(
    http: &reqwest::Client,
    server: &Url,
    protocol_version: Option<&str>,
) -> Result<ServerMetadata, AuthError> {
    let origin = server.join("/").map_err(|e| AuthError::Metadata {
        url: server.to_string(),
        reason: e.to_string(),
    })?;
    let well_known = origin
        .join("/.well-known/oauth-authorization-server")
        .map_err(|e| AuthError::Metadata {
            url: server.to_string(),
            reason: e.to_string(),
        })?;
    require_secure(&origin, "the authorization server (the server's origin)")?;
    if let Some(m) = fetch_json::<ServerMetadata>(http, &well_known, protocol_version).await? {
        // RFC 8414 §3.3: the issuer is the one the URL was built from, here
        // the origin; another would become the audience of our assertions.
        // A path on the same origin is taken (conformance 0.1.16 serves
        // `{origin}/oauth` there); another origin is not.
        let expected = canonical(&origin);
        let same_origin = Url::parse(&m.issuer).is_ok_and(|u| u.origin() == origin.origin());
        if !same_origin {
            return Err(AuthError::IssuerMismatch {
                url: well_known.to_string(),
                expected,
                found: m.issuer,
            });
        }
        return Ok(m);
    }
    let at = |p: &str| origin.join(p).map(|u| u.to_string()).ok();
    Ok(ServerMetadata {
        issuer: canonical(&origin),
        authorization_endpoint: at("/authorize"),
        token_endpoint: at("/token"),
        registration_endpoint: at("/register"),
        // The defaults of 2025-03-26 imply PKCE with S256.
        code_challenge_methods_supported: Some(vec!["S256".into()]),
        ..ServerMetadata::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn link_local_and_metadata_addresses_are_refused_unless_the_server_is_there() {
        let server = u("https://mcp.example/mcp");
        for bad in [
            "https://169.254.169.254/latest",
            "https://169.254.0.1/",
            "https://[fe80::1]/x",
            "https://[fd00:ec2::254]/x",
            "https://[::ffff:169.254.169.254]/x",
            "https://100.100.100.200/x",
            "https://metadata.google.internal/x",
            "https://METADATA.google.internal./x",
            "https://0.0.0.0/x",
        ] {
            assert!(
                require_not_metadata(&u(bad), &server, "x").is_err(),
                "{bad}"
            );
        }
        for good in [
            "https://as.example/",
            "https://10.0.0.1/",
            "http://127.0.0.1:3/",
        ] {
            assert!(
                require_not_metadata(&u(good), &server, "x").is_ok(),
                "{good}"
            );
        }
        let on_link = u("https://169.254.10.10/mcp");
        assert!(require_not_metadata(&u("https://169.254.10.10/as"), &on_link, "x").is_ok());
        assert!(require_not_metadata(&u("https://169.254.169.254/as"), &on_link, "x").is_err());
    }

    #[test]
    fn well_known_candidates_follow_the_spec_order() {
        let c: Vec<String> = prm_candidates(&u("https://h/a/mcp"), None)
            .iter()
            .map(Url::to_string)
            .collect();
        assert_eq!(
            c,
            [
                "https://h/.well-known/oauth-protected-resource/a/mcp",
                "https://h/.well-known/oauth-protected-resource"
            ]
        );
        let c = prm_candidates(&u("https://h/mcp"), Some("https://h/prm"));
        assert_eq!(c, [u("https://h/prm")]);
        let c: Vec<String> = as_candidates(&u("https://as/tenant1"))
            .iter()
            .map(Url::to_string)
            .collect();
        assert_eq!(
            c,
            [
                "https://as/.well-known/oauth-authorization-server/tenant1",
                "https://as/.well-known/openid-configuration/tenant1",
                "https://as/tenant1/.well-known/openid-configuration"
            ]
        );
        assert_eq!(as_candidates(&u("https://as")).len(), 2);
    }

    #[test]
    fn a_resource_is_its_own_server_exactly_or_the_origin_at_the_root_document() {
        let s = u("http://127.0.0.1:3000/a/mcp?t=1");
        let inserted = u("http://127.0.0.1:3000/.well-known/oauth-protected-resource/a/mcp");
        let root = u("http://127.0.0.1:3000/.well-known/oauth-protected-resource");
        for prm in [&inserted, &root] {
            assert!(resource_matches("http://127.0.0.1:3000/a/mcp?t=1", prm, &s));
            for bad in [
                "http://127.0.0.1:3000/a/mcp",
                "http://127.0.0.1:3000/a/mcp?t=2",
                "http://127.0.0.1:3000/a",
                "http://127.0.0.1:3001/a/mcp?t=1",
                "https://evil.example/a/mcp?t=1",
                "http://127.0.0.1:3000/a/mcp/other?t=1",
                "not a url",
            ] {
                assert!(!resource_matches(bad, prm, &s), "{bad} at {prm}");
            }
        }
        // The origin, only from the origin's root document.
        assert!(resource_matches("http://127.0.0.1:3000/", &root, &s));
        assert!(resource_matches("http://127.0.0.1:3000", &root, &s));
        assert!(!resource_matches("http://127.0.0.1:3000/", &inserted, &s));
        let elsewhere = u("http://127.0.0.1:3001/.well-known/oauth-protected-resource");
        assert!(!resource_matches("http://127.0.0.1:3000/", &elsewhere, &s));
        assert_eq!(canonical(&u("HTTP://H:80/")), "http://h");
        assert_eq!(canonical(&u("https://h/mcp#x")), "https://h/mcp");
    }
}
