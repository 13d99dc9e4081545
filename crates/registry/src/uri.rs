//! Resource URIs across servers: the `mcphost://<server>/<uri>` form and
//! RFC 6570 template matching.
//!
//! The exposed form puts the config name of the server in the authority,
//! percent-encoded (RFC 3986) for every byte outside `A-Z a-z 0-9 - . _ ~`,
//! so a name holding `/`, `%`, `{` or a space still splits back exactly.
//! Everything after the first `/` that follows the authority is the server's
//! own URI, verbatim (no decoding).
//!
//! Matching follows what RFC 6570 expansions can produce, as leniently as
//! the MCP SDKs match (no crate on crates.io matches templates; the
//! maintained ones only expand):
//!
//! | expression | matches |
//! |---|---|
//! | `{x}`, `{x,y}` | one or more characters, none of `/ ? #` |
//! | `{+x}` | one or more characters |
//! | `{#x}` | nothing, or `#` and anything |
//! | `{.x}` | nothing, or `.` and no `/ ? #` |
//! | `{/x}` | nothing, or `/` and no `? #` (one or more segments) |
//! | `{;x}` | nothing, or `;` and no `/ ? #` |
//! | `{?x}`, `{&x}` | nothing, or `?` (`&`) and no `#` |
//!
//! Literal text must match byte for byte. A template that is not well formed
//! (an unclosed `{`, an empty or unknown expression) never matches anything.

use std::borrow::Cow;

/// The scheme of exposed URIs, with its `//`.
pub const SCHEME: &str = "mcphost://";

/// Whether `uri` uses our scheme (case-insensitively, as schemes are). Such
/// URIs from a server are always exposed wrapped, so that an unwrapped
/// `mcphost:` URI means our scheme and nothing else.
pub fn is_reserved(uri: &str) -> bool {
    uri.get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("mcphost:"))
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// `mcphost://<server>/<uri>`, the server's name percent-encoded.
pub fn wrap(server: &str, uri: &str) -> String {
    let mut out = String::with_capacity(SCHEME.len() + server.len() + 1 + uri.len());
    out.push_str(SCHEME);
    push_encoded(&mut out, server);
    out.push('/');
    out.push_str(uri);
    out
}

/// The server's name as it appears in the authority.
pub fn encode_server(server: &str) -> Cow<'_, str> {
    if server.bytes().all(is_unreserved) {
        return Cow::Borrowed(server);
    }
    let mut out = String::with_capacity(server.len() * 3);
    push_encoded(&mut out, server);
    Cow::Owned(out)
}

fn push_encoded(out: &mut String, server: &str) {
    for b in server.bytes() {
        if is_unreserved(b) {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(hex_digit(b >> 4));
            out.push(hex_digit(b & 0xf));
        }
    }
}

fn hex_digit(n: u8) -> char {
    char::from(if n < 10 { b'0' + n } else { b'A' + n - 10 })
}

/// Splits an exposed `mcphost://<server>/<rest>` into the decoded server
/// name and `rest`; `None` when `uri` is not of that form (no `/` after the
/// authority, or an authority that does not decode to UTF-8).
pub fn unwrap(uri: &str) -> Option<(String, &str)> {
    let head = uri.get(..SCHEME.len())?;
    if !head.eq_ignore_ascii_case(SCHEME) {
        return None;
    }
    let after = uri.get(SCHEME.len()..)?;
    let slash = after.find('/')?;
    let (authority, rest) = after.split_at(slash);
    let server = decode(authority)?;
    if server.is_empty() {
        return None;
    }
    Some((server, rest.get(1..).unwrap_or_default()))
}

fn decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hi = bytes
                .get(i.checked_add(1)?)
                .and_then(|c| char::from(*c).to_digit(16))?;
            let lo = bytes
                .get(i.checked_add(2)?)
                .and_then(|c| char::from(*c).to_digit(16))?;
            out.push(u8::try_from(hi * 16 + lo).ok()?);
            i = i.checked_add(3)?;
        } else {
            out.push(b);
            i = i.checked_add(1)?;
        }
    }
    String::from_utf8(out).ok()
}

/// What characters one expression's expansion may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expr {
    /// `{x}`: non-empty, none of `/?#`.
    Simple,
    /// `{+x}`: non-empty, anything.
    Reserved,
    /// Empty, or `lead` followed by characters none of which is in `stop`.
    Prefixed { lead: u8, stop: &'static [u8] },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Expr(Expr),
}

/// An RFC 6570 URI template, compiled for matching concrete URIs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UriTemplate {
    /// `None`: not well formed, matches nothing.
    parts: Option<Vec<Part>>,
}

/// Longest URI matched against templates; longer ones match none (the
/// matcher is quadratic in the length).
pub const MAX_MATCH_LEN: usize = 8 * 1024;

impl UriTemplate {
    pub fn parse(template: &str) -> UriTemplate {
        UriTemplate {
            parts: parse_parts(template),
        }
    }

    /// Whether the template is well formed (and so can match anything).
    pub fn is_valid(&self) -> bool {
        self.parts.is_some()
    }

