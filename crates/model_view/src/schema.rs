//! Provider schema profiles: the input schemas of `tools/list` rewritten so
//! a named model provider accepts them. The rule for each change, and the
//! provider documentation or error behind it, is in docs/schema-profiles.md.
//!
//! Only what a model is shown changes: `tools/call` arguments are relayed
//! as the client sent them. The schema is rewritten as a tree whose leaves
//! stay raw JSON text, so numbers a `Value` would mangle (`1e400`, big
//! integers, `1.10`) and key order survive.

use indexmap::IndexMap;
use serde_json::value::RawValue;

pub use mcphost_config::model_view::SchemaProfile;

/// How many `$ref`s deep Gemini schemas are inlined; past it a reference
/// becomes an untyped object (recursive schemas would never end).
pub const MAX_REF_DEPTH: usize = 6;

/// OpenAI's documented string formats (Structured Outputs); others are
/// dropped.
const OPENAI_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// The fields of Gemini's `Schema` (an OpenAPI 3.0 subset); others are
/// rejected with "Unknown name", so they are dropped.
const GEMINI_KEYS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "propertyOrdering",
    "default",
    "items",
    "minimum",
    "maximum",
];

/// A JSON document as a tree of objects and arrays whose other values stay
/// raw text.
#[derive(Debug, Clone)]
enum J {
    Obj(IndexMap<String, J>),
    Arr(Vec<J>),
    Raw(Box<RawValue>),
}

type Obj = IndexMap<String, J>;

impl J {
    fn parse(raw: &RawValue) -> Result<J, serde_json::Error> {
        let t = raw.get().trim_start();
        if t.starts_with('{') {
            let m: IndexMap<String, Box<RawValue>> = serde_json::from_str(raw.get())?;
            let mut out = IndexMap::with_capacity(m.len());
            for (k, v) in m {
                out.insert(k, J::parse(&v)?);
            }
            Ok(J::Obj(out))
        } else if t.starts_with('[') {
            let v: Vec<Box<RawValue>> = serde_json::from_str(raw.get())?;
            v.iter()
                .map(|x| J::parse(x))
                .collect::<Result<_, _>>()
                .map(J::Arr)
        } else {
            Ok(J::Raw(raw.to_owned()))
        }
    }

    fn write(&self, out: &mut String) {
        match self {
            J::Raw(r) => out.push_str(r.get()),
            J::Arr(v) => {
                out.push('[');
                for (i, x) in v.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    x.write(out);
                }
                out.push(']');
            }
            J::Obj(m) => {
                out.push('{');
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&serde_json::to_string(k).unwrap_or_else(|_| "\"\"".into()));
                    out.push(':');
                    v.write(out);
                }
                out.push('}');
            }
        }
    }

    fn text(&self) -> String {
        let mut s = String::new();
        self.write(&mut s);
        s
    }

    /// A JSON string.
    fn string(s: &str) -> J {
        J::Raw(
            serde_json::value::to_raw_value(s)
                .unwrap_or_else(|_| RawValue::from_string("\"\"".into()).unwrap_or_default()),
        )
    }

    fn literal(s: &'static str) -> J {
        J::Raw(RawValue::from_string(s.to_owned()).unwrap_or_default())
    }

    fn as_str(&self) -> Option<String> {
        match self {
            J::Raw(r) if r.get().starts_with('"') => serde_json::from_str(r.get()).ok(),
            _ => None,
        }
    }

    fn is_null(&self) -> bool {
        matches!(self, J::Raw(r) if r.get() == "null")
    }
}

fn obj_type(o: &Obj) -> Option<String> {
    o.get("type").and_then(J::as_str)
}

/// A listed tool object with its `inputSchema` normalised for `profile`;
/// every other member stays byte for byte. A tool whose schema is not
/// JSON this can read is returned as it is.
pub fn normalize_tool(
    tool: &RawValue,
    profile: SchemaProfile,
) -> Result<Box<RawValue>, serde_json::Error> {
    let mut map: IndexMap<String, Box<RawValue>> = serde_json::from_str(tool.get())?;
    let Some(schema) = map.get("inputSchema") else {
        return Ok(tool.to_owned());
    };
    let Ok(tree) = J::parse(schema) else {
        return Ok(tool.to_owned());
    };
    let out = normalize(tree, profile).text();
    map.insert("inputSchema".to_owned(), RawValue::from_string(out)?);
    serde_json::value::to_raw_value(&map)
}

