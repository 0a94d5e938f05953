//! Bounded reads of what outsiders send (a model server's body, a program's output): at most
//! so many bytes are kept, the rest is drained or refused, and quotes in errors and logs are
//! excerpts — so no answer can grow a record or a log without bound.

use std::io::Read;

pub use proto::text::excerpt;

/// Reads `r` to its end, keeping the first `keep` bytes; returns them and the total read.
/// Reading on after `keep` means a writer is never blocked on a full pipe.
pub fn read_head(mut r: impl Read, keep: usize) -> std::io::Result<(Vec<u8>, u64)> {
    let mut head = Vec::new();
    let mut total = 0u64;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => return Ok((head, total)),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        total += n as u64;
        if head.len() < keep {
            head.extend_from_slice(&buf[..n.min(keep - head.len())]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_bounded() {
        let (head, total) = read_head(&[7u8; 100_000][..], 10).expect("read");
        assert_eq!((head.len(), total), (10, 100_000));
    }
}