    /// Whether some expansion of the template could be `uri`. Linear in
    /// the URI's length per template part: each expression reaches a
    /// contiguous range of end positions from each start.
    pub fn matches(&self, uri: &str) -> bool {
        let Some(parts) = &self.parts else {
            return false;
        };
        if uri.len() > MAX_MATCH_LEN {
            return false;
        }
        // The literal ends anchor a template: most URIs fail here, without
        // the tables below (each listed URI meets every other server's
        // templates).
        if let Some(Part::Literal(first)) = parts.first()
            && !uri.starts_with(first.as_str())
        {
            return false;
        }
        if let Some(Part::Literal(last)) = parts.last()
            && !uri.ends_with(last.as_str())
        {
            return false;
        }
        let s = uri.as_bytes();
        let n = s.len();
        // reach[p]: position p is reachable after the parts so far.
        let mut reach = vec![false; n + 1];
        reach[0] = true;
        for part in parts {
            let mut next = vec![false; n + 1];
            match part {
                Part::Literal(lit) => {
                    let lit = lit.as_bytes();
                    for start in (0..=n).filter(|&p| reach[p]) {
                        let end = start + lit.len();
                        if s.get(start..end) == Some(lit) {
                            next[end] = true;
                        }
                    }
                }
                Part::Expr(e) => {
                    // Ranges [lo, hi] of reachable ends, summed in one sweep.
                    let mut diff = vec![0i64; n + 2];
                    let mut add = |lo: usize, hi: usize| {
                        if lo <= hi && hi <= n {
                            diff[lo] += 1;
                            diff[hi + 1] -= 1;
                        }
                    };
                    match *e {
                        Expr::Simple => {
                            let stop = stop_table(s, b"/?#");
                            for start in (0..=n).filter(|&p| reach[p]) {
                                add(start + 1, stop[start]);
                            }
                        }
                        Expr::Reserved => {
                            for start in (0..n).filter(|&p| reach[p]) {
                                add(start + 1, n);
                            }
                        }
                        Expr::Prefixed { lead, stop } => {
                            let stop = stop_table(s, stop);
                            for start in (0..=n).filter(|&p| reach[p]) {
                                add(start, start);
                                if s.get(start) == Some(&lead) {
                                    add(start + 1, stop[start + 1]);
                                }
                            }
                        }
                    }
                    let mut sum = 0i64;
                    for (p, slot) in next.iter_mut().enumerate() {
                        sum += diff[p];
                        *slot = sum > 0;
                    }
                }
            }
            reach = next;
        }
        reach[n]
    }
}

/// `t[p]`: the first position at or after `p` whose byte is in `set` (or
/// the length): an expression starting at `p` can end anywhere up to it.
fn stop_table(s: &[u8], set: &[u8]) -> Vec<usize> {
    let mut t = vec![s.len(); s.len() + 1];
    for p in (0..s.len()).rev() {
        t[p] = if set.contains(&s[p]) { p } else { t[p + 1] };
    }
    t
}

fn parse_parts(t: &str) -> Option<Vec<Part>> {
    let mut parts = Vec::new();
    let mut rest = t;
    while !rest.is_empty() {
        match rest.find(['{', '}']) {
            None => {
                parts.push(Part::Literal(rest.to_owned()));
                break;
            }
            Some(i) => {
                if i > 0 {
                    parts.push(Part::Literal(rest.get(..i)?.to_owned()));
                }
                let tail = rest.get(i..)?;
                if tail.starts_with('}') {
                    return None;
                }
                let close = tail.find('}')?;
                let body = tail.get(1..close)?;
                parts.push(Part::Expr(parse_expr(body)?));
                rest = tail.get(close + 1..)?;
            }
        }
    }
    Some(parts)
}