/// `schema` (JSON text) normalised for `profile`, as text; for fixtures and
/// callers outside a tool object.
pub fn normalize_text(schema: &str, profile: SchemaProfile) -> Result<String, serde_json::Error> {
    let raw: Box<RawValue> = serde_json::from_str(schema)?;
    Ok(normalize(J::parse(&raw)?, profile).text())
}

fn normalize(schema: J, profile: SchemaProfile) -> J {
    // A root that is not an object schema cannot describe arguments.
    let mut root = match schema {
        J::Obj(o) => o,
        _ => Obj::new(),
    };
    root.shift_remove("$schema");
    let defs = definitions(&root);
    if profile == SchemaProfile::Gemini {
        let mut node = J::Obj(root);
        inline_refs(&mut node, &defs, 0);
        root = match node {
            J::Obj(o) => o,
            _ => Obj::new(),
        };
        root.shift_remove("$defs");
        root.shift_remove("definitions");
    }
    flatten_root(&mut root, &defs);
    if profile == SchemaProfile::OpenAi {
        for k in ["enum", "const", "not"] {
            root.shift_remove(k);
        }
    }
    let mut node = J::Obj(root);
    match profile {
        SchemaProfile::OpenAi => walk(&mut node, &openai_node),
        SchemaProfile::Gemini => walk(&mut node, &gemini_node),
        SchemaProfile::Anthropic => {}
    }
    node
}

/// `$defs` and `definitions` of the root, by name.
fn definitions(root: &Obj) -> IndexMap<String, J> {
    let mut out = IndexMap::new();
    for key in ["$defs", "definitions"] {
        if let Some(J::Obj(m)) = root.get(key) {
            for (k, v) in m {
                out.insert(format!("#/{key}/{k}"), v.clone());
            }
        }
    }
    out
}

/// The definition a local `$ref` names (`#/$defs/X`, `#/definitions/X`).
fn resolve<'d>(r: &str, defs: &'d IndexMap<String, J>) -> Option<&'d J> {
    let unescaped = r.replace("~1", "/").replace("~0", "~");
    defs.get(r).or_else(|| defs.get(&unescaped))
}

fn inline_refs(node: &mut J, defs: &IndexMap<String, J>, depth: usize) {
    match node {
        J::Arr(v) => v.iter_mut().for_each(|x| inline_refs(x, defs, depth)),
        J::Raw(_) => {}
        J::Obj(o) => {
            if let Some(r) = o.get("$ref").and_then(J::as_str) {
                let mut siblings = o.clone();
                siblings.shift_remove("$ref");
                let target = match resolve(&r, defs) {
                    Some(t) if depth < MAX_REF_DEPTH => t.clone(),
                    // Too deep (recursive) or not a local definition.
                    _ => {
                        let mut any = Obj::new();
                        any.insert("type".to_owned(), J::literal("\"object\""));
                        J::Obj(any)
                    }
                };
                let mut merged = match target {
                    J::Obj(t) => t,
                    _ => Obj::new(),
                };
                // The reference's own keywords (a description) win.
                for (k, v) in siblings {
                    merged.insert(k, v);
                }
                *node = J::Obj(merged);
                inline_refs(node, defs, depth.saturating_add(1));
                return;
            }
            for (k, v) in o.iter_mut() {
                if k != "$defs" && k != "definitions" {
                    inline_refs(v, defs, depth);
                }
            }
        }
    }
}

