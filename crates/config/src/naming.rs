//! How namespaced names are formed (`namespacing` in the file). The rules
//! that use these settings, and why they are a contract, are in
//! `registry::catalog`.

/// Smallest usable budget: a prefix character, a separator, a tool character
/// and the catalog's hash suffix (`_` plus 6 hex digits). Smaller configured
/// budgets are raised to this by the catalog and rejected by
/// [`NamingRules::validate`].
pub const MIN_BUDGET: usize = 12;

/// How namespaced names are formed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamingRules {
    /// Between prefix and tool; `__` by default. Must use allowed characters.
    pub separator: String,
    /// The longest name a host accepts; 64 by default.
    pub max_length: usize,
    /// Characters kept free for a host's own prefix (e.g. `mcp__mcphost__`).
    pub reserve: usize,
}

impl Default for NamingRules {
    fn default() -> Self {
        NamingRules {
            separator: "__".to_owned(),
            max_length: 64,
            reserve: 0,
        }
    }
}

/// A configuration the naming rules cannot honour.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NamingError {
    #[error("name separator {0:?} must be non-empty and use only A-Z, a-z, 0-9, '_' and '-'")]
    Separator(String),
    #[error(
        "max length {max_length} minus reserve {reserve} leaves {budget} characters for names; at least {MIN_BUDGET} are needed"
    )]
    Budget {
        budget: usize,
        max_length: usize,
        reserve: usize,
    },
}

/// Whether `c` may appear in a namespaced name: `[A-Za-z0-9_-]`.
pub fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

impl NamingRules {
    /// Characters available to a name: `max_length - reserve`, at least
    /// [`MIN_BUDGET`].
    pub fn budget(&self) -> usize {
        self.max_length.saturating_sub(self.reserve).max(MIN_BUDGET)
    }

    /// The one rule for namespacing settings, which the config layer
    /// applies: the catalog copes with anything, but a separator it would
    /// have to sanitize or a budget it would have to raise to [`MIN_BUDGET`]
    /// is a mistake the user should hear about.
    pub fn validate(&self) -> Result<(), NamingError> {
        Self::check_separator(&self.separator)?;
        Self::check_budget(self.max_length, self.reserve)
    }

    /// The separator part of [`Self::validate`].
    pub fn check_separator(separator: &str) -> Result<(), NamingError> {
        if separator.is_empty() || !separator.chars().all(is_name_char) {
            return Err(NamingError::Separator(separator.to_owned()));
        }
        Ok(())
    }

    /// The length part of [`Self::validate`].
    pub fn check_budget(max_length: usize, reserve: usize) -> Result<(), NamingError> {
        let budget = max_length.saturating_sub(reserve);
        if budget < MIN_BUDGET {
            return Err(NamingError::Budget {
                budget,
                max_length,
                reserve,
            });
        }
        Ok(())
    }
}
