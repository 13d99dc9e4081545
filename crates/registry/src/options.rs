//! What the registry starts each server with: the client's own options,
//! and the registry's (the era cache, OAuth, stored catalogs), which the
//! client never reads.

use std::sync::Arc;

use super::EraCache;
use mcphost_auth::AuthContext;
use mcphost_client::ClientOptions;

use super::stored::CatalogStore;

/// Options of every server a registry (or a lone supervisor) starts.
#[derive(Clone)]
pub struct ServerOptions {
    /// How each server's client talks to it.
    pub client: ClientOptions,
    /// Where supervisors remember each server's era.
    pub eras: Arc<EraCache>,
    /// OAuth for HTTP servers (`None`: a 401 leaves the server in
    /// `auth_required`).
    pub auth: Option<Arc<AuthContext>>,
    /// Where the registry keeps each server's last good lists (`None`:
    /// nowhere; a lazy server is then started to be listed).
    pub catalogs: Option<Arc<CatalogStore>>,
    /// Each server's pinned definitions (in memory unless given a file).
    pub pins: Arc<super::pins::PinStore>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions::from(ClientOptions::default())
    }
}

/// The client's options alone: an in-memory era cache, no OAuth, no
/// stored catalogs.
impl From<ClientOptions> for ServerOptions {
    fn from(client: ClientOptions) -> Self {
        ServerOptions {
            client,
            eras: Arc::new(EraCache::in_memory()),
            auth: None,
            catalogs: None,
            pins: Arc::new(super::pins::PinStore::in_memory()),
        }
    }
}
