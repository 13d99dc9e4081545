//! Pieces of the stateless revision (2026-07-28) that only the client
//! knows: which tool parameters a server wants mirrored into HTTP headers
//! (`x-mcp-header`), and the header values of one request.

use serde_json::Value;
use serde_json::value::RawValue;

use mcphost_protocol::{Tool, methods, raw_field};
use mcphost_transport::StatelessHeaders;

/// The parameters of one tool marked `x-mcp-header`: header name and the
/// chain of `properties` keys that reaches the value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HeaderParams(Vec<(String, Vec<String>)>);

/// Largest integer a header may carry (JavaScript's safe range).
const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// Read a tool's `x-mcp-header` annotations; `Err` says why the tool
/// definition is invalid (the spec's constraints), and such a tool must not
/// be offered over HTTP.
pub(crate) fn header_params(tool: &Tool) -> Result<HeaderParams, String> {
    let schema: Option<Value> = raw_field(&tool.raw, "inputSchema").map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    if let Some(schema) = &schema {
        walk(schema, Some(&mut Vec::new()), &mut out)?;
    }
    let mut seen = std::collections::HashSet::new();
    for (name, _) in &out {
        if !seen.insert(name.to_ascii_lowercase()) {
            return Err(format!("x-mcp-header {name:?} is used twice"));
        }
    }
    Ok(HeaderParams(out))
}