fn parse_expr(body: &str) -> Option<Expr> {
    let (op, vars) = match body.as_bytes().first()? {
        b @ (b'+' | b'#' | b'.' | b'/' | b';' | b'?' | b'&') => (Some(*b), body.get(1..)?),
        _ => (None, body),
    };
    // varspec: varname [":" digits | "*"], varname of ALPHA DIGIT _ . and %XX.
    let valid = !vars.is_empty()
        && vars.split(',').all(|v| {
            let name = v.strip_suffix('*').unwrap_or(v);
            let name = match name.split_once(':') {
                Some((n, len)) => {
                    if len.is_empty() || len.len() > 4 || !len.bytes().all(|b| b.is_ascii_digit()) {
                        return false;
                    }
                    n
                }
                None => name,
            };
            !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'%'))
        });
    if !valid {
        return None;
    }
    Some(match op {
        None => Expr::Simple,
        Some(b'+') => Expr::Reserved,
        Some(b'#') => Expr::Prefixed {
            lead: b'#',
            stop: b"",
        },
        Some(b'.') => Expr::Prefixed {
            lead: b'.',
            stop: b"/?#",
        },
        Some(b'/') => Expr::Prefixed {
            lead: b'/',
            stop: b"?#",
        },
        Some(b';') => Expr::Prefixed {
            lead: b';',
            stop: b"/?#",
        },
        Some(b'?') => Expr::Prefixed {
            lead: b'?',
            stop: b"#",
        },
        Some(b'&') => Expr::Prefixed {
            lead: b'&',
            stop: b"#",
        },
        Some(_) => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_and_unwrap_round_trip() {
        for (server, uri) in [
            ("a", "demo://resource/static/1"),
            ("everything-2", "file:///tmp/x y"),
            ("my server/with%odd{chars}", "x"),
            ("日本", "mcphost://other/thing"),
            ("a", ""),
            ("a.b_c~d", "urn:isbn:1"),
        ] {
            let w = wrap(server, uri);
            assert!(w.starts_with(SCHEME), "{w}");
            let (s, u) = unwrap(&w).unwrap_or_else(|| panic!("{w}"));
            assert_eq!((s.as_str(), u), (server, uri), "{w}");
            assert!(is_reserved(&w));
        }
        assert_eq!(
            wrap("my server/x", "u://v"),
            "mcphost://my%20server%2Fx/u://v"
        );
        assert_eq!(encode_server("plain-name_1.x~"), "plain-name_1.x~");
        // Lower-case hex, an upper-case scheme and unencoded safe bytes decode.
        assert_eq!(
            unwrap("MCPHOST://my%2fserver/a").map(|(s, u)| (s, u.to_owned())),
            Some(("my/server".to_owned(), "a".to_owned()))
        );
        for bad in [
            "mcphost://noslash",
            "mcphost:///empty-server",
            "mcphost://bad%zz/x",
            "mcphost://bad%ff/x",
            "mcphost:x/y",
            "file:///x",
            "mcph",
        ] {
            assert_eq!(unwrap(bad), None, "{bad}");
        }
        assert!(is_reserved("McPhOsT:anything"));
        assert!(!is_reserved("mcphost"));
        assert!(!is_reserved("file:///mcphost:"));
    }

    fn m(t: &str, uri: &str) -> bool {
        UriTemplate::parse(t).matches(uri)
    }

    #[test]
    fn simple_and_reserved_expressions() {
        let t = "demo://resource/dynamic/text/{resourceId}";
        assert!(m(t, "demo://resource/dynamic/text/1"));
        assert!(m(t, "demo://resource/dynamic/text/abc%20d"));
        assert!(!m(t, "demo://resource/dynamic/text/"));
        assert!(!m(t, "demo://resource/dynamic/text/1/2"));
        assert!(!m(t, "demo://resource/dynamic/blob/1"));
        assert!(!m(t, "demo://resource/dynamic/text/1?x"));
        assert!(m("file:///{+path}", "file:///a/b/c.txt"));
        assert!(!m("file:///{+path}", "file:///"));
        assert!(m("db://{schema}/{table}", "db://public/users"));
        assert!(!m("db://{schema}/{table}", "db://public"));
        assert!(m("x://{a}{b}", "x://ab"));
        assert!(!m("x://{a}{b}", "x://a"));
        assert!(m("x://{a,b}", "x://1,2"));
        assert!(m("{+all}", "anything://at/all?q#f"));
        assert!(m("literal://only", "literal://only"));
        assert!(!m("literal://only", "literal://only/"));
    }

    #[test]
    fn prefixed_expressions_may_be_empty() {
        assert!(m("s://x{?q,r}", "s://x"));
        assert!(m("s://x{?q,r}", "s://x?q=1&r=2"));
        assert!(!m("s://x{?q}", "s://x#f"));
        assert!(m("s://x{?q}{&r}", "s://x?q=1&r=2"));
        assert!(m("s://x{/path*}", "s://x/a/b"));
        assert!(m("s://x{/path*}", "s://x"));
        assert!(!m("s://x{/path*}", "s://xy"));
        assert!(m("s://x{.ext}", "s://x.json"));
        assert!(!m("s://x{.ext}", "s://x.a/b"));
        assert!(m("s://x{;p}", "s://x;p=1"));
        assert!(m("s://x{#frag}", "s://x#anything/at?all"));
        assert!(m("s://{host}{/p}{?q}", "s://h/a?b=c"));
    }

    #[test]
    fn malformed_templates_match_nothing() {
        for t in [
            "x://{a",
            "x://a}",
            "x://{}",
            "x://{!a}",
            "x://{a b}",
            "x://{a:}",
        ] {
            let p = UriTemplate::parse(t);
            assert!(!p.is_valid(), "{t}");
            assert!(!p.matches(t), "{t}");
            assert!(!p.matches("x://a"), "{t}");
        }
        assert!(UriTemplate::parse("x://{a:3}{b*}").is_valid());
        assert!(UriTemplate::parse("").matches(""));
    }

    #[test]
    fn matching_is_not_exponential() {
        let t = format!("x://{}z", "{a}".repeat(40));
        let uri = format!("x://{}", "a".repeat(MAX_MATCH_LEN - 10));
        let started = std::time::Instant::now();
        assert!(!m(&t, &uri));
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert!(!m("{+a}", &"a".repeat(MAX_MATCH_LEN + 1)));
    }
}
