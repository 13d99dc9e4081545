//! `mcphost resources`, `read`, `prompts` and `prompt`: the aggregated
//! resources and prompts, through the daemon or `--direct`.
//!
//! Listings come from `mcphost/resources/list` and `mcphost/prompts/list`
//! (which name each item's server); an engine without those methods is
//! listed through the MCP lists instead, where only a `mcphost://<server>/`
//! URI tells its server.

use anyhow::{Context, Result, bail};
use mcphost::protocol::{RawValue, error_codes, raw_field, set_fields, to_raw};
use serde_json::json;

use crate::backend::{Backend, RpcFailure};
use crate::output::{Out, table};

/// One listed resource or template.
pub struct ResourceRow {
    /// The exposed URI (or template).
    pub uri: String,
    pub name: String,
    pub server: Option<String>,
    pub mime: Option<String>,
    pub raw: Box<RawValue>,
}

/// One listed prompt.
#[derive(Clone)]
pub struct PromptRow {
    /// The catalog name.
    pub name: String,
    pub server: Option<String>,
    /// The server's own name, when known.
    pub prompt: Option<String>,
    pub description: String,
    /// `name` with `*` when required.
    pub arguments: Vec<String>,
    pub raw: Box<RawValue>,
}

fn text_field(raw: &RawValue, key: &str) -> Result<Option<String>> {
    Ok(raw_field::<Option<String>>(raw, key)?.flatten())
}

fn is_method_not_found(e: &anyhow::Error) -> bool {
    e.downcast_ref::<RpcFailure>()
        .is_some_and(|f| f.0.code == error_codes::METHOD_NOT_FOUND)
}

/// Every page of an MCP list.
async fn all_pages(b: &Backend, method: &'static str, field: &str) -> Result<Vec<Box<RawValue>>> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let params = match &cursor {
            Some(c) => Some(to_raw(&json!({ "cursor": c }))?),
            None => None,
        };
        let page = b.raw(method, params, None).await?;
        let got: Vec<Box<RawValue>> = raw_field(&page, field)?.unwrap_or_default();
        items.extend(got);
        match text_field(&page, "nextCursor")? {
            Some(c) if !c.is_empty() => cursor = Some(c),
            _ => return Ok(items),
        }
    }
}

fn resource_row(raw: Box<RawValue>, uri_key: &str) -> Result<ResourceRow> {
    let uri = text_field(&raw, uri_key)?.unwrap_or_default();
    let server = text_field(&raw, "server")?
        .or_else(|| mcphost::registry::uri::unwrap(&uri).map(|(server, _)| server));
    Ok(ResourceRow {
        name: text_field(&raw, "name")?.unwrap_or_default(),
        mime: text_field(&raw, "mimeType")?,
        server,
        uri,
        raw,
    })
}

/// Every resource and template, in the daemon's listing order.
pub async fn all_resources(b: &Backend) -> Result<(Vec<ResourceRow>, Vec<ResourceRow>)> {
    let (resources, templates) = match b.raw("mcphost/resources/list", None, None).await {
        Ok(raw) => (
            raw_field::<Vec<Box<RawValue>>>(&raw, "resources")?.unwrap_or_default(),
            raw_field::<Vec<Box<RawValue>>>(&raw, "resourceTemplates")?.unwrap_or_default(),
        ),
        Err(e) if is_method_not_found(&e) => (
            all_pages(b, "resources/list", "resources").await?,
            all_pages(b, "resources/templates/list", "resourceTemplates").await?,
        ),
        Err(e) => return Err(e),
    };
    Ok((
        resources
            .into_iter()
            .map(|r| resource_row(r, "uri"))
            .collect::<Result<_>>()?,
        templates
            .into_iter()
            .map(|r| resource_row(r, "uriTemplate"))
            .collect::<Result<_>>()?,
    ))
}

