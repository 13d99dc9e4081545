//! `envFile`: `KEY=VALUE` lines.
//!
//! Hand-written on purpose: the dotenv crates expand `$VAR` inside values
//! from the *process* environment (silently empty when unset), which would
//! mangle secrets containing `$` and bypass the injectable environment.
//! Values here are taken literally.
//!
//! Format: blank lines and `#` comment lines are skipped; an optional
//! `export ` prefix; `KEY=VALUE` with the key `[A-Za-z_][A-Za-z0-9_]*`;
//! the value is unquoted (trimmed, ` #` starts a comment), `'single'`
//! (literal) or `"double"` (`\n`, `\t`, `\"`, `\\` escapes). One line each.

/// One malformed line; the message never repeats the line (it may hold a secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DotenvError {
    pub line: usize,
    pub message: &'static str,
}

pub(crate) fn parse_dotenv(text: &str) -> Result<Vec<(String, String)>, Vec<DotenvError>> {
    let mut vars = Vec::new();
    let mut errors = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match parse_line(line) {
            Ok(pair) => vars.push(pair),
            Err(message) => errors.push(DotenvError {
                line: index + 1,
                message,
            }),
        }
    }
    if errors.is_empty() {
        Ok(vars)
    } else {
        Err(errors)
    }
}

fn parse_line(line: &str) -> Result<(String, String), &'static str> {
    let line = line.strip_prefix("export ").map_or(line, str::trim_start);
    let (key, value) = line.split_once('=').ok_or("expected KEY=VALUE")?;
    let key = key.trim();
    if !super::interpolate::is_variable_name(key) {
        return Err("the key must match [A-Za-z_][A-Za-z0-9_]*");
    }
    let value = value.trim();
    let value = if let Some(rest) = value.strip_prefix('\'') {
        let end = rest.find('\'').ok_or("unterminated single quote")?;
        trailing_comment_only(&rest[end + 1..])?;
        rest[..end].to_owned()
    } else if let Some(rest) = value.strip_prefix('"') {
        let (value, after) = double_quoted(rest)?;
        trailing_comment_only(after)?;
        value
    } else {
        let value = match value.find(" #").or_else(|| value.find("\t#")) {
            Some(comment) => &value[..comment],
            None => value,
        };
        value.trim_end().to_owned()
    };
    Ok((key.to_owned(), value))
}

fn double_quoted(rest: &str) -> Result<(String, &str), &'static str> {
    let mut value = String::new();
    let mut chars = rest.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((value, &rest[i + 1..])),
            '\\' => match chars.next() {
                Some((_, 'n')) => value.push('\n'),
                Some((_, 't')) => value.push('\t'),
                Some((_, 'r')) => value.push('\r'),
                Some((_, other)) => value.push(other),
                None => break,
            },
            other => value.push(other),
        }
    }
    Err("unterminated double quote")
}

fn trailing_comment_only(after: &str) -> Result<(), &'static str> {
    let after = after.trim_start();
    if after.is_empty() || after.starts_with('#') {
        Ok(())
    } else {
        Err("unexpected text after the closing quote")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let text = "# comment\n\nA=1\nexport B = two words  # note\nC='lit $X # not'\nD=\"q\\\"uote\\n\" # c\nE=\nF=a#b\n";
        let vars = parse_dotenv(text).unwrap();
        let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            pairs,
            [
                ("A", "1"),
                ("B", "two words"),
                ("C", "lit $X # not"),
                ("D", "q\"uote\n"),
                ("E", ""),
                ("F", "a#b"),
            ]
        );
    }

    #[test]
    fn errors_name_lines_not_contents() {
        let errors = parse_dotenv("OK=1\nno equals\n1BAD=x\nQ='open\n").unwrap_err();
        let lines: Vec<usize> = errors.iter().map(|e| e.line).collect();
        assert_eq!(lines, [2, 3, 4]);
    }
}
