//! A server's OAuth settings: its `oauth` object in the config, else the
//! scripted client in `MCPHOST_OAUTH_CLIENT`. Plain data; `auth` acts on it.

use std::path::PathBuf;

use tracing::warn;

use super::Secret;
use url::Url;

/// The scripted client (`MCPHOST_OAUTH_CLIENT`): a JSON object.
pub const CLIENT_ENV: &str = "MCPHOST_OAUTH_CLIENT";
/// A Client ID Metadata Document URL to use as our client id.
pub const CLIENT_METADATA_ENV: &str = "MCPHOST_OAUTH_CLIENT_METADATA_URL";
/// The RFC 7523 JWT bearer grant.
pub const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// A server's `oauth` settings (config, else `MCPHOST_OAUTH_CLIENT`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OAuthConfig {
    pub client_id: Option<String>,
    /// The authorization server `client_id` is registered at: the client
    /// (its secret, its key) is used there only.
    pub issuer: Option<String>,
    /// `MCPHOST_OAUTH_CLIENT` only: the servers it is for.
    pub servers: Option<Vec<String>>,
    pub client_secret: Option<Secret>,
    /// `client_secret_basic`, `client_secret_post`, `none`, `private_key_jwt`.
    pub token_endpoint_auth_method: Option<String>,
    /// `authorization_code` (default) or `client_credentials`.
    pub grant_type: Option<String>,
    pub private_key_pem: Option<Secret>,
    pub signing_algorithm: Option<String>,
    /// Scopes to ask for instead of what the server suggests.
    pub scope: Option<String>,
    pub client_metadata_url: Option<String>,
    /// Enterprise-managed authorization (`grant_type` the JWT bearer
    /// grant): the IdP's token endpoint, the user's ID token from it, and
    /// our client there.
    pub idp_token_endpoint: Option<String>,
    pub idp_id_token: Option<Secret>,
    pub idp_client_id: Option<String>,
    pub idp_client_secret: Option<Secret>,
    /// Workload identity federation: where the workload's own token comes
    /// from, for a JWT bearer grant with it.
    pub workload: Option<WorkloadToken>,
}

