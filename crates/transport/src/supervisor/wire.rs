//! What the host and the supervisor say to each other: one JSON message per
//! frame, a frame being a little-endian `u32` length and the text. A spawn
//! request's descriptors travel with its bytes as `SCM_RIGHTS`, in the
//! order [`SpawnRequest::fds`] says.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

/// Longest frame either side accepts: a spawn request is a few KiB.
pub(super) const MAX_FRAME: usize = 16 * 1024 * 1024;

/// Host → supervisor.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(super) enum Request {
    Spawn(SpawnRequest),
    /// Signal the group led by `pid`, if its leader is not reaped yet.
    Signal {
        pid: i32,
        signal: i32,
    },
    /// The group of the reaped leader `pid` is empty: forget it.
    Release {
        pid: i32,
    },
}

/// Everything the supervisor needs to start one server; byte strings
/// because paths, arguments and variables need not be UTF-8.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct SpawnRequest {
    pub id: u64,
    pub program: Vec<u8>,
    pub arg0: Vec<u8>,
    pub args: Vec<Vec<u8>>,
    /// The whole environment (nothing of the supervisor's own is kept).
    pub env: Vec<(Vec<u8>, Vec<u8>)>,
    pub cwd: Option<Vec<u8>>,
    /// Linux: confine the server before exec (macOS wraps the argv instead).
    pub sandbox: Option<Sandbox>,
}

/// A sandbox prepared by the host (`sandbox::linux::Prepared`).
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Sandbox {
    /// The Landlock ruleset comes as a fourth descriptor.
    pub landlock: bool,
    /// The compiled seccomp program, as (code, jt, jf, k).
    pub seccomp: Option<Vec<(u16, u8, u8, u32)>>,
}

impl SpawnRequest {
    /// Descriptors sent with it: the server's stdin, stdout and stderr
    /// ends, then the ruleset.
    pub fn fds(&self) -> usize {
        3 + usize::from(self.sandbox.as_ref().is_some_and(|s| s.landlock))
    }
}

/// Supervisor → host.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(super) enum Reply {
    /// Request `id` runs as `pid`, the leader of a group of the same id.
    Spawned { id: u64, pid: i32 },
    /// Request `id` did not start; `errno` when the OS said why.
    Failed {
        id: u64,
        errno: Option<i32>,
        message: String,
    },
    /// The server `pid` was reaped; `status` is the raw wait status.
    Exited { pid: i32, status: i32 },
}

pub(super) fn encode<T: Serialize>(msg: &T) -> io::Result<Vec<u8>> {
    let text = serde_json::to_vec(msg).map_err(io::Error::other)?;
    let len = u32::try_from(text.len())
        .ok()
        .filter(|&n| usize::try_from(n).is_ok_and(|n| n <= MAX_FRAME))
        .ok_or_else(|| io::Error::other("message too long"))?;
    let mut frame = Vec::with_capacity(text.len().saturating_add(4));
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&text);
    Ok(frame)
}

/// Takes one whole frame off the front of `buf`, if there is one.
pub(super) fn take_frame<T: for<'de> Deserialize<'de>>(buf: &mut Vec<u8>) -> io::Result<Option<T>> {
    let Some(head) = buf.first_chunk::<4>() else {
        return Ok(None);
    };
    let len = usize::try_from(u32::from_le_bytes(*head)).map_err(io::Error::other)?;
    if len > MAX_FRAME {
        return Err(io::Error::other(format!("a frame of {len} bytes")));
    }
    let end = len.saturating_add(4);
    if buf.len() < end {
        return Ok(None);
    }
    let msg = serde_json::from_slice(&buf[4..end]).map_err(io::Error::other);
    buf.drain(..end);
    msg.map(Some)
}

/// Reads one frame (the host's replies carry no descriptors); `None` at EOF.
pub(super) fn read_frame<T: for<'de> Deserialize<'de>>(
    from: &mut impl Read,
    buf: &mut Vec<u8>,
) -> io::Result<Option<T>> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(msg) = take_frame(buf)? {
            return Ok(Some(msg));
        }
        match from.read(&mut chunk) {
            Ok(0) => return Ok(None),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

pub(super) fn write_frame<T: Serialize>(to: &mut impl Write, msg: &T) -> io::Result<()> {
    to.write_all(&encode(msg)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_whole_split_and_back_to_back() {
        let a = Reply::Spawned { id: 1, pid: 42 };
        let b = Reply::Failed {
            id: 2,
            errno: Some(2),
            message: "no such file".into(),
        };
        let mut bytes = encode(&a).unwrap();
        bytes.extend(encode(&b).unwrap());
        let mut buf = Vec::new();
        // Byte by byte: a frame is only taken once it is whole.
        let mut got = Vec::new();
        for byte in bytes {
            buf.push(byte);
            while let Some(r) = take_frame::<Reply>(&mut buf).unwrap() {
                got.push(r);
            }
        }
        assert_eq!(got, [a, b]);
        assert!(buf.is_empty());
    }

    #[test]
    fn an_oversized_frame_is_an_error_not_an_allocation() {
        let mut buf = u32::MAX.to_le_bytes().to_vec();
        assert!(take_frame::<Reply>(&mut buf).is_err());
    }

    #[test]
    fn read_frame_says_none_at_eof() {
        let mut empty: &[u8] = &[];
        let got: Option<Reply> = read_frame(&mut empty, &mut Vec::new()).unwrap();
        assert!(got.is_none());
    }
}
