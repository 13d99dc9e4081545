//! The engine's [`ConfigEditor`] over a [`ConfigStore`]: the engine edits
//! its config without knowing where it lives; the daemon (and the C
//! library) hand it this one.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::store::{ConfigStore, Edited};
use crate::engine::{ConfigEdit, ConfigEditor};
use crate::transport::BoxFuture;

/// Edits the config through a [`ConfigStore`]: the daemon's file, or an
/// embedded engine's text in memory.
pub struct StoreEditor(pub Arc<ConfigStore>);

impl ConfigEditor for StoreEditor {
    fn edit(&self, edit: ConfigEdit) -> BoxFuture<'_, Result<Edited, String>> {
        Box::pin(async move {
            let r = match edit {
                ConfigEdit::Add { name, entry } => self.0.add(&name, entry.get()).await,
                ConfigEdit::Remove { name } => self.0.remove(&name).await,
                ConfigEdit::SetDisabled { name, disabled } => {
                    self.0.set_disabled(&name, disabled).await
                }
            };
            r.map_err(|e| e.to_string())
        })
    }

    fn last_error(&self) -> Option<String> {
        self.0.last_error()
    }

    fn give(
        &self,
        server: &str,
        vars: BTreeMap<String, String>,
    ) -> BoxFuture<'_, (Option<Edited>, bool)> {
        let server = server.to_owned();
        Box::pin(async move {
            if !self.0.give(&server, vars) {
                return (None, false);
            }
            let before = self.0.current().server(&server).cloned();
            // A file that does not load now is the reload's error to show
            // (`status`); the caller goes on with the config that runs.
            let edited = match self.0.reload().await {
                Ok(edited) => edited,
                Err(e) => {
                    tracing::warn!("re-reading the config with {server}'s variables: {e}");
                    None
                }
            };
            let changed = edited
                .as_ref()
                .is_some_and(|e| e.config.server(&server) != before.as_ref());
            (edited, changed)
        })
    }
}
