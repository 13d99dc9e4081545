//! Hidden text in the definitions mcphost lists (issue 24, "hidden text"):
//! characters a person reviewing a tool does not see but a model reads.
//!
//! [`scan`] finds them in one string, [`strip`] removes exactly what it
//! finds; [`scan_tool`] and [`clean`] apply both to the descriptions and
//! titles of a listed tool, prompt, resource or template (and, for tools,
//! every `description` and `title` inside `inputSchema`/`outputSchema`),
//! keeping every other byte of the object as the server sent it.
//!
//! What counts as hidden is an explicit list, not a Unicode property: the
//! general category `Cf` also holds visible, script-required signs (U+0600
//! Arabic number sign, U+110BD Kaithi number sign), and `Default_Ignorable`
//! holds the selector that follows almost every emoji (U+FE0F). The list
//! names the characters used to smuggle text or reorder it, and two
//! context rules keep ordinary emoji unflagged (see [`Kind`]).
//!
//! Results are never passed through here: they are relayed byte-exact
//! (docs/security.md, "Hidden text").

use std::borrow::Cow;
use std::fmt::Write as _;

use indexmap::IndexMap;
use mcphost_protocol::{RawError, RawValue, to_raw};

/// What kind of hidden text a [`Finding`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Unicode tag characters U+E0000–E007F: invisible copies of ASCII
    /// ("ASCII smuggling"). An emoji subdivision flag (🏴 then 1–6 tag
    /// letters or digits then CANCEL TAG) is not flagged.
    Tag,
    /// U+200B–U+200D, U+2060, U+FEFF.
    ZeroWidth,
    /// Other invisible code points: soft hyphen, invisible operators,
    /// fillers, interlinear annotation marks, unassigned plane-14 points.
    Invisible,
    /// Variation selectors (U+FE00–FE0F, U+E0100–E01EF) in a run of two
    /// or more, or with nothing before them: each encodes one byte. One
    /// selector after a character (as in ⚠️) is ordinary text.
    VariationSelectors,
    /// Bidirectional controls: U+202A–U+202E, U+2066–U+2069, U+200E,
    /// U+200F, U+061C. They make text read differently than it shows.
    Bidi,
    /// An HTML comment `<!-- … -->` (to the end of the text when not
    /// closed): hidden by every Markdown renderer, read by the model.
    HtmlComment,
}

impl Kind {
    /// The name used in JSON output (`hiddenText[].kind`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Tag => "tag-characters",
            Kind::ZeroWidth => "zero-width",
            Kind::Invisible => "invisible",
            Kind::VariationSelectors => "variation-selectors",
            Kind::Bidi => "bidi-control",
            Kind::HtmlComment => "html-comment",
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One run of hidden text in a string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub kind: Kind,
    /// Byte range in the string scanned.
    pub start: usize,
    pub end: usize,
    /// Safe to print: every hidden or control character escaped as
    /// `\u{…}`, cut after [`PREVIEW_CHARS`] characters of the text. For tag characters
    /// and variation selectors, the text they encode, quoted; for comments
    /// the comment; else the text around the run.
    pub preview: String,
}

/// The longest preview, in characters (plus `…`).
pub const PREVIEW_CHARS: usize = 80;
/// Characters of context on each side of an invisible run.
const CONTEXT_CHARS: usize = 20;

/// The class of one character, before the context rules.
fn class(c: char) -> Option<Kind> {
    Some(match c as u32 {
        0xE0000..=0xE007F => Kind::Tag,
        0x200B..=0x200D | 0x2060 | 0xFEFF => Kind::ZeroWidth,
        0x202A..=0x202E | 0x2066..=0x2069 | 0x200E | 0x200F | 0x061C => Kind::Bidi,
        0xFE00..=0xFE0F | 0xE0100..=0xE01EF => Kind::VariationSelectors,
        0x00AD
        | 0x034F
        | 0x115F
        | 0x1160
        | 0x17B4
        | 0x17B5
        | 0x180B..=0x180F
        | 0x2061..=0x2064
        | 0x206A..=0x206F
        | 0x3164
        | 0xFFA0
        | 0xFFF0..=0xFFFB
        | 0x1BCA0..=0x1BCA3
        | 0x1D173..=0x1D17A
        | 0xE0080..=0xE00FF
        | 0xE01F0..=0xE0FFF => Kind::Invisible,
        _ => return None,
    })
}

