//! Each dialect's `${…}` references, rewritten into ours (`${VAR}`,
//! `${VAR:-default}`, `${env:VAR}`, `${userHome}`, `$$` for a literal `$`;
//! see `config::interpolate`). Text a dialect takes literally is escaped, so
//! it stays literal here too.

use std::path::Path;

use crate::interpolate::is_variable_name;

/// How a dialect treats `$` in its strings.
#[derive(Debug, Clone, Copy)]
pub(super) enum Rules<'a> {
    /// No references at all (Claude Desktop, Zed, Goose).
    Literal,
    /// `${VAR}` and `${VAR:-default}`, the shell's forms (Claude Code).
    Shell,
    /// VS Code and Cursor: `${env:VAR}`, `${userHome}`, `${workspaceFolder}`,
    /// `${workspaceFolderBasename}`, `${pathSeparator}`/`${/}`, and with
    /// `inputs`, `${input:ID}`.
    Editor {
        workspace: Option<&'a Path>,
        inputs: bool,
    },
    /// Windsurf: `${env:VAR}` (and `${VAR}`); `${file:…}` cannot be kept.
    Windsurf,
    /// mark3labs/mcphost: `${env://VAR}` and `${env://VAR:-default}`.
    Mark3labs,
    /// Continue: `${{ secrets.NAME }}` and `${{ inputs.NAME }}` templates.
    Continue,
}

/// A string in our syntax, with what it needs.
#[derive(Debug, Default)]
pub(super) struct Rewritten {
    pub text: String,
    /// `${input:ID}` ids, left in place for [`super::Imported::fill_inputs`].
    pub inputs: Vec<String>,
    pub notes: Vec<String>,
}

/// `s` as literal text in our syntax: a `$` before `{` or `$` is doubled.
pub(super) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '$' && matches!(chars.peek(), Some('{') | Some('$')) {
            out.push('$');
        }
    }
    out
}

