//! `kura mcp`: an MCP server on stdio for a local client (Claude Code, Codex, Cursor, …) that
//! bridges each JSON-RPC message to `kura serve`'s Streamable HTTP endpoint with the agent's
//! token, so the agent's user needs neither the database nor a network-capable client.

use std::sync::Arc;

use anyhow::Context as _;
use futures::StreamExt as _;
use tokio::io::AsyncBufReadExt;
use tokio::sync::RwLock;

use crate::AgentArgs;

/// One message's cap (JSON-RPC line from the client, or one answer from the server).
const MAX_MESSAGE: usize = 8 << 20;

/// Serve MCP on stdin/stdout, relayed to `kura serve` (its /mcp endpoint).
#[derive(Debug, clap::Args)]
pub struct Mcp {
    #[command(flatten)]
    agent: AgentArgs,
}

impl Mcp {
    /// Relays until stdin closes.
    /// `say` writes one whole message to stdout.
    pub fn run(self, mut say: impl FnMut(&str) -> std::io::Result<()>) -> anyhow::Result<()> {
        let token = self.agent.token()?;
        let client = self.agent.client()?;
        let url = self.agent.at("/mcp");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        // This thread owns stdout (the CLI holds its lock) and writes each answer whole; the
        // relay runs on its own thread and ends, dropping every sender, when stdin closes.
        let (out, answers) = std::sync::mpsc::channel::<String>();
        let relay = std::thread::spawn(move || {
            let relayed = rt.block_on(relay(client, url, token, out));
            // stdin's reader is a blocking thread: do not wait for it.
            rt.shutdown_timeout(std::time::Duration::from_millis(100));
            relayed
        });
        for answer in answers {
            if say(&answer).is_err() {
                break; // the client is gone
            }
        }
        relay
            .join()
            .map_err(|_| anyhow::anyhow!("the relay thread panicked"))??;
        Ok(())
    }
}

struct Bridge {
    client: reqwest::Client,
    url: String,
    token: String,
    session: RwLock<Option<String>>,
    out: std::sync::mpsc::Sender<String>,
}

async fn relay(
    client: reqwest::Client,
    url: String,
    token: String,
    out: std::sync::mpsc::Sender<String>,
) -> anyhow::Result<()> {
    let bridge = Arc::new(Bridge {
        client,
        url,
        token,
        session: RwLock::new(None),
        out,
    });
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut tasks = tokio::task::JoinSet::new();
    while let Some(line) = lines.next_line().await.context("reading stdin")? {
        if line.trim().is_empty() {
            continue;
        }
        anyhow::ensure!(
            line.len() <= MAX_MESSAGE,
            "a message over {MAX_MESSAGE} bytes"
        );
        // Each message is posted in order, and its answer's headers (the session id the
        // initialize exchange sets) are in before the next is posted; the answers themselves
        // stream back concurrently, so a long wait never holds up the next message.
        if let Some(body) = bridge.clone().send(line).await {
            tasks.spawn(body);
        }
        while tasks.try_join_next().is_some() {}
    }
    // The client closed stdin: give answers still streaming a moment, then stop (an SSE
    // stream the server keeps open must not keep this process alive).
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    Ok(())
}