/// A root `oneOf`/`anyOf`/`allOf` becomes one object: the branches'
/// properties merged (the first definition of a name wins), required the
/// names every branch requires (all of them for `allOf`), then
/// `type: object` and `properties` ensured.
fn flatten_root(root: &mut Obj, defs: &IndexMap<String, J>) {
    for key in ["oneOf", "anyOf", "allOf"] {
        let Some(J::Arr(branches)) = root.shift_remove(key) else {
            continue;
        };
        let mut props: Obj = match root.shift_remove("properties") {
            Some(J::Obj(p)) => p,
            _ => Obj::new(),
        };
        let mut required: Vec<String> = strings(root.get("required"));
        let mut common: Option<Vec<String>> = None;
        for b in &branches {
            let b = match b {
                J::Obj(o) => match o.get("$ref").and_then(J::as_str) {
                    Some(r) => match resolve(&r, defs) {
                        Some(J::Obj(t)) => t,
                        _ => continue,
                    },
                    None => o,
                },
                _ => continue,
            };
            if let Some(J::Obj(p)) = b.get("properties") {
                for (k, v) in p {
                    props.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
            let req = strings(b.get("required"));
            if key == "allOf" {
                for r in req {
                    if !required.contains(&r) {
                        required.push(r);
                    }
                }
            } else {
                common = Some(match common {
                    None => req,
                    Some(c) => c.into_iter().filter(|r| req.contains(r)).collect(),
                });
            }
        }
        for r in common.unwrap_or_default() {
            if !required.contains(&r) {
                required.push(r);
            }
        }
        root.insert("properties".to_owned(), J::Obj(props));
        if required.is_empty() {
            root.shift_remove("required");
        } else {
            root.insert(
                "required".to_owned(),
                J::Arr(required.iter().map(|r| J::string(r)).collect()),
            );
        }
    }
    if obj_type(root).as_deref() != Some("object") {
        root.insert("type".to_owned(), J::literal("\"object\""));
    }
    if !matches!(root.get("properties"), Some(J::Obj(_))) {
        root.insert("properties".to_owned(), J::Obj(Obj::new()));
    }
}

fn strings(v: Option<&J>) -> Vec<String> {
    match v {
        Some(J::Arr(a)) => a.iter().filter_map(J::as_str).collect(),
        _ => Vec::new(),
    }
}

/// Apply `f` to every schema object, top down, through the keywords whose
/// values are schemas.
fn walk(node: &mut J, f: &dyn Fn(&mut Obj)) {
    let J::Obj(o) = node else { return };
    f(o);
    for (k, v) in o.iter_mut() {
        match k.as_str() {
            "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => {
                if let J::Obj(m) = v {
                    for s in m.values_mut() {
                        walk(s, f);
                    }
                }
            }
            "items"
            | "additionalProperties"
            | "not"
            | "if"
            | "then"
            | "else"
            | "contains"
            | "propertyNames"
            | "unevaluatedProperties"
            | "unevaluatedItems" => match v {
                J::Arr(a) => a.iter_mut().for_each(|s| walk(s, f)),
                other => walk(other, f),
            },
            "anyOf" | "oneOf" | "allOf" | "prefixItems" => {
                if let J::Arr(a) = v {
                    a.iter_mut().for_each(|s| walk(s, f));
                }
            }
            _ => {}
        }
    }
}

fn openai_node(o: &mut Obj) {
    // The Responses API and strict mode refuse `oneOf` at any depth;
    // `anyOf` accepts whatever `oneOf` accepted.
    if !o.contains_key("anyOf")
        && let Some(v) = o.shift_remove("oneOf")
    {
        o.insert("anyOf".to_owned(), v);
    }
    if let Some(f) = o.get("format").and_then(J::as_str)
        && !OPENAI_FORMATS.contains(&f.as_str())
    {
        o.shift_remove("format");
    }
}

fn gemini_node(o: &mut Obj) {
    merge_all_of(o);
    if !o.contains_key("anyOf")
        && let Some(v) = o.shift_remove("oneOf")
    {
        o.insert("anyOf".to_owned(), v);
    }
    nullable_types(o);
    drop_null_branches(o);
    string_enums(o);
    let ty = obj_type(o);
    if let Some(f) = o.get("format").and_then(J::as_str) {
        let ok = match ty.as_deref() {
            Some("string") => f == "enum" || f == "date-time",
            Some("number") => f == "float" || f == "double",
            Some("integer") => f == "int32" || f == "int64",
            _ => false,
        };
        if !ok {
            o.shift_remove("format");
        }
    }
    o.retain(|k, _| GEMINI_KEYS.contains(&k.as_str()));
    if ty.as_deref() == Some("array") && !o.contains_key("items") {
        let mut any = Obj::new();
        any.insert("type".to_owned(), J::literal("\"string\""));
        o.insert("items".to_owned(), J::Obj(any));
    }
    if o.get("default").is_some_and(J::is_null) {
        o.shift_remove("default");
    }
}

/// `allOf`: one schema with every branch's keywords (first wins),
/// properties merged and required unioned.
fn merge_all_of(o: &mut Obj) {
    if let Some(J::Arr(branches)) = o.shift_remove("allOf") {
        for b in branches {
            let J::Obj(b) = b else { continue };
            for (k, v) in b {
                match (k.as_str(), o.get_mut(&k), v) {
                    ("properties", Some(J::Obj(mine)), J::Obj(theirs)) => {
                        for (pk, pv) in theirs {
                            mine.entry(pk).or_insert(pv);
                        }
                    }
                    ("required", Some(J::Arr(mine)), J::Arr(theirs)) => {
                        for r in theirs {
                            let text = r.text();
                            if !mine.iter().any(|m| m.text() == text) {
                                mine.push(r);
                            }
                        }
                    }
                    (_, Some(_), _) => {}
                    (_, None, v) => {
                        o.insert(k, v);
                    }
                }
            }
        }
    }
}

/// Nullability is `nullable`, not a type (Gemini takes one type).
fn nullable_types(o: &mut Obj) {
    if let Some(J::Arr(types)) = o.get("type").cloned() {
        let names: Vec<String> = types.iter().filter_map(J::as_str).collect();
        if names.iter().any(|t| t == "null") {
            o.insert("nullable".to_owned(), J::literal("true"));
        }
        match names.iter().find(|t| *t != "null") {
            Some(t) => {
                o.insert("type".to_owned(), J::string(t));
            }
            None => {
                o.shift_remove("type");
            }
        }
    }
}

/// Nullability is `nullable`, not an `anyOf` branch; a single branch left
/// is merged into the schema.
fn drop_null_branches(o: &mut Obj) {
    if let Some(J::Arr(branches)) = o.get_mut("anyOf") {
        let before = branches.len();
        branches.retain(|b| !matches!(b, J::Obj(m) if obj_type(m).as_deref() == Some("null")));
        if branches.len() < before {
            o.insert("nullable".to_owned(), J::literal("true"));
        }
        if let Some(J::Arr(branches)) = o.get("anyOf")
            && branches.len() == 1
            && let Some(J::Obj(only)) = branches.first().cloned()
        {
            o.shift_remove("anyOf");
            for (k, v) in only {
                o.entry(k).or_insert(v);
            }
        }
    }
}

/// `const` is a one-member `enum`; enums are lists of strings, on string
/// schemas only.
fn string_enums(o: &mut Obj) {
    if let Some(c) = o.shift_remove("const") {
        o.entry("enum".to_owned()).or_insert(J::Arr(vec![c]));
    }
    if let Some(J::Arr(members)) = o.get("enum").cloned() {
        let all_strings = members.iter().all(|m| m.as_str().is_some());
        match obj_type(o).as_deref() {
            None if all_strings => {
                o.insert("type".to_owned(), J::literal("\"string\""));
            }
            Some("string") => {
                let as_strings = members
                    .iter()
                    .map(|m| {
                        m.as_str()
                            .map_or_else(|| J::string(&m.text()), |s| J::string(&s))
                    })
                    .collect();
                o.insert("enum".to_owned(), J::Arr(as_strings));
            }
            _ => {
                o.shift_remove("enum");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_leaves_and_key_order_survive() {
        let s = r#"{"type":"object","properties":{"zeta":{"type":"integer","default":12345678901234567890123},"alpha":{"type":"number","minimum":0.10,"maximum":1e400}}}"#;
        for p in SchemaProfile::ALL {
            let out = normalize_text(s, p).unwrap();
            assert!(out.contains("12345678901234567890123"), "{p:?}: {out}");
            assert!(
                out.contains("0.10") && out.contains("1e400"),
                "{p:?}: {out}"
            );
            assert!(out.find("zeta") < out.find("alpha"), "{p:?}: {out}");
        }
    }
}
