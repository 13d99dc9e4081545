//! `WWW-Authenticate` (RFC 9110 §11.6.1): several challenges in one header
//! or across several, parameters quoted or not, in any case and spacing.
//! Servers get this wrong in every way, so the parser accepts what it can
//! and never fails: a part it cannot read is skipped.

/// One challenge: a scheme and its parameters (names lowercased).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Challenge {
    pub scheme: String,
    pub params: Vec<(String, String)>,
}

impl Challenge {
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What a Bearer challenge tells an OAuth client.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BearerChallenge {
    pub resource_metadata: Option<String>,
    pub scope: Option<String>,
    pub error: Option<String>,
}

impl BearerChallenge {
    /// The Bearer challenge among all header values, else the DPoP one
    /// (RFC 9449 §7.1: the same parameters), if any.
    pub fn find<'a>(values: impl IntoIterator<Item = &'a str>) -> Option<BearerChallenge> {
        let all: Vec<Challenge> = values.into_iter().flat_map(parse).collect();
        all.iter()
            .find(|c| c.scheme.eq_ignore_ascii_case("bearer"))
            .or_else(|| all.iter().find(|c| c.scheme.eq_ignore_ascii_case("dpop")))
            .map(|c| BearerChallenge {
                resource_metadata: c.param("resource_metadata").map(str::to_owned),
                scope: c
                    .param("scope")
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned),
                error: c.param("error").map(str::to_owned),
            })
    }

    pub fn insufficient_scope(&self) -> bool {
        self.error.as_deref() == Some("insufficient_scope")
    }
}

/// The `error` of a DPoP challenge (`use_dpop_nonce`, `invalid_dpop_proof`).
pub fn dpop_error<'a>(values: impl IntoIterator<Item = &'a str>) -> Option<String> {
    values
        .into_iter()
        .flat_map(parse)
        .find(|c| c.scheme.eq_ignore_ascii_case("dpop"))
        .and_then(|c| c.param("error").map(str::to_owned))
}

fn is_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

struct Lexer<'a> {
    s: &'a str,
    i: usize,
}

impl<'a> Lexer<'a> {
    fn peek(&self) -> Option<char> {
        self.s[self.i..].chars().next()
    }
    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.i += 1;
        }
    }
    fn token(&mut self) -> Option<&'a str> {
        let start = self.i;
        while let Some(c) = self.peek() {
            if !is_tchar(c) {
                break;
            }
            self.i += c.len_utf8();
        }
        (self.i > start).then(|| &self.s[start..self.i])
    }
    /// token68: a token that may end in `=` padding and contain `/`.
    fn token68_rest(&mut self) {
        while let Some(c) = self.peek() {
            if is_tchar(c) || c == '/' || c == '=' {
                self.i += c.len_utf8();
            } else {
                break;
            }
        }
    }
    fn quoted(&mut self) -> String {
        // At the opening quote.
        self.i += 1;
        let mut out = String::new();
        while let Some(c) = self.peek() {
            self.i += c.len_utf8();
            match c {
                '"' => return out,
                '\\' => {
                    if let Some(n) = self.peek() {
                        self.i += n.len_utf8();
                        out.push(n);
                    }
                }
                c => out.push(c),
            }
        }
        out // unterminated: take what there is
    }
    /// Skip to just after the next top-level comma (or the end).
    fn skip_item(&mut self) {
        while let Some(c) = self.peek() {
            if c == '"' {
                self.quoted();
                continue;
            }
            self.i += c.len_utf8();
            if c == ',' {
                return;
            }
        }
    }
}

