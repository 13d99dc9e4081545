//! DPoP (RFC 9449): tokens bound to a key pair of ours, so that a token
//! copied out of a log or a hostile server's memory is useless without the
//! key. One P-256 key per authorization server and resource, kept in the
//! token store beside the tokens it binds (same 0600 files or keyring item).
//! Every token request and every request that presents a DPoP token carries
//! a fresh proof: a JWT signed with the key, naming the method and URL.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use jsonwebtoken::jwk::{Jwk, ThumbprintHash};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::{Deserialize, Serialize};
use url::Url;

use super::AuthError;
use mcphost_config::Secret;

/// The one algorithm we sign proofs with; used only where the
/// authorization server lists it.
pub const ALG: &str = "ES256";

/// Whether an authorization server issues DPoP tokens we can ask for.
pub fn supported(meta: &super::discovery::ServerMetadata) -> bool {
    meta.dpop_signing_alg_values_supported
        .as_ref()
        .is_some_and(|v| v.iter().any(|a| a == ALG))
}

/// A P-256 private key, PKCS#8 PEM. Never printed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DpopKey(Secret);

fn key_error(e: impl std::fmt::Display) -> AuthError {
    AuthError::Client(format!("DPoP key: {e}"))
}

impl DpopKey {
    pub fn generate() -> Result<DpopKey, AuthError> {
        use p256::pkcs8::EncodePrivateKey;
        // A random scalar; the odd value outside the curve order is drawn again.
        for _ in 0..8 {
            let mut bytes = [0u8; 32];
            getrandom::fill(&mut bytes).map_err(key_error)?;
            if let Ok(k) = p256::SecretKey::from_slice(&bytes) {
                let pem = k
                    .to_pkcs8_pem(p256::pkcs8::LineEnding::LF)
                    .map_err(key_error)?;
                return Ok(DpopKey(Secret::new(pem.as_str())));
            }
        }
        Err(key_error("no valid P-256 scalar drawn"))
    }

    fn encoding(&self) -> Result<(EncodingKey, Jwk), AuthError> {
        let key = EncodingKey::from_ec_pem(self.0.expose().as_bytes()).map_err(key_error)?;
        let mut jwk = Jwk::from_encoding_key(&key, Algorithm::ES256).map_err(key_error)?;
        // The public key only: no "alg" or other extras the server must ignore.
        jwk.common = Default::default();
        Ok((key, jwk))
    }

    /// The JWK SHA-256 thumbprint (RFC 7638): a bound token's `cnf.jkt`.
    pub fn thumbprint(&self) -> Result<String, AuthError> {
        let (_, jwk) = self.encoding()?;
        jwk.thumbprint(ThumbprintHash::SHA256).map_err(key_error)
    }

    /// A proof for one request (RFC 9449 §4.2): `htu` without query and
    /// fragment, `ath` when presenting `access_token`, the server's `nonce`.
    pub fn proof(
        &self,
        method: &str,
        url: &Url,
        access_token: Option<&str>,
        nonce: Option<&str>,
    ) -> Result<String, AuthError> {
        let (key, jwk) = self.encoding()?;
        let mut header = Header::new(Algorithm::ES256);
        header.typ = Some("dpop+jwt".into());
        header.jwk = Some(jwk);
        let mut jti = [0u8; 16];
        getrandom::fill(&mut jti).map_err(key_error)?;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let iat = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut claims = serde_json::json!({
            "jti": b64.encode(jti),
            "htm": method,
            "htu": htu(url),
            "iat": iat,
        });
        if let Some(t) = access_token {
            use sha2::Digest;
            claims["ath"] = b64.encode(sha2::Sha256::digest(t.as_bytes())).into();
        }
        if let Some(n) = nonce {
            claims["nonce"] = n.into();
        }
        jsonwebtoken::encode(&header, &claims, &key).map_err(key_error)
    }
}

/// RFC 9449 §4.2: the target URI without query and fragment.
pub fn htu(url: &Url) -> String {
    let mut u = url.clone();
    u.set_query(None);
    u.set_fragment(None);
    u.to_string()
}

/// The latest `DPoP-Nonce` each server gave, by origin (RFC 9449 §8, §9).
#[derive(Default)]
pub struct Nonces(parking_lot::Mutex<HashMap<String, String>>);

impl Nonces {
    pub fn get(&self, url: &Url) -> Option<String> {
        let m = self.0.lock();
        m.get(&url.origin().ascii_serialization()).cloned()
    }

    pub fn set(&self, url: &Url, nonce: &str) {
        let mut m = self.0.lock();
        m.insert(url.origin().ascii_serialization(), nonce.to_owned());
    }
}

pub use mcphost_transport::http::dpop_nonce as nonce_header;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_names_the_request_and_binds_the_token() {
        let k = DpopKey::generate().unwrap();
        let url = Url::parse("https://rs.example/mcp?x=1#f").unwrap();
        let p = k.proof("POST", &url, Some("tok"), Some("n1")).unwrap();
        let h = jsonwebtoken::decode_header(&p).unwrap();
        assert_eq!(h.typ.as_deref(), Some("dpop+jwt"));
        let jwk = h.jwk.unwrap();
        assert_eq!(
            jwk.thumbprint(ThumbprintHash::SHA256).unwrap(),
            k.thumbprint().unwrap()
        );
        let key = jsonwebtoken::DecodingKey::from_jwk(&jwk).unwrap();
        let mut v = jsonwebtoken::Validation::new(Algorithm::ES256);
        v.required_spec_claims.clear();
        v.validate_exp = false;
        let c = jsonwebtoken::decode::<serde_json::Value>(&p, &key, &v)
            .unwrap()
            .claims;
        assert_eq!(c["htu"], "https://rs.example/mcp");
        assert_eq!(c["htm"], "POST");
        assert_eq!(c["nonce"], "n1");
        use sha2::Digest;
        let ath =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(b"tok"));
        assert_eq!(c["ath"], ath.as_str());
        let again = k.proof("POST", &url, Some("tok"), None).unwrap();
        assert_ne!(p, again, "every proof has its own jti");
        assert!(!format!("{k:?}").contains("PRIVATE"));
    }
}