/// Whether `text` may hold anything [`scan`] flags; false is certain.
fn maybe_hidden(text: &str) -> bool {
    text.contains("<!--") || (!text.is_ascii() && text.chars().any(|c| class(c).is_some()))
}

/// Every run of hidden text in `text`, in order. Runs do not overlap:
/// characters inside an HTML comment are part of that finding.
pub fn scan(text: &str) -> Vec<Finding> {
    if !maybe_hidden(text) {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        if rest.starts_with("<!--") {
            let end = i.saturating_add(comment_len(rest));
            out.push(finding(text, Kind::HtmlComment, i, end));
            i = end;
            continue;
        }
        let Some(c) = rest.chars().next() else { break };
        let Some(kind) = class(c) else {
            i = i.saturating_add(c.len_utf8());
            continue;
        };
        // A run: this and the following characters of the same class.
        let len: usize = rest
            .chars()
            .take_while(|&d| class(d) == Some(kind))
            .map(char::len_utf8)
            .sum();
        let end = i.saturating_add(len);
        if !ordinary(text, kind, i, end) {
            out.push(finding(text, kind, i, end));
        }
        i = end;
    }
    out
}

/// The context rules: runs that are ordinary emoji, not hidden text.
fn ordinary(text: &str, kind: Kind, start: usize, end: usize) -> bool {
    let before = text[..start].chars().next_back();
    match kind {
        Kind::VariationSelectors => {
            let one = text[start..end].chars().count() == 1;
            one && before.is_some_and(|b| class(b).is_none() && !b.is_whitespace())
        }
        // 🏴 + tag [0-9a-z]{1,6} + CANCEL TAG: England, Scotland, Wales.
        Kind::Tag => {
            let tags: Vec<u32> = text[start..end].chars().map(|c| c as u32).collect();
            let Some((&last, spec)) = tags.split_last() else {
                return false;
            };
            before == Some('\u{1F3F4}')
                && last == 0xE007F
                && (1..=6).contains(&spec.len())
                && spec
                    .iter()
                    .all(|&t| matches!(t, 0xE0030..=0xE0039 | 0xE0061..=0xE007A))
        }
        _ => false,
    }
}

/// Length in bytes of the comment `rest` starts with (`<!--`), to its
/// `-->`, or to the end. `<!-->` and `<!--->` close at once, as in HTML.
fn comment_len(rest: &str) -> usize {
    let body = &rest[4..];
    for short in [">", "->"] {
        if body.starts_with(short) {
            return 4 + short.len();
        }
    }
    match body.find("-->") {
        Some(at) => 4 + at + 3,
        None => rest.len(),
    }
}

fn finding(text: &str, kind: Kind, start: usize, end: usize) -> Finding {
    let run = &text[start..end];
    let preview = match kind {
        Kind::Tag => quoted(&decode_tags(run)),
        Kind::VariationSelectors => quoted(&decode_selectors(run)),
        Kind::HtmlComment => escape(run, PREVIEW_CHARS),
        _ => {
            let head: String = {
                let mut v: Vec<char> = text[..start].chars().rev().take(CONTEXT_CHARS).collect();
                v.reverse();
                v.into_iter().collect()
            };
            let tail: String = text[end..].chars().take(CONTEXT_CHARS).collect();
            escape(&format!("{head}{run}{tail}"), PREVIEW_CHARS)
        }
    };
    Finding {
        kind,
        start,
        end,
        preview,
    }
}

/// The ASCII tag characters spell (U+E0020–E007E ↔ 0x20–0x7E); other
/// tags (language tag, cancel tag) are shown escaped.
fn decode_tags(run: &str) -> String {
    run.chars()
        .map(|c| match c as u32 {
            t @ 0xE0020..=0xE007E => char::from_u32(t - 0xE0000).unwrap_or(c),
            _ => c,
        })
        .collect()
}

