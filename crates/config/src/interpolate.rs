//! `${VAR}` interpolation in config string values.
//!
//! Forms: `${VAR}`, `${VAR:-default}` (default when unset *or empty*, as in
//! the shell), `${env:VAR}` and `${env:VAR:-default}` (VS Code spelling),
//! `${userHome}`, `${keyring:NAME}` (an OS keyring item, through the lookup). `$$` is a literal `$`; any other `$` is kept as is. Defaults
//! are literal text: no nesting, and they cannot contain `}`.

/// Why a string could not be interpolated. Never carries a variable's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InterpolateError {
    /// Variables without a value or default, in order of appearance.
    Missing(Vec<String>),
    /// `${keyring:NAME}` with no item (or no keyring to ask).
    MissingSecret(String),
    Unterminated,
    Unsupported(String),
    NoHome,
}

impl InterpolateError {
    pub(crate) fn message(&self) -> String {
        match self {
            InterpolateError::Missing(names) if names.len() == 1 => {
                format!("variable {} is not set and has no default", names[0])
            }
            InterpolateError::Missing(names) => {
                format!(
                    "variables {} are not set and have no default",
                    names.join(", ")
                )
            }
            InterpolateError::MissingSecret(name) => format!(
                "keyring secret {name:?} was not found (OS keyring service \"mcphost\", user \"config:{name}\"), or the keyring did not answer"
            ),
            InterpolateError::Unterminated => {
                "\"${\" without a closing \"}\" (write \"$$\" for a literal \"$\")".to_owned()
            }
            InterpolateError::Unsupported(body) => format!(
                "unsupported reference \"${{{body}}}\"; use ${{VAR}}, ${{VAR:-default}}, ${{env:VAR}}, ${{userHome}} or ${{keyring:NAME}}"
            ),
            InterpolateError::NoHome => {
                "${userHome}: the home directory is unknown (HOME is not set)".to_owned()
            }
        }
    }
}

pub(crate) fn interpolate(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, InterpolateError> {
    if !text.contains('$') {
        return Ok(text.to_owned());
    }
    let mut out = String::with_capacity(text.len());
    let mut missing = Vec::new();
    let mut rest = text;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        if let Some(after) = after.strip_prefix('$') {
            out.push('$');
            rest = after;
        } else if let Some(body_and_rest) = after.strip_prefix('{') {
            let end = body_and_rest
                .find('}')
                .ok_or(InterpolateError::Unterminated)?;
            let body = &body_and_rest[..end];
            match resolve(body, env)? {
                Some(value) => out.push_str(&value),
                None => missing.push(variable_name(body).to_owned()),
            }
            rest = &body_and_rest[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(InterpolateError::Missing(missing))
    }
}

/// The value of one `${...}` body; `None` when the variable is missing.
fn resolve(
    body: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<String>, InterpolateError> {
    if body == "userHome" {
        return home(env).map(Some);
    }
    // The lookup answers `keyring:NAME` from the OS keyring (process_env).
    if let Some(name) = body.strip_prefix("keyring:") {
        if name.is_empty() {
            return Err(InterpolateError::Unsupported(body.to_owned()));
        }
        return match env(body) {
            Some(value) => Ok(Some(value)),
            None => Err(InterpolateError::MissingSecret(name.to_owned())),
        };
    }
    let unprefixed = body.strip_prefix("env:").unwrap_or(body);
    let (name, default) = match unprefixed.split_once(":-") {
        Some((name, default)) => (name, Some(default)),
        None => (unprefixed, None),
    };
    if !is_variable_name(name) {
        return Err(InterpolateError::Unsupported(body.to_owned()));
    }
    Ok(match (env(name), default) {
        (Some(value), None) => Some(value),
        (Some(value), Some(_)) if !value.is_empty() => Some(value),
        (_, Some(default)) => Some(default.to_owned()),
        (None, None) => None,
    })
}

fn variable_name(body: &str) -> &str {
    let unprefixed = body.strip_prefix("env:").unwrap_or(body);
    unprefixed
        .split_once(":-")
        .map_or(unprefixed, |(name, _)| name)
}

/// `HOME` from the injected environment first, so tests stay deterministic.
fn home(env: &dyn Fn(&str) -> Option<String>) -> Result<String, InterpolateError> {
    if let Some(home) = env("HOME").filter(|h| !h.is_empty()) {
        return Ok(home);
    }
    directories::BaseDirs::new()
        .and_then(|dirs| dirs.home_dir().to_str().map(str::to_owned))
        .ok_or(InterpolateError::NoHome)
}

pub(crate) fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "A" => Some("alpha".into()),
            "EMPTY" => Some(String::new()),
            "HOME" => Some("/home/u".into()),
            _ => None,
        }
    }

    #[test]
    fn forms() {
        let i = |s: &str| interpolate(s, &env);
        assert_eq!(i("plain"), Ok("plain".into()));
        assert_eq!(i("x${A}y"), Ok("xalphay".into()));
        assert_eq!(i("${env:A}"), Ok("alpha".into()));
        assert_eq!(i("${B:-dflt}"), Ok("dflt".into()));
        assert_eq!(i("${EMPTY:-dflt}"), Ok("dflt".into()));
        assert_eq!(i("${EMPTY}"), Ok(String::new()));
        assert_eq!(i("${env:B:-d}"), Ok("d".into()));
        assert_eq!(i("${B:-}"), Ok(String::new()));
        assert_eq!(i("${userHome}/x"), Ok("/home/u/x".into()));
        assert_eq!(i("$$"), Ok("$".into()));
        assert_eq!(i("$${A}"), Ok("${A}".into()));
        assert_eq!(i("a$b $"), Ok("a$b $".into()));
    }

    #[test]
    fn keyring_secrets_come_from_the_lookup() {
        let lookup = |name: &str| (name == "keyring:gh/TOKEN").then(|| "s3cret".to_owned());
        assert_eq!(
            interpolate("Bearer ${keyring:gh/TOKEN}", &lookup),
            Ok("Bearer s3cret".into())
        );
        assert_eq!(
            interpolate("${keyring:other}", &lookup),
            Err(InterpolateError::MissingSecret("other".into()))
        );
        assert_eq!(
            interpolate("${keyring:}", &lookup),
            Err(InterpolateError::Unsupported("keyring:".into()))
        );
    }

    #[test]
    fn errors() {
        let i = |s: &str| interpolate(s, &env);
        assert_eq!(
            i("${B} ${C} ${A}"),
            Err(InterpolateError::Missing(vec!["B".into(), "C".into()]))
        );
        assert_eq!(i("${A"), Err(InterpolateError::Unterminated));
        assert_eq!(
            i("${input:tok}"),
            Err(InterpolateError::Unsupported("input:tok".into()))
        );
        assert_eq!(i("${}"), Err(InterpolateError::Unsupported(String::new())));
    }
}