/// Every prompt, in the daemon's listing order.
pub async fn all_prompts(b: &Backend) -> Result<Vec<PromptRow>> {
    let items: Vec<Box<RawValue>> = match b.raw("mcphost/prompts/list", None, None).await {
        Ok(raw) => serde_json::from_str(raw.get())?,
        Err(e) if is_method_not_found(&e) => all_pages(b, "prompts/list", "prompts").await?,
        Err(e) => return Err(e),
    };
    items
        .into_iter()
        .map(|raw| {
            #[derive(serde::Deserialize)]
            struct Arg {
                name: String,
                #[serde(default)]
                required: Option<bool>,
            }
            let args: Vec<Arg> = raw_field::<Option<Vec<Arg>>>(&raw, "arguments")?
                .flatten()
                .unwrap_or_default();
            Ok(PromptRow {
                name: text_field(&raw, "name")?.unwrap_or_default(),
                server: text_field(&raw, "server")?,
                prompt: text_field(&raw, "prompt")?,
                description: text_field(&raw, "description")?.unwrap_or_default(),
                arguments: args
                    .into_iter()
                    .map(|a| {
                        if a.required == Some(true) {
                            format!("{}*", a.name)
                        } else {
                            a.name
                        }
                    })
                    .collect(),
                raw,
            })
        })
        .collect()
}

/// A catalog name, or a server's own prompt name when exactly one server
/// has it.
pub async fn resolve_prompt(b: &Backend, name: &str) -> Result<PromptRow> {
    let mut prompts = all_prompts(b).await?;
    if let Some(at) = prompts.iter().position(|p| p.name == name) {
        return Ok(prompts.swap_remove(at));
    }
    // Without the servers' own names (an engine without
    // `mcphost/prompts/list`), a plain `<prefix><sep><name>` is the best guess.
    let suffix = format!("{}{name}", b.separator().await);
    let hits: Vec<&PromptRow> = prompts
        .iter()
        .filter(|p| match &p.prompt {
            Some(own) => own == name,
            None => p.name.ends_with(&suffix),
        })
        .collect();
    match hits.as_slice() {
        [one] => Ok(PromptRow::clone(one)),
        [] => bail!("no prompt named {name:?}; `mcphost prompts` lists them"),
        many => {
            let names: Vec<&str> = many.iter().map(|p| p.name.as_str()).collect();
            bail!(
                "{name:?} is offered by several servers; use one of: {}",
                names.join(", ")
            )
        }
    }
}

pub async fn read(b: &Backend, uri: &str) -> Result<Box<RawValue>> {
    b.raw(
        "resources/read",
        Some(to_raw(&json!({ "uri": uri }))?),
        None,
    )
    .await
}

/// `prompts/get` of `prompt` (as [`resolve_prompt`] found it). An argument
/// its listing marks required and `args` lacks is refused here, by name: a
/// server may answer only "Internal server error". A server's error names
/// the prompt's arguments when it names none of them.
pub async fn get_prompt(
    b: &Backend,
    prompt: &PromptRow,
    args: Option<String>,
) -> Result<Box<RawValue>> {
    let declared = declared_arguments(&prompt.raw)?;
    let mut params = to_raw(&json!({ "name": prompt.name }))?;
    let mut given: Vec<String> = Vec::new();
    if let Some(a) = args {
        let raw = RawValue::from_string(a.clone())
            .with_context(|| format!("ARGS_JSON is not valid JSON: {a}"))?;
        let Ok(object) = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&a)
        else {
            bail!("ARGS_JSON must be a JSON object of strings, e.g. '{{\"name\":\"x\"}}'");
        };
        given = object.keys().cloned().collect();
        params = set_fields(Some(&params), [("arguments".to_owned(), raw)])?;
    }
    if let Some(missing) = missing_required(&declared, &given) {
        bail!("prompt {} needs {missing}", prompt.name);
    }
    b.raw("prompts/get", Some(params), None).await.map_err(|e| {
        match about_arguments(&e.to_string(), &declared) {
            Some(note) => e.context(format!("prompt {}: {note}", prompt.name)),
            None => e,
        }
    })
}

/// A prompt's declared argument: name, description, required.
#[derive(Debug, Clone, serde::Deserialize)]
struct Declared {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    required: Option<bool>,
}

fn declared_arguments(raw: &RawValue) -> Result<Vec<Declared>> {
    Ok(raw_field::<Option<Vec<Declared>>>(raw, "arguments")?
        .flatten()
        .unwrap_or_default())
}

fn describe(a: &Declared) -> String {
    match &a.description {
        Some(d) if !d.is_empty() => format!("argument `{}` ({d})", a.name),
        _ => format!("argument `{}`", a.name),
    }
}