impl Bridge {
    /// Posts one message; returns the reading of its answer (a JSON body, or each event of
    /// an SSE stream, written out as it comes). A failure is answered as a JSON-RPC error for
    /// the message's id.
    async fn send(
        self: Arc<Self>,
        line: String,
    ) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
        let id = serde_json::from_str::<serde_json::Value>(&line)
            .ok()
            .and_then(|v| v.get("id").cloned());
        let resp = match self.post(line).await {
            Ok(r) => r,
            Err(e) => {
                self.fail(id, e).await;
                return None;
            }
        };
        Some(async move {
            if let Err(e) = self.read(resp).await {
                self.fail(id, e).await;
            }
        })
    }

    async fn fail(&self, id: Option<serde_json::Value>, e: anyhow::Error) {
        tracing::warn!(error = %format!("{e:#}"), "kura mcp: relay failed");
        let Some(id) = id else { return };
        let err = proto::agent::RpcErrorAnswer::new(id, -32000, format!("kura serve: {e:#}"));
        self.write(&serde_json::to_string(&err).unwrap_or_default())
            .await;
    }

    async fn post(&self, line: String) -> anyhow::Result<reqwest::Response> {
        let routing = routing_headers(&line);
        let mut req = self
            .client
            .post(&self.url)
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(line);
        if let Some(s) = self.session.read().await.clone() {
            req = req.header("mcp-session-id", s);
        }
        for (name, value) in routing {
            req = req.header(name, value);
        }
        let resp = req
            .send()
            .await
            .context("cannot reach kura serve (--url)")?;
        if let Some(s) = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            *self.session.write().await = Some(s.to_owned());
        }
        let status = resp.status();
        if status == reqwest::StatusCode::UNAUTHORIZED {
            anyhow::bail!(
                "the agent token was refused (removed or rotated? `kura keys list-agents` on the Kura)"
            );
        }
        anyhow::ensure!(status.is_success(), "HTTP {status}");
        Ok(resp)
    }

    async fn read(&self, resp: reqwest::Response) -> anyhow::Result<()> {
        let sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/event-stream"));
        if !sse {
            let body = resp.bytes().await?;
            if !body.is_empty() {
                self.write(String::from_utf8_lossy(&body).trim()).await;
            }
            return Ok(());
        }
        let mut stream = resp.bytes_stream();
        let mut buf = String::new();
        while let Some(chunk) = stream.next().await {
            buf.push_str(&String::from_utf8_lossy(&chunk?).replace("\r\n", "\n"));
            anyhow::ensure!(
                buf.len() <= MAX_MESSAGE,
                "an answer over {MAX_MESSAGE} bytes"
            );
            while let Some(end) = buf.find("\n\n") {
                let event: String = buf.drain(..end + 2).collect();
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:").map(str::trim_start))
                    .collect();
                if data.iter().any(|d| !d.is_empty()) {
                    self.write(&data.join("\n")).await;
                }
            }
        }
        Ok(())
    }

    /// Hands one message to the thread that writes stdout.
    async fn write(&self, message: &str) {
        let _ = self.out.send(message.to_owned());
    }
}

/// The headers the 2026-07-28 revision requires beside the body: `MCP-Protocol-Version`
/// mirroring the request's `_meta` version (the server refuses a request whose header is
/// missing or differs), `Mcp-Method`, and `Mcp-Name` for a call, read or get. Earlier
/// revisions carry no `_meta` version and ignore the others, so those always go.
fn routing_headers(line: &str) -> Vec<(&'static str, String)> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
        return Vec::new();
    };
    let Some(method) = v.get("method").and_then(|m| m.as_str()) else {
        return Vec::new();
    };
    let printable = |t: &str| t.len() <= 256 && t.bytes().all(|b| (0x20..0x7f).contains(&b));
    let mut out = Vec::new();
    if let Some(version) = v
        .pointer("/params/_meta")
        .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
        .and_then(|p| p.as_str())
        && printable(version)
    {
        out.push(("mcp-protocol-version", version.to_owned()));
    }
    if printable(method) {
        out.push(("mcp-method", method.to_owned()));
    }
    let key = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        _ => return out,
    };
    if let Some(name) = v
        .pointer(&format!("/params/{key}"))
        .and_then(|n| n.as_str())
        && printable(name)
    {
        out.push(("mcp-name", name.to_owned()));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_call_carries_its_method_and_name_in_headers() {
        let call = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"end_turn","arguments":{}}}"#;
        assert_eq!(
            super::routing_headers(call),
            vec![
                ("mcp-method", "tools/call".to_owned()),
                ("mcp-name", "end_turn".to_owned())
            ]
        );
        assert_eq!(
            super::routing_headers(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            vec![("mcp-method", "notifications/initialized".to_owned())]
        );
        assert!(super::routing_headers("not json").is_empty());
    }
}