/// The bytes variation selectors encode (U+FE00–FE0F → 0–15,
/// U+E0100–E01EF → 16–255), read as UTF-8 (lossily).
fn decode_selectors(run: &str) -> String {
    let bytes: Vec<u8> = run
        .chars()
        .filter_map(|c| match c as u32 {
            v @ 0xFE00..=0xFE0F => u8::try_from(v - 0xFE00).ok(),
            v @ 0xE0100..=0xE01EF => u8::try_from(v - 0xE0100 + 16).ok(),
            _ => None,
        })
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn quoted(s: &str) -> String {
    format!("\"{}\"", escape(s, PREVIEW_CHARS))
}

/// `s` safe to print: hidden, control and format characters (and `\`) as
/// `\u{…}` escapes, cut at `max` characters with `…`.
pub fn escape(s: &str, max: usize) -> String {
    let mut out = String::new();
    for (n, c) in s.chars().enumerate() {
        if n >= max {
            out.push('…');
            break;
        }
        if class(c).is_some() || c.is_control() || c == '\\' || is_format(c) {
            let _ = write!(out, "\\u{{{:04X}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

/// Format characters outside the flagged list that still must not reach a
/// terminal raw (line and paragraph separators, Arabic number signs).
fn is_format(c: char) -> bool {
    matches!(
        c as u32,
        0x2028 | 0x2029 | 0x0600..=0x0605 | 0x06DD | 0x070F | 0x110BD
    )
}

/// `text` without what [`scan`] finds. Removing a run can join text into a
/// new comment (`<!\u{200B}--`), so it strips until nothing is found.
pub fn strip(text: &str) -> Cow<'_, str> {
    let mut findings = scan(text);
    if findings.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut cur = text.to_owned();
    while !findings.is_empty() {
        let mut next = String::with_capacity(cur.len());
        let mut at = 0;
        for f in &findings {
            next.push_str(&cur[at..f.start]);
            at = f.end;
        }
        next.push_str(&cur[at..]);
        cur = next;
        findings = scan(&cur);
    }
    Cow::Owned(cur)
}

/// What kind of listed object a raw item is: which fields are its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item {
    Tool,
    Prompt,
    /// A resource or a resource template.
    Resource,
}

/// A finding in one field of a listed object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldFinding {
    /// The field: `description`, `annotations.title`,
    /// `inputSchema.properties.path.description`, `arguments[0].description`.
    pub field: String,
    pub finding: Finding,
}

impl FieldFinding {
    /// As `hiddenText[]` in `mcphost/tools/list`: kind, field, byte offset
    /// in the field's text, preview.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": self.finding.kind.as_str(),
            "where": self.field,
            "at": self.finding.start,
            "preview": self.finding.preview,
        })
    }
}

/// The findings in a tool's listed object (for `mcphost pins` and the
/// like). An object that does not parse has none.
pub fn scan_tool(raw: &RawValue) -> Vec<FieldFinding> {
    clean(Item::Tool, raw, false)
        .map(|c| c.findings)
        .unwrap_or_default()
}

/// [`clean`]'s answer.
#[derive(Debug, Default)]
pub struct Cleaned {
    /// The object with the hidden text removed; `None` when nothing was
    /// removed (nothing found, or not asked to strip).
    pub stripped: Option<Box<RawValue>>,
    pub findings: Vec<FieldFinding>,
}

/// Scan a listed object's descriptions and titles, and with `strip`
/// remove what was found. Untouched members keep their bytes; a changed
/// object is re-assembled as `set_fields` does (members in order, no
/// whitespace between them).
pub fn clean(item: Item, raw: &RawValue, strip: bool) -> Result<Cleaned, RawError> {
    if !may_hold(raw.get()) {
        return Ok(Cleaned::default());
    }
    let mut findings = Vec::new();
    let mut w = Walk {
        strip,
        findings: &mut findings,
    };
    let stripped = w.object(raw, "", &|key: &str| match (item, key) {
        (_, "description" | "title") => Some(Field::Text),
        (Item::Tool, "annotations") => Some(Field::Titled),
        (Item::Tool, "inputSchema" | "outputSchema") => Some(Field::Schema),
        (Item::Prompt, "arguments") => Some(Field::Titled),
        _ => None,
    })?;
    Ok(Cleaned {
        stripped: stripped.filter(|_| strip),
        findings,
    })
}

