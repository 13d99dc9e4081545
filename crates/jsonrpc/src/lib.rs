//! JSON-RPC 2.0: the frame [`decode`]r and the [`Peer`] that correlates
//! requests with responses over any [`mcphost_transport::Connection`].

// No production function over 100 lines of code (docs/architecture.md).
#![warn(clippy::too_many_lines)]

mod decode;
mod peer;

pub use decode::{DecodeError, Incoming, decode};
pub use peer::{
    IncomingRequest, NoHandler, Origin, Peer, PeerConfig, PeerError, Progress, ProgressCallback,
    Relation, RequestHandler, RequestOptions,
};

/// Fuzzing entry point: decode arbitrary bytes and re-encode what decoded.
/// Panics only on a real bug (a decoded message that does not round-trip).
#[doc(hidden)]
pub fn fuzz_decode(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let items = match decode(text) {
        Ok(Incoming::Single(m)) => vec![m],
        Ok(Incoming::Batch(items)) => items,
        Err(_) => return,
    };
    for msg in items.into_iter().flatten() {
        let line = msg.to_line();
        assert!(!line.contains('\n'), "encoded message contains a newline");
        match decode(&line) {
            Ok(Incoming::Single(Ok(again))) => assert_eq!(again.method(), msg.method()),
            other => panic!("re-encoded message did not decode: {line} → {other:?}"),
        }
    }
}
