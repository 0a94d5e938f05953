//! What the agent surface checks before anything else, as the MCP transport rules require:
//! the `Host` a request names (DNS rebinding: a page on another site resolving its name to
//! this Pi) and the `Origin` a browser sends. (That an MCP body is JSON at all is checked
//! beside the session count, in `sessions`.)

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The names a request may address the surface by, and the browser origins it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    /// Host names (or `host:port`); loopback's when none are configured.
    pub hosts: Vec<String>,
    /// Browser origins (`scheme://host:port`) allowed to call; any other `Origin` is refused.
    pub origins: Vec<String>,
}

/// Loopback's names: what a surface on 127.0.0.1 or ::1 answers to.
const LOOPBACK: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

impl Guard {
    /// The guard of a surface listening on `port`, reached by `hosts` (loopback's when
    /// empty): only the console's own origins, over http and https, may call from a browser.
    pub fn new(hosts: Vec<String>, port: u16) -> Guard {
        let names: Vec<String> = if hosts.is_empty() {
            LOOPBACK.iter().map(|h| (*h).to_owned()).collect()
        } else {
            hosts
        };
        let origins = names
            .iter()
            .flat_map(|h| {
                let h = if h.contains(':') && !h.starts_with('[') {
                    format!("[{h}]")
                } else {
                    h.clone()
                };
                ["http", "https"].map(|s| format!("{s}://{h}:{port}"))
            })
            .collect();
        Guard {
            hosts: names,
            origins,
        }
    }

    /// Whether `host` (a `Host` header: a name, an IPv4 address or a bracketed IPv6
    /// address, with or without a port) is one this surface answers to.
    pub fn allows_host(&self, host: &str) -> bool {
        let host = host.trim();
        let name = match host.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(""),
            None => host.rsplit_once(':').map_or(host, |(h, _)| h),
        };
        self.hosts
            .iter()
            .any(|h| h.eq_ignore_ascii_case(name) || h.eq_ignore_ascii_case(host))
    }
}

/// Refuses a request whose `Host` names no name this surface answers to (421), or whose
/// `Origin` is a browser page elsewhere (403).
pub async fn check_host(State(guard): State<Guard>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if !guard.allows_host(host) {
        return (
            StatusCode::MISDIRECTED_REQUEST,
            "this Kura does not answer to that Host (add it to [agents] hosts)",
        )
            .into_response();
    }
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let known = origin
            .to_str()
            .is_ok_and(|o| guard.origins.iter().any(|a| a.eq_ignore_ascii_case(o)));
        if !known {
            return (
                StatusCode::FORBIDDEN,
                "a browser page from another origin may not call the agent surface",
            )
                .into_response();
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_is_allowed_by_its_name_with_or_without_a_port() {
        let g = Guard::new(Vec::new(), 8480);
        for ok in ["127.0.0.1:8480", "localhost", "LOCALHOST:1", "[::1]:8480"] {
            assert!(g.allows_host(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8480",
            "127.0.0.2:8480",
            "",
            "[::2]",
        ] {
            assert!(!g.allows_host(bad), "{bad}");
        }
        assert!(g.origins.contains(&"http://127.0.0.1:8480".to_owned()));
        assert!(g.origins.contains(&"https://[::1]:8480".to_owned()));
    }
}
