//! Per-server tool filter: `tools: {allow: [glob], deny: [glob]}`.

use std::fmt;

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};

/// Which of a server's tools are exposed. Deny wins; an empty allow list
/// allows everything.
///
/// Keeps the patterns (for diffing and display) and the compiled sets (for
/// matching); the fields are private so the two cannot drift apart.
#[derive(Clone, Default)]
pub struct ToolFilter {
    allow: Vec<String>,
    deny: Vec<String>,
    allow_set: GlobSet,
    deny_set: GlobSet,
}

impl ToolFilter {
    /// Compiles the patterns; the error names the first bad one.
    pub fn new(allow: Vec<String>, deny: Vec<String>) -> Result<Self, globset::Error> {
        let allow_set = compile(&allow)?;
        let deny_set = compile(&deny)?;
        Ok(ToolFilter {
            allow,
            deny,
            allow_set,
            deny_set,
        })
    }

    /// Whether the tool named `tool` (the server's own name, before any
    /// namespacing) is exposed.
    pub fn allows(&self, tool: &str) -> bool {
        if self.deny_set.is_match(tool) {
            return false;
        }
        self.allow.is_empty() || self.allow_set.is_match(tool)
    }

    pub fn allow(&self) -> &[String] {
        &self.allow
    }

    pub fn deny(&self) -> &[String] {
        &self.deny
    }

    /// True when every tool is allowed.
    pub fn is_allow_all(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }
}

/// Compiles one pattern the way the filter does; the config parser uses it to
/// point at the exact bad element.
pub(crate) fn glob(pattern: &str) -> Result<Glob, globset::Error> {
    // Tool names are not paths: `*` may cross `/` and `.`.
    GlobBuilder::new(pattern)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
}

fn compile(patterns: &[String]) -> Result<GlobSet, globset::Error> {
    let mut builder = GlobSetBuilder::new();
    for pattern in patterns {
        builder.add(glob(pattern)?);
    }
    builder.build()
}

impl PartialEq for ToolFilter {
    fn eq(&self, other: &Self) -> bool {
        self.allow == other.allow && self.deny == other.deny
    }
}

impl Eq for ToolFilter {}

impl fmt::Debug for ToolFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolFilter")
            .field("allow", &self.allow)
            .field("deny", &self.deny)
            .finish()
    }
}