impl Rules<'_> {
    /// `raw` in our syntax, or why it cannot be.
    pub(super) fn rewrite(&self, raw: &str) -> Result<Rewritten, String> {
        let mut out = Rewritten::default();
        if !raw.contains('$') {
            out.text = raw.to_owned();
            return Ok(out);
        }
        if let Rules::Literal = self {
            out.text = escape(raw);
            return Ok(out);
        }
        let mut rest = raw;
        while let Some(at) = rest.find('$') {
            out.text.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            if let Some(tail) = after.strip_prefix('$') {
                // Literal in every dialect here: keep it literal.
                out.text.push_str("$$$$");
                rest = tail;
                continue;
            }
            if let (Rules::Continue, Some(tail)) = (self, after.strip_prefix("{{"))
                && let Some(end) = tail.find("}}")
            {
                let body = tail[..end].trim();
                let name = body
                    .strip_prefix("secrets.")
                    .or_else(|| body.strip_prefix("inputs."));
                match name {
                    Some(n) if is_variable_name(n) => {
                        out.text.push_str(&format!("${{{n}}}"));
                        out.notes.push(format!(
                            "Continue's ${{{{ {body} }}}} became the environment variable ${{{n}}}; set {n} where mcphost runs"
                        ));
                    }
                    _ => {
                        return Err(format!(
                            "uses Continue's ${{{{ {body} }}}}, which mcphost cannot resolve"
                        ));
                    }
                }
                rest = &tail[end + 2..];
                continue;
            }
            let Some(tail) = after.strip_prefix('{') else {
                out.text.push('$');
                rest = after;
                continue;
            };
            let Some(end) = tail.find('}') else {
                // Unterminated: literal there, literal here.
                out.text.push_str("$${");
                rest = tail;
                continue;
            };
            let body = &tail[..end];
            rest = &tail[end + 1..];
            self.reference(body, &mut out)?;
        }
        out.text.push_str(rest);
        Ok(out)
    }

    /// One `${body}`, appended to `out` in our syntax.
    fn reference(&self, body: &str, out: &mut Rewritten) -> Result<(), String> {
        let shell_form = |b: &str| {
            let name = b.split_once(":-").map_or(b, |(n, _)| n);
            is_variable_name(name) && !b.split_once(":-").is_some_and(|(_, d)| d.contains('}'))
        };
        let keep = |out: &mut Rewritten| out.text.push_str(&format!("${{{body}}}"));
        let literal = |out: &mut Rewritten| out.text.push_str(&format!("$${{{body}}}"));
        match self {
            Rules::Literal => literal(out),
            Rules::Shell => {
                if shell_form(body) {
                    keep(out)
                } else {
                    literal(out)
                }
            }
            Rules::Windsurf => {
                if let Some(name) = body.strip_prefix("env:")
                    && is_variable_name(name)
                {
                    keep(out)
                } else if shell_form(body) && !body.contains(":-") {
                    keep(out)
                } else if body.starts_with("file:") {
                    return Err(format!(
                        "uses Windsurf's ${{{body}}} (a file's contents), which mcphost cannot read into a value"
                    ));
                } else {
                    literal(out)
                }
            }
            Rules::Mark3labs => match body.strip_prefix("env://") {
                Some(inner) if shell_form(inner) => {
                    out.text.push_str(&format!("${{{inner}}}"));
                }
                Some(_) => return Err(format!("${{{body}}} is not a variable reference")),
                None => literal(out),
            },
            Rules::Continue => literal(out),
            Rules::Editor { workspace, inputs } => {
                if let Some(name) = body.strip_prefix("env:") {
                    if is_variable_name(name) {
                        keep(out);
                    } else {
                        return Err(format!("${{{body}}} is not a variable reference"));
                    }
                } else if body == "userHome" {
                    keep(out);
                } else if body == "pathSeparator" || body == "/" {
                    out.text.push(std::path::MAIN_SEPARATOR);
                } else if body == "workspaceFolder" || body == "workspaceFolderBasename" {
                    let Some(ws) = workspace else {
                        return Err(format!(
                            "uses ${{{body}}} outside a workspace; import it from the project's own file (--project DIR)"
                        ));
                    };
                    let value = if body == "workspaceFolder" {
                        ws.display().to_string()
                    } else {
                        ws.file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default()
                    };
                    out.text.push_str(&escape(&value));
                    let note = format!("${{{body}}} became {value}");
                    if !out.notes.contains(&note) {
                        out.notes.push(note);
                    }
                } else if let Some(id) = body.strip_prefix("input:")
                    && *inputs
                {
                    keep(out);
                    if !out.inputs.iter().any(|i| i == id) {
                        out.inputs.push(id.to_owned());
                    }
                } else {
                    return Err(format!(
                        "uses ${{{body}}}, which only the editor can resolve"
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_text_stays_literal() {
        assert_eq!(escape("cost: $5"), "cost: $5");
        assert_eq!(escape("p${w}d$$"), "p$${w}d$$$");
        let r = Rules::Literal.rewrite("${HOME}/x").unwrap();
        assert_eq!(r.text, "$${HOME}/x");
    }

    #[test]
    fn shell_forms_are_ours() {
        let r = Rules::Shell.rewrite("${A} ${B:-x} ${c d} $5").unwrap();
        assert_eq!(r.text, "${A} ${B:-x} $${c d} $5");
    }

    #[test]
    fn editor_forms() {
        let ws = Path::new("/w/proj");
        let rules = Rules::Editor {
            workspace: Some(ws),
            inputs: true,
        };
        let r = rules
            .rewrite("${workspaceFolder}/a ${env:TOK} ${input:key} ${userHome}")
            .unwrap();
        assert_eq!(r.text, "/w/proj/a ${env:TOK} ${input:key} ${userHome}");
        assert_eq!(r.inputs, vec!["key"]);
        let user = Rules::Editor {
            workspace: None,
            inputs: false,
        };
        assert!(user.rewrite("${workspaceFolder}").is_err());
        assert!(user.rewrite("${input:x}").is_err());
        assert!(user.rewrite("${config:editor.x}").is_err());
    }

    #[test]
    fn mark3labs_and_continue() {
        let r = Rules::Mark3labs
            .rewrite("${env://TOKEN} ${env://R:-eu} ${other}")
            .unwrap();
        assert_eq!(r.text, "${TOKEN} ${R:-eu} $${other}");
        let r = Rules::Continue
            .rewrite("Bearer ${{ secrets.API_KEY }}")
            .unwrap();
        assert_eq!(r.text, "Bearer ${API_KEY}");
        assert_eq!(r.notes.len(), 1);
    }
}