/// "argument `city` (Name of the city); give it as '{"city": "…"}'" for
/// the required arguments `given` lacks.
fn missing_required(declared: &[Declared], given: &[String]) -> Option<String> {
    let missing: Vec<&Declared> = declared
        .iter()
        .filter(|a| a.required == Some(true) && !given.contains(&a.name))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let example: Vec<String> = missing
        .iter()
        .map(|a| format!("\"{}\": \"…\"", a.name))
        .collect();
    let names: Vec<String> = missing.iter().map(|a| describe(a)).collect();
    Some(format!(
        "{}; give it as '{{{}}}'",
        names.join(" and "),
        example.join(", ")
    ))
}

/// For a server's error that names none of the prompt's arguments: what
/// they are, required ones marked.
fn about_arguments(error: &str, declared: &[Declared]) -> Option<String> {
    if declared.is_empty() || declared.iter().any(|a| error.contains(&a.name)) {
        return None;
    }
    let list: Vec<String> = declared
        .iter()
        .map(|a| match a.required {
            Some(true) => format!("{} (required)", a.name),
            _ => a.name.clone(),
        })
        .collect();
    Some(format!("its arguments are {}", list.join(", ")))
}

fn cell(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "-".to_owned())
}

/// The size a base64 text decodes to.
fn decoded_len(b64: &str) -> usize {
    let t = b64.trim_end();
    let pad = t.bytes().rev().take_while(|&b| b == b'=').count();
    let data = t.bytes().filter(|b| !b.is_ascii_whitespace()).count();
    (data / 4 * 3
        + match data % 4 {
            2 => 1,
            3 => 2,
            _ => 0,
        })
    .saturating_sub(if data % 4 == 0 { pad } else { 0 })
}

impl Out {
    pub fn resources(
        &self,
        resources: &[ResourceRow],
        templates: &[ResourceRow],
        server: Option<&str>,
        only_templates: bool,
    ) -> Result<()> {
        let keep = |r: &&ResourceRow| server.is_none_or(|s| r.server.as_deref() == Some(s));
        let resources: Vec<&ResourceRow> = if only_templates {
            Vec::new()
        } else {
            resources.iter().filter(keep).collect()
        };
        let templates: Vec<&ResourceRow> = templates.iter().filter(keep).collect();
        if self.json {
            let join = |rows: &[&ResourceRow]| {
                rows.iter()
                    .map(|r| r.raw.get())
                    .collect::<Vec<_>>()
                    .join(",")
            };
            if only_templates {
                outln!("[{}]", join(&templates));
            } else {
                outln!(
                    "{{\"resources\":[{}],\"resourceTemplates\":[{}]}}",
                    join(&resources),
                    join(&templates)
                );
            }
            return Ok(());
        }
        let rows = |first: &str, list: &[&ResourceRow]| {
            let mut rows = vec![vec![
                first.to_owned(),
                "NAME".to_owned(),
                "SERVER".to_owned(),
                "MIME TYPE".to_owned(),
            ]];
            for r in list {
                rows.push(vec![
                    r.uri.clone(),
                    r.name.clone(),
                    cell(&r.server),
                    cell(&r.mime),
                ]);
            }
            rows
        };
        if !only_templates {
            table(&rows("URI", &resources));
            outln!("");
        }
        table(&rows("URI TEMPLATE", &templates));
        Ok(())
    }

    /// A `ReadResourceResult`: text as it is, blobs summarised.
    pub fn read_result(&self, raw: &RawValue) -> Result<()> {
        if self.json {
            outln!("{}", raw.get());
            return Ok(());
        }
        let contents: Vec<Box<RawValue>> = raw_field(raw, "contents")?.unwrap_or_default();
        let several = contents.len() > 1;
        for c in &contents {
            let uri = text_field(c, "uri")?.unwrap_or_default();
            let mime = text_field(c, "mimeType")?;
            if several {
                outln!(
                    "--- {uri}{}",
                    mime.as_ref().map(|m| format!(" ({m})")).unwrap_or_default()
                );
            }
            if let Some(text) = text_field(c, "text")? {
                outln!("{}", text.strip_suffix('\n').unwrap_or(&text));
            } else if let Some(blob) = text_field(c, "blob")? {
                outln!(
                    "[blob {uri}: {} bytes{}]",
                    decoded_len(&blob),
                    mime.map(|m| format!(", {m}")).unwrap_or_default()
                );
            } else {
                outln!("{}", c.get());
            }
        }
        Ok(())
    }

