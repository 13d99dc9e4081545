//! JSON-RPC 2.0: the message decoder and the [`Peer`].
