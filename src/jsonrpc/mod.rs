//! JSON-RPC 2.0: the frame [`decode`]r and the [`Peer`] that correlates
//! requests with responses over any [`crate::transport::Connection`].

mod decode;
mod peer;

pub use decode::{DecodeError, Incoming, decode};
pub use peer::{
    IncomingRequest, NoHandler, Peer, PeerConfig, PeerError, Progress, ProgressCallback,
    RequestHandler, RequestOptions,
};