/// Whether raw JSON text may hold hidden text: it is there literally, or
/// behind a `\u` escape.
fn may_hold(json: &str) -> bool {
    json.contains("\\u") || maybe_hidden(json)
}

/// How a member of an object is looked at.
#[derive(Clone, Copy)]
enum Field {
    /// A string: scanned.
    Text,
    /// An object, or an array of objects, whose `title` and `description`
    /// are scanned.
    Titled,
    /// A JSON Schema: every `title` and `description` at any depth, except
    /// inside values that are data (`const`, `default`, `enum`, `examples`).
    Schema,
    /// `title`/`description` inside a schema: text, or a property's schema.
    TextOrSchema,
}

struct Walk<'f> {
    strip: bool,
    findings: &'f mut Vec<FieldFinding>,
}

impl Walk<'_> {
    /// The object with its changed members replaced; `None` if unchanged
    /// (or not an object: those are left alone).
    fn object(
        &mut self,
        raw: &RawValue,
        path: &str,
        field: &dyn Fn(&str) -> Option<Field>,
    ) -> Result<Option<Box<RawValue>>, RawError> {
        if !raw.get().trim_start().starts_with('{') || !may_hold(raw.get()) {
            return Ok(None);
        }
        let mut map: IndexMap<String, Box<RawValue>> =
            serde_json::from_str(raw.get()).map_err(RawError::NotAnObject)?;
        let mut changed = false;
        for (key, value) in map.iter_mut() {
            let Some(how) = field(key) else { continue };
            let at = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            let new = match how {
                Field::Text => self.text(value, at)?,
                // A property may be called `title`: its value is a schema.
                Field::TextOrSchema if value.get().starts_with('"') => self.text(value, at)?,
                Field::TextOrSchema => self.any(value, &at, &schema_field)?,
                Field::Titled => self.any(value, &at, &|k| {
                    matches!(k, "title" | "description").then_some(Field::Text)
                })?,
                Field::Schema => self.any(value, &at, &schema_field)?,
            };
            if let Some(new) = new {
                *value = new;
                changed = true;
            }
        }
        match changed {
            true => to_raw(&map).map(Some),
            false => Ok(None),
        }
    }

    /// An object, or each object of an array (recursively).
    fn any(
        &mut self,
        raw: &RawValue,
        path: &str,
        field: &dyn Fn(&str) -> Option<Field>,
    ) -> Result<Option<Box<RawValue>>, RawError> {
        if !raw.get().trim_start().starts_with('[') {
            return self.object(raw, path, field);
        }
        if !may_hold(raw.get()) {
            return Ok(None);
        }
        let mut items: Vec<Box<RawValue>> =
            serde_json::from_str(raw.get()).map_err(|source| RawError::Field {
                field: path.to_owned(),
                source,
            })?;
        let mut changed = false;
        for (i, item) in items.iter_mut().enumerate() {
            if let Some(new) = self.any(item, &format!("{path}[{i}]"), field)? {
                *item = new;
                changed = true;
            }
        }
        match changed {
            true => to_raw(&items).map(Some),
            false => Ok(None),
        }
    }

    /// A string member: scanned; with `strip`, replaced when it held any.
    fn text(&mut self, raw: &RawValue, path: String) -> Result<Option<Box<RawValue>>, RawError> {
        if !raw.get().starts_with('"') || !may_hold(raw.get()) {
            return Ok(None);
        }
        let s: String = serde_json::from_str(raw.get()).map_err(|source| RawError::Field {
            field: path.clone(),
            source,
        })?;
        let found = scan(&s);
        if found.is_empty() {
            return Ok(None);
        }
        self.findings
            .extend(found.into_iter().map(|finding| FieldFinding {
                field: path.clone(),
                finding,
            }));
        match self.strip {
            true => to_raw(strip(&s).as_ref()).map(Some),
            false => Ok(None),
        }
    }
}

/// Inside a schema: text members, data members skipped, the rest walked.
fn schema_field(key: &str) -> Option<Field> {
    match key {
        "title" | "description" => Some(Field::TextOrSchema),
        "const" | "default" | "enum" | "examples" => None,
        _ => Some(Field::Schema),
    }
}

#[cfg(test)]
#[path = "hygiene_tests.rs"]
mod tests;
