//! Registry: what the engine knows about all configured servers at once.
//!
//! Today this is the [`catalog`]: the namespaced, stably ordered listing of
//! every server's tools, prompts and resources, and the table that routes a
//! namespaced name back to its server. Supervision arrives with later issues.

pub mod catalog;
