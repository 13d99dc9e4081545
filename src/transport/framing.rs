//! Newline framing with a hard per-message size limit.