impl OAuthConfig {
    /// `MCPHOST_OAUTH_CLIENT` and `MCPHOST_OAUTH_CLIENT_METADATA_URL`.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<OAuthConfig, String> {
        let mut c = OAuthConfig::default();
        if let Some(text) = env(CLIENT_ENV).filter(|s| !s.trim().is_empty()) {
            let v: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| format!("{CLIENT_ENV} is not JSON: {e}"))?;
            let obj = v
                .as_object()
                .ok_or_else(|| format!("{CLIENT_ENV} must be a JSON object"))?;
            let s = |k: &str| -> Result<Option<String>, String> {
                match obj.get(k) {
                    None | Some(serde_json::Value::Null) => Ok(None),
                    Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
                    Some(_) => Err(format!("{CLIENT_ENV}: {k} must be a string")),
                }
            };
            c.client_id = s("client_id")?;
            c.issuer = s("issuer")?;
            c.servers = match obj.get("servers") {
                None | Some(serde_json::Value::Null) => None,
                Some(serde_json::Value::Array(v)) => Some(
                    v.iter()
                        .map(|x| {
                            x.as_str().map(str::to_owned).ok_or_else(|| {
                                format!("{CLIENT_ENV}: servers must be an array of server names")
                            })
                        })
                        .collect::<Result<Vec<_>, _>>()?,
                ),
                Some(_) => {
                    return Err(format!(
                        "{CLIENT_ENV}: servers must be an array of server names"
                    ));
                }
            };
            c.client_secret = s("client_secret")?.map(Secret::from);
            c.grant_type = s("grant_type")?;
            c.token_endpoint_auth_method = s("token_endpoint_auth_method")?;
            c.private_key_pem = s("private_key_pem")?.map(Secret::from);
            c.signing_algorithm = s("signing_algorithm")?;
            c.scope = s("scope")?;
            c.idp_token_endpoint = s("idp_token_endpoint")?;
            c.idp_id_token = s("idp_id_token")?.map(Secret::from);
            c.idp_client_id = s("idp_client_id")?;
            c.idp_client_secret = s("idp_client_secret")?.map(Secret::from);
            c.workload = match (s("workload_token_file")?, obj.get("workload_token_command")) {
                (Some(f), None) => Some(WorkloadToken::File(f.into())),
                (None, None) | (None, Some(serde_json::Value::Null)) => None,
                (None, Some(serde_json::Value::Array(v))) if !v.is_empty() => {
                    Some(WorkloadToken::Command(
                        v.iter()
                            .map(|x| x.as_str().map(str::to_owned))
                            .collect::<Option<Vec<_>>>()
                            .ok_or_else(|| {
                                format!("{CLIENT_ENV}: workload_token_command must be an array of strings")
                            })?,
                    ))
                }
                (None, Some(_)) => {
                    return Err(format!(
                        "{CLIENT_ENV}: workload_token_command must be a non-empty array of strings"
                    ));
                }
                (Some(_), Some(_)) => {
                    return Err(format!(
                        "{CLIENT_ENV}: workload_token_file or workload_token_command, not both"
                    ));
                }
            };
            if c.workload.is_some() {
                if c.client_id.is_none() {
                    return Err(format!(
                        "{CLIENT_ENV}: a workload identity token needs the client_id it is exchanged for"
                    ));
                }
                c.grant_type.get_or_insert_with(|| JWT_BEARER.into());
            }
            // A scripted enterprise sign-in names its IdP; that is the grant.
            if c.grant_type.is_none() && c.idp_id_token.is_some() {
                c.grant_type = Some(JWT_BEARER.into());
            }
        }
        c.client_metadata_url = env(CLIENT_METADATA_ENV).filter(|s| !s.trim().is_empty());
        if c.names_client() && c.issuer.is_none() && c.servers.is_none() {
            // Given to every server, it would reach whatever authorization
            // server a hostile one names.
            warn!(
                "{CLIENT_ENV} names neither the \"issuer\" its client is registered at nor the \"servers\" it is for; it is not used"
            );
            c = c.without_client();
        }
        Ok(c)
    }

    /// The config's settings, with the environment's for what it leaves out.
    pub fn or(self, other: OAuthConfig) -> OAuthConfig {
        // A secret belongs to its client id.
        let client_secret = if self.client_id.is_some() {
            self.client_secret
        } else {
            self.client_secret.or(other.client_secret)
        };
        let issuer = if self.client_id.is_some() {
            self.issuer
        } else {
            self.issuer.or(other.issuer)
        };
        let workload = if self.client_id.is_some() {
            self.workload
        } else {
            self.workload.or(other.workload)
        };
        OAuthConfig {
            client_id: self.client_id.or(other.client_id),
            issuer,
            servers: self.servers.or(other.servers),
            client_secret,
            token_endpoint_auth_method: self
                .token_endpoint_auth_method
                .or(other.token_endpoint_auth_method),
            grant_type: self.grant_type.or(other.grant_type),
            private_key_pem: self.private_key_pem.or(other.private_key_pem),
            signing_algorithm: self.signing_algorithm.or(other.signing_algorithm),
            scope: self.scope.or(other.scope),
            client_metadata_url: self.client_metadata_url.or(other.client_metadata_url),
            idp_token_endpoint: self.idp_token_endpoint.or(other.idp_token_endpoint),
            idp_id_token: self.idp_id_token.or(other.idp_id_token),
            idp_client_id: self.idp_client_id.or(other.idp_client_id),
            idp_client_secret: self.idp_client_secret.or(other.idp_client_secret),
            workload,
        }
    }

    /// The settings that are not a client: what every server may use.
    pub fn without_client(&self) -> OAuthConfig {
        OAuthConfig {
            scope: self.scope.clone(),
            client_metadata_url: self.client_metadata_url.clone(),
            ..OAuthConfig::default()
        }
    }

    /// Holds a client or the means to act as one (secret, key, ID token).
    pub fn names_client(&self) -> bool {
        self.client_id.is_some()
            || self.client_secret.is_some()
            || self.private_key_pem.is_some()
            || self.idp_id_token.is_some()
            || self.idp_client_secret.is_some()
            || self.workload.is_some()
    }

    /// A grant with no person in it.
    pub fn machine(&self) -> bool {
        matches!(
            self.grant_type.as_deref(),
            Some("client_credentials") | Some(JWT_BEARER)
        )
    }
}

/// Where the workload's own token comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkloadToken {
    File(PathBuf),
    /// A program and its arguments (no shell); the token is its stdout.
    Command(Vec<String>),
}

impl WorkloadToken {
    /// For messages: the file or the command line.
    pub fn describe(&self) -> String {
        match self {
            WorkloadToken::File(p) => format!("the file {}", p.display()),
            WorkloadToken::Command(argv) => format!("the command {:?}", argv.join(" ")),
        }
    }
}

/// A loopback host (RFC 8252 §7.3): `127.0.0.0/8`, `::1`, `localhost`.
pub fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

/// An `https` URL with a host, or `http` to a loopback address.
pub fn is_secure(url: &Url) -> bool {
    match url.scheme() {
        "https" => url.host().is_some(),
        "http" => is_loopback(url),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_secrets() {
        let text = r#"{"client_id": "app", "issuer": "https://as.example",
            "client_secret": "CS-s3cr3t", "private_key_pem": "KEY-s3cr3t",
            "idp_token_endpoint": "https://idp.example/token",
            "idp_id_token": "ID-s3cr3t", "idp_client_secret": "IDP-s3cr3t"}"#;
        let env = |k: &str| (k == CLIENT_ENV).then(|| text.to_owned());
        let c = OAuthConfig::from_env(&env).unwrap();
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        for field in [
            "client_secret",
            "private_key_pem",
            "idp_id_token",
            "idp_client_secret",
        ] {
            assert!(
                shown.contains(&format!("{field}: Some(\"<redacted>\")")),
                "{field}: {shown}"
            );
        }
        assert!(shown.contains("client_id: Some(\"app\")"), "{shown}");
    }
}
