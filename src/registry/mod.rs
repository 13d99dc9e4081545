//! The registry: supervised servers and the namespaced catalog over them.

pub mod catalog;
pub mod supervisor;
