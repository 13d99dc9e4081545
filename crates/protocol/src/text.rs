//! Text from a peer, made safe to show.

/// Text a server sent, for a message: C0/C1 controls (escape sequences,
/// OSC 52, CR/LF) shown escaped, so it cannot drive the user's terminal.
pub fn escape_controls(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}
