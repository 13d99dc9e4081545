//! Rules 1–4 of the naming contract for one item: charset, hash, length.

#[cfg(test)]
use std::collections::HashSet;

use sha2::{Digest, Sha256};

use super::*;

#[cfg(test)]
pub(super) struct ServerNames<'a> {
    pub(super) server: &'a str,
    pub(super) prefix: &'a str,
    pub(super) names: Vec<&'a str>,
}

/// The outcome of naming one item.
#[cfg(test)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Named {
    pub(super) name: String,
    pub(super) server: String,
    pub(super) original: String,
    pub(super) reason: Option<CollisionReason>,
}

/// Replace only the top-level `"name"`; every other byte survives.
pub(super) fn rename(
    raw: &RawValue,
    name: &str,
) -> Result<Box<RawValue>, mcphost_protocol::RawError> {
    set_fields(Some(raw), [("name".to_owned(), to_raw(name)?)])
}

/// The naming algorithm on plain strings, in listing order: the full
/// rebuild [`CatalogBuilder`] must equal (its tests compare the two).
#[cfg(test)]
pub(super) fn namespace(servers: &[ServerNames<'_>], rules: &NamingRules) -> Vec<Named> {
    let budget = rules.budget();
    let sep = sanitize(&rules.separator);
    let mut claims: Vec<Named> = servers
        .iter()
        .flat_map(|s| {
            let sep = &sep;
            s.names.iter().map(move |&tool| {
                let (name, reason) = candidate(s.server, s.prefix, tool, sep, budget);
                Named {
                    name,
                    server: s.server.to_owned(),
                    original: tool.to_owned(),
                    reason,
                }
            })
        })
        .collect();

    // Rule 5: who keeps a contested name depends on (server, tool), not on
    // the input order; the index only separates a server's own duplicates.
    let mut order: Vec<usize> = (0..claims.len()).collect();
    order.sort_by(|&a, &b| {
        (&claims[a].server, &claims[a].original, a).cmp(&(
            &claims[b].server,
            &claims[b].original,
            b,
        ))
    });
    let mut taken: HashSet<String> = HashSet::with_capacity(claims.len());
    let mut losers = Vec::new();
    for &i in &order {
        if !taken.insert(claims[i].name.clone()) {
            losers.push(i);
        }
    }
    // Every first claimant is placed before any loser picks a suffix, so a
    // suffixed name can never take a name someone holds on its own.
    for i in losers {
        let claim = &mut claims[i];
        for n in 2usize.. {
            let name = with_number(&claim.name, n, budget);
            if taken.insert(name.clone()) {
                claim.name = name;
                claim.reason = Some(CollisionReason::Duplicate);
                break;
            }
        }
    }
    claims
}

/// Rules 1–4 for one item: the name it asks for, and why it differs from the
/// plain base name, if it does.
pub(super) fn candidate(
    server: &str,
    prefix: &str,
    tool: &str,
    sep: &str,
    budget: usize,
) -> (String, Option<CollisionReason>) {
    let p = sanitize(prefix);
    let t = sanitize(tool);
    let sanitized = p != prefix || t != tool || prefix.is_empty() || tool.is_empty();
    let hash = short_hash(server, tool);
    let mut name = format!("{p}{sep}{t}");
    if sanitized {
        name.push('_');
        name.push_str(&hash);
    }
    if name.len() <= budget {
        return (name, sanitized.then_some(CollisionReason::Sanitized));
    }
    (
        shorten(&p, sep, &t, &hash, budget),
        Some(CollisionReason::Shortened),
    )
}

/// Rule 4. All inputs are ASCII (sanitized), so byte lengths are characters.
pub(super) fn shorten(p: &str, sep: &str, t: &str, hash: &str, budget: usize) -> String {
    let head_len = budget.saturating_sub(HASH_SUFFIX_LEN);
    let half = head_len / 2;
    let keep = if p.len() + sep.len() <= half {
        p.len()
    } else {
        half.saturating_sub(sep.len()).max(1).min(p.len())
    };
    let mut head = String::with_capacity(budget);
    head.push_str(ascii_prefix(p, keep));
    head.push_str(sep);
    head.push_str(t);
    let head = ascii_prefix(&head, head_len);
    format!("{head}_{hash}")
}

/// Rule 5's `_N`, cutting the end of `name` to stay within the budget.
pub(super) fn with_number(name: &str, n: usize, budget: usize) -> String {
    let suffix = format!("_{n}");
    let keep = budget.saturating_sub(suffix.len());
    format!("{}{suffix}", ascii_prefix(name, keep))
}

/// The first `n` bytes of an ASCII string (the whole string if shorter).
pub(super) fn ascii_prefix(s: &str, n: usize) -> &str {
    // `get` instead of indexing: a non-ASCII input would yield the whole
    // string rather than a panic (callers only pass sanitized text).
    s.get(..n.min(s.len())).unwrap_or(s)
}

/// Rule 2: each character outside `[A-Za-z0-9_-]` becomes `_`.
pub(super) fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| if is_allowed(c) { c } else { '_' })
        .collect()
}

/// Rule 3: 6 hex digits of SHA-256 over the length-prefixed server name and
/// the original tool name. The length prefix keeps `("ab","c")` and
/// `("a","bc")` apart.
pub(super) fn short_hash(server: &str, tool: &str) -> String {
    let mut h = Sha256::new();
    h.update((server.len() as u64).to_be_bytes());
    h.update(server.as_bytes());
    h.update(tool.as_bytes());
    let digest = h.finalize();
    let mut out = String::with_capacity(HASH_LEN);
    for b in digest.iter().take(HASH_LEN.div_ceil(2)) {
        out.push_str(&format!("{b:02x}"));
    }
    out.truncate(HASH_LEN);
    out
}