/// Every challenge in one header value.
pub fn parse(value: &str) -> Vec<Challenge> {
    let mut lx = Lexer { s: value, i: 0 };
    let mut out: Vec<Challenge> = Vec::new();
    loop {
        lx.skip_ws();
        match lx.peek() {
            None => break,
            Some(',') => {
                lx.i += 1;
                continue;
            }
            _ => {}
        }
        let start = lx.i;
        let Some(word) = lx.token() else {
            lx.skip_item();
            continue;
        };
        lx.skip_ws();
        if lx.peek() == Some('=') {
            // `name=value`: a parameter of the current challenge, or, right
            // after a scheme, token68 (`Basic abc==`).
            lx.i += 1;
            lx.skip_ws();
            let value = match lx.peek() {
                Some('"') => lx.quoted(),
                // Not always a strict token (`scope=mcp:write`): up to the
                // next comma or space.
                _ => {
                    let v_start = lx.i;
                    while lx.peek().is_some_and(|c| !matches!(c, ',' | ' ' | '\t')) {
                        lx.i += lx.peek().map_or(1, char::len_utf8);
                    }
                    lx.s[v_start..lx.i].to_owned()
                }
            };
            // A parameter before any scheme is noise.
            if let Some(c) = out.last_mut() {
                c.params.push((word.to_ascii_lowercase(), value));
            }
            lx.skip_ws();
            if lx.peek() != Some(',') && lx.peek().is_some() {
                lx.skip_item();
            }
            continue;
        }
        // A scheme. What follows is token68, parameters, or the next item.
        out.push(Challenge {
            scheme: lx.s[start..start + word.len()].to_owned(),
            params: Vec::new(),
        });
        if lx.peek().is_some_and(|c| is_tchar(c) || c == '/') {
            let save = lx.i;
            let t = lx.token();
            lx.skip_ws();
            if lx.peek() == Some('=') {
                lx.i = save; // a parameter: read on the next turn
            } else if t.is_some() {
                // token68: kept as a nameless parameter
                lx.token68_rest();
                let v = lx.s[save..lx.i].to_owned();
                if let Some(c) = out.last_mut() {
                    c.params.push((String::new(), v));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(v: &[&str]) -> BearerChallenge {
        BearerChallenge::find(v.iter().copied()).unwrap()
    }

    #[test]
    fn quoted_and_unquoted_parameters() {
        let b = bearer(&[
            r#"Bearer resource_metadata="https://h/.well-known/oauth-protected-resource/mcp", scope="a b""#,
        ]);
        assert_eq!(
            b.resource_metadata.as_deref(),
            Some("https://h/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(b.scope.as_deref(), Some("a b"));
        let b = bearer(&["bearer error=insufficient_scope,scope=mcp:write"]);
        assert!(b.insufficient_scope());
        assert_eq!(b.scope.as_deref(), Some("mcp:write"));
    }

    #[test]
    fn several_challenges_in_one_value_and_across_values() {
        let v = r#"Basic realm="x, y", Bearer realm="r",  resource_metadata = "u" , error="invalid_token", DPoP algs="ES256""#;
        let cs = parse(v);
        let schemes: Vec<&str> = cs.iter().map(|c| c.scheme.as_str()).collect();
        assert_eq!(schemes, ["Basic", "Bearer", "DPoP"]);
        assert_eq!(cs[0].param("realm"), Some("x, y"));
        assert_eq!(cs[1].param("resource_metadata"), Some("u"));
        assert_eq!(cs[2].param("algs"), Some("ES256"));
        let b = bearer(&[r#"Basic realm="a""#, r#"Bearer scope="s""#]);
        assert_eq!(b.scope.as_deref(), Some("s"));
    }

    #[test]
    fn token68_escapes_and_junk_do_not_derail_the_parse() {
        let cs = parse(r#"Negotiate YII/abc==, Bearer resource_metadata="a\"b""#);
        assert_eq!(cs[0].params, [(String::new(), "YII/abc==".to_owned())]);
        assert_eq!(cs[1].param("resource_metadata"), Some("a\"b"));
        for junk in [
            "",
            ",,,",
            "=x",
            "\"",
            "Bearer \"unterminated",
            "Bearer ,, scope=",
            "é",
        ] {
            let _ = parse(junk);
        }
        assert_eq!(parse("Bearer").len(), 1);
        assert!(BearerChallenge::find(["Basic realm=x"]).is_none());
        assert_eq!(bearer(&["Bearer scope=\"  \""]).scope, None);
    }
}