/// `path` is `Some` while the schema is reachable from the root through
/// `properties` keys alone: only there may an annotation stand.
fn walk(
    schema: &Value,
    path: Option<&mut Vec<String>>,
    out: &mut Vec<(String, Vec<String>)>,
) -> Result<(), String> {
    match schema {
        Value::Object(map) => {
            let mut path = path;
            if let Some(h) = map.get("x-mcp-header") {
                let at = match path.as_deref() {
                    Some(p) if !p.is_empty() => p.clone(),
                    _ => {
                        return Err(
                            "x-mcp-header stands where no properties chain reaches it".to_owned()
                        );
                    }
                };
                let name = h
                    .as_str()
                    .ok_or_else(|| format!("x-mcp-header at {} is not a string", at.join(".")))?;
                if name.is_empty() || !name.bytes().all(is_tchar) {
                    return Err(format!("x-mcp-header {name:?} is not an HTTP field name"));
                }
                match map.get("type").and_then(Value::as_str) {
                    Some("string" | "integer" | "boolean") => {}
                    other => {
                        return Err(format!(
                            "x-mcp-header {name:?} is on a parameter of type {}; only string, integer and boolean may be",
                            other.unwrap_or("(none)")
                        ));
                    }
                }
                out.push((name.to_owned(), at));
            }
            for (k, v) in map {
                if k == "properties"
                    && let (Some(p), Value::Object(props)) = (path.as_deref_mut(), v)
                {
                    for (name, sub) in props {
                        p.push(name.clone());
                        let r = walk(sub, Some(p), out);
                        p.pop();
                        r?;
                    }
                } else if k != "x-mcp-header" {
                    walk(v, None, out)?;
                }
            }
            Ok(())
        }
        Value::Array(items) => items.iter().try_for_each(|v| walk(v, None, out)),
        _ => Ok(()),
    }
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

impl HeaderParams {
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `(name, value)` for each annotated parameter present in `arguments`,
    /// in its string form; absent and `null` values have no header.
    pub(crate) fn values(&self, arguments: Option<&RawValue>) -> Vec<(String, String)> {
        let Some(args) = arguments.and_then(|a| serde_json::from_str::<Value>(a.get()).ok()) else {
            return Vec::new();
        };
        self.0
            .iter()
            .filter_map(|(name, path)| {
                let v = path.iter().try_fold(&args, |v, k| v.get(k))?;
                let s = match v {
                    Value::String(s) => s.clone(),
                    Value::Bool(b) => b.to_string(),
                    Value::Number(n) => match n.as_f64() {
                        // 42.0 is the integer 42; the server compares numerically.
                        Some(f) if f.fract() == 0.0 && f.abs() <= MAX_SAFE_INTEGER as f64 => {
                            format!("{}", f as i64)
                        }
                        _ => n.to_string(),
                    },
                    _ => return None,
                };
                Some((name.clone(), s))
            })
            .collect()
    }
}

/// The header values of one request of the stateless revision;
/// `tool_params` gives a tool's `x-mcp-header` parameters by its name.
pub(crate) fn headers(
    version: &str,
    method: &str,
    params: &RawValue,
    tool_params: impl FnOnce(&str) -> Option<std::sync::Arc<HeaderParams>>,
) -> StatelessHeaders {
    let key = match method {
        methods::TOOLS_CALL | methods::PROMPTS_GET => Some("name"),
        methods::RESOURCES_READ => Some("uri"),
        _ => None,
    };
    let name = key.and_then(|k| raw_field::<String>(params, k).ok().flatten());
    let tool = match (method, &name) {
        (methods::TOOLS_CALL, Some(n)) => tool_params(n).filter(|t| !t.is_empty()),
        _ => None,
    };
    let params_headers = match tool {
        Some(t) => {
            let args = raw_field::<Box<RawValue>>(params, "arguments")
                .ok()
                .flatten();
            t.values(args.as_deref())
        }
        None => Vec::new(),
    };
    StatelessHeaders {
        protocol_version: version.to_owned(),
        method: method.to_owned(),
        name,
        params: params_headers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(schema: &str) -> Tool {
        serde_json::from_str(&format!(r#"{{"name":"t","inputSchema":{schema}}}"#)).unwrap()
    }

    #[test]
    fn annotations_reached_through_properties_are_read() {
        let t = tool(
            r#"{"type":"object","properties":{
                "region":{"type":"string","x-mcp-header":"Region"},
                "n":{"type":"integer","x-mcp-header":"N"},
                "deep":{"type":"object","properties":{"on":{"type":"boolean","x-mcp-header":"On"}}},
                "q":{"type":"string"}}}"#,
        );
        let p = header_params(&t).unwrap();
        let got = |a: &RawValue| {
            let mut v = p.values(Some(a));
            v.sort();
            v
        };
        let args = RawValue::from_string(
            r#"{"region":"us-west1","n":42.0,"deep":{"on":true},"q":"x"}"#.to_owned(),
        )
        .unwrap();
        assert_eq!(
            got(&args),
            vec![
                ("N".to_owned(), "42".to_owned()),
                ("On".to_owned(), "true".to_owned()),
                ("Region".to_owned(), "us-west1".to_owned()),
            ]
        );
        let none = RawValue::from_string(r#"{"region":null}"#.to_owned()).unwrap();
        assert!(got(&none).is_empty());
    }

    #[test]
    fn invalid_annotations_reject_the_tool() {
        for (schema, why) in [
            (
                r#"{"properties":{"a":{"type":"number","x-mcp-header":"A"}}}"#,
                "number",
            ),
            (
                r#"{"properties":{"a":{"type":"string","x-mcp-header":"A B"}}}"#,
                "field name",
            ),
            (
                r#"{"properties":{"a":{"type":"string","x-mcp-header":""}}}"#,
                "field name",
            ),
            (
                r#"{"properties":{"a":{"type":"string","x-mcp-header":"X"},"b":{"type":"string","x-mcp-header":"x"}}}"#,
                "twice",
            ),
            (
                r#"{"properties":{"a":{"type":"array","items":{"type":"string","x-mcp-header":"A"}}}}"#,
                "no properties chain",
            ),
            (
                r#"{"anyOf":[{"properties":{"a":{"type":"string","x-mcp-header":"A"}}}]}"#,
                "no properties chain",
            ),
            (
                r#"{"type":"string","x-mcp-header":"Root"}"#,
                "no properties chain",
            ),
        ] {
            let e = header_params(&tool(schema)).unwrap_err();
            assert!(e.contains(why), "{schema}: {e}");
        }
    }

    #[test]
    fn request_headers_name_the_target() {
        let p = RawValue::from_string(r#"{"uri":"file:///a b","_meta":{}}"#.to_owned()).unwrap();
        let h = headers("2026-07-28", methods::RESOURCES_READ, &p, |_| None);
        assert_eq!(h.name.as_deref(), Some("file:///a b"));
        assert_eq!(h.method, "resources/read");
        let empty = RawValue::from_string("{}".to_owned()).unwrap();
        let l = headers("2026-07-28", methods::TOOLS_LIST, &empty, |_| None);
        assert!(l.name.is_none() && l.params.is_empty());
    }
}
