//! The console over raw HTTP/1.1, as a browser uses it: log in with an enrolled Ed25519 key,
//! read the page's CSRF token, post signed decisions — for tests and benches without a browser.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use ed25519_dalek::{Signer, SigningKey};
use serde_json::json;

/// Waits (up to a minute) until something listens on the loopback `port`.
pub fn wait_http(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "the console did not come up on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One HTTP/1.1 exchange: status, headers (lowercased names), body.
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).expect("send");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head.to_lowercase(), body.to_owned())
}

/// Logs in with `key` (made here, as the browser would), returning the cookie.
pub fn login(port: u16, key: &SigningKey) -> String {
    let (_, _, page) = http(port, "GET", "/login", &[], "");
    let challenge = page
        .split("data-challenge=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("challenge")
        .to_owned();
    let bytes = format!("kura.console.login.v1\n{challenge}\nhttp://127.0.0.1:{port}");
    let body = json!({
        "challenge": challenge,
        "public_key": hex::encode(key.verifying_key().as_bytes()),
        "signature": hex::encode(key.sign(bytes.as_bytes()).to_bytes()),
    })
    .to_string();
    let (status, head, out) = http(
        port,
        "POST",
        "/api/login",
        &[("Content-Type", "application/json")],
        &body,
    );
    assert_eq!(status, 200, "{out}");
    head.lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .and_then(|c| c.split(';').next())
        .expect("cookie")
        .to_owned()
}

/// The CSRF token a logged-in page carries (what its script sends with every change).
pub fn csrf(port: u16, cookie: &str) -> String {
    let (status, _, page) = http(port, "GET", "/approvals", &[("Cookie", cookie)], "");
    assert_eq!(status, 200, "{page}");
    page.split("name=\"kura-csrf\" content=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("csrf meta")
        .to_owned()
}

/// Sends a request on a fresh connection and returns it with the response head read (for
/// streams: the body is left to the caller).
pub fn open(port: u16, path: &str, headers: &[(&str, &str)]) -> (TcpStream, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).expect("send");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    (s, String::from_utf8_lossy(&head).to_lowercase())
}

/// Whether the server ends the stream (closes the connection) within `within`.
pub fn ends_within(s: &mut TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 4096];
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .expect("timeout");
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return false,
            Err(_) => return true,
        }
    }
    false
}