    pub fn prompts(&self, prompts: &[PromptRow], server: Option<&str>) -> Result<()> {
        let picked: Vec<&PromptRow> = prompts
            .iter()
            .filter(|p| server.is_none_or(|s| p.server.as_deref() == Some(s)))
            .collect();
        if self.json {
            let items: Vec<&str> = picked.iter().map(|p| p.raw.get()).collect();
            outln!("[{}]", items.join(","));
            return Ok(());
        }
        let mut rows = vec![
            ["NAME", "SERVER", "ARGUMENTS", "DESCRIPTION"]
                .map(String::from)
                .to_vec(),
        ];
        for p in picked {
            let d = p.description.lines().next().unwrap_or("");
            let d: String = if d.chars().count() > 60 {
                format!("{}…", d.chars().take(59).collect::<String>())
            } else {
                d.to_owned()
            };
            let args = if p.arguments.is_empty() {
                "-".to_owned()
            } else {
                p.arguments.join(",")
            };
            rows.push(vec![p.name.clone(), cell(&p.server), args, d]);
        }
        table(&rows);
        Ok(())
    }

    /// A `GetPromptResult`: each message under its role.
    pub fn prompt_result(&self, raw: &RawValue) -> Result<()> {
        if self.json {
            outln!("{}", raw.get());
            return Ok(());
        }
        let messages: Vec<Box<RawValue>> = raw_field(raw, "messages")?.unwrap_or_default();
        for m in &messages {
            let role = text_field(m, "role")?.unwrap_or_else(|| "?".to_owned());
            outln!("[{role}]");
            let Some(content) = raw_field::<Box<RawValue>>(m, "content")? else {
                continue;
            };
            let items: Vec<Box<RawValue>> = if content.get().trim_start().starts_with('[') {
                serde_json::from_str(content.get())?
            } else {
                vec![content]
            };
            for c in &items {
                self.content_item(c)?;
            }
        }
        Ok(())
    }

    fn content_item(&self, c: &RawValue) -> Result<()> {
        let kind = text_field(c, "type")?;
        match kind.as_deref() {
            Some("text") => {
                let text = text_field(c, "text")?.unwrap_or_default();
                outln!("{}", text.strip_suffix('\n').unwrap_or(&text));
            }
            Some("resource_link") => outln!(
                "[resource link: {}]",
                text_field(c, "uri")?.unwrap_or_default()
            ),
            Some("resource") => {
                let r: Option<Box<RawValue>> = raw_field(c, "resource")?;
                let Some(r) = r else {
                    outln!("[resource]");
                    return Ok(());
                };
                let uri = text_field(&r, "uri")?.unwrap_or_default();
                match (text_field(&r, "text")?, text_field(&r, "blob")?) {
                    (Some(text), _) => {
                        outln!("[resource {uri}]");
                        outln!("{}", text.strip_suffix('\n').unwrap_or(&text));
                    }
                    (None, Some(blob)) => outln!(
                        "[resource {uri}: {} bytes{}]",
                        decoded_len(&blob),
                        text_field(&r, "mimeType")?
                            .map(|m| format!(", {m}"))
                            .unwrap_or_default()
                    ),
                    (None, None) => outln!("[resource {uri}]"),
                }
            }
            Some(other) => outln!(
                "[{other} content{}]",
                text_field(c, "mimeType")?
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ),
            None => outln!("{}", c.get()),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Declared, about_arguments, decoded_len, missing_required};

    #[test]
    fn a_prompts_missing_or_unnamed_arguments_are_named() {
        let declared: Vec<Declared> = serde_json::from_str(
            r#"[{"name": "city", "description": "Name of the city", "required": true},
                {"name": "state"}]"#,
        )
        .unwrap();
        assert_eq!(
            missing_required(&declared, &["state".to_owned()]).as_deref(),
            Some("argument `city` (Name of the city); give it as '{\"city\": \"…\"}'")
        );
        assert_eq!(missing_required(&declared, &["city".to_owned()]), None);
        assert_eq!(
            about_arguments("Internal server error", &declared).as_deref(),
            Some("its arguments are city (required), state")
        );
        assert_eq!(about_arguments("city: expected string", &declared), None);
    }

    #[test]
    fn base64_sizes() {
        for (text, n) in [
            ("", 0),
            ("YQ==", 1),
            ("YWI=", 2),
            ("YWJj", 3),
            ("YWJjZA==", 4),
            ("YWJjZA", 4),
            ("YWJj\nZA==\n", 4),
        ] {
            assert_eq!(decoded_len(text), n, "{text:?}");
        }
    }
}
