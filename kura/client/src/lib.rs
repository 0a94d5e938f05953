//! The client side of Kura's agent surface, `kura mcp` ([`relay`]), `kura mcp-proxy`
//! ([`proxy`]) and `kura hook` ([`hook`]): where `kura serve` is and the agent's token. These run beside an outside agent on a laptop or a Pi and
//! never open the database — but `kura hook import` ([`import`]), which writes a session the
//! agent had before Kura watched it into the database, marked imported.

pub mod hook;
pub mod import;
pub mod install;
pub mod proxy;
pub mod relay;
pub mod settings;
pub mod surface;

use std::path::PathBuf;

use anyhow::Context as _;

/// Where `kura serve`'s agent surface is unless told otherwise (the console's loopback
/// address).
pub const DEFAULT_URL: &str = "http://127.0.0.1:8480";

/// Where the agent surface is and who is calling.
#[derive(Debug, Clone, clap::Args)]
pub struct AgentArgs {
    /// `kura serve`'s console address (the agent surface is served beside it).
    #[arg(long, env = "KURA_AGENT_URL", default_value = DEFAULT_URL)]
    pub url: String,
    /// A file holding the agent's token (from `kura keys add-agent`); else $KURA_AGENT_TOKEN.
    #[arg(long, env = "KURA_AGENT_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// A CA certificate (PEM) to trust for an https URL (the console's, e.g. console-ca.pem).
    #[arg(long, env = "KURA_AGENT_CA")]
    pub ca: Option<PathBuf>,
}

impl AgentArgs {
    /// The token, from the file or the environment.
    pub fn token(&self) -> anyhow::Result<String> {
        let token = match &self.token_file {
            Some(p) => std::fs::read_to_string(p)
                .with_context(|| format!("cannot read the agent token file {}", p.display()))?,
            None => std::env::var("KURA_AGENT_TOKEN").map_err(|_| {
                anyhow::anyhow!(
                    "no agent token: set KURA_AGENT_TOKEN or --token-file (from `kura keys add-agent --name NAME` on the Kura)"
                )
            })?,
        };
        let token = token.trim().to_owned();
        anyhow::ensure!(!token.is_empty(), "the agent token is empty");
        Ok(token)
    }

    /// An HTTP client that trusts `--ca` (and nothing else) for https.
    pub fn client(&self) -> anyhow::Result<reqwest::Client> {
        let mut b = reqwest::Client::builder()
            .user_agent(concat!("kura/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(std::time::Duration::from_secs(5));
        if let Some(ca) = &self.ca {
            let pem = std::fs::read(ca).with_context(|| format!("cannot read {}", ca.display()))?;
            let cert = reqwest::Certificate::from_pem(&pem)
                .with_context(|| format!("{} is not a PEM certificate", ca.display()))?;
            b = b.tls_built_in_root_certs(false).add_root_certificate(cert);
        }
        Ok(b.build()?)
    }

    /// The URL of `path` on the surface.
    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url.trim_end_matches('/'))
    }
}

/// A refusal from the agent surface (its JSON body), or a failure to reach it.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Kura answered with a refusal.
    #[error("kura refused ({kind}): {message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The refusal's kind (`unauthorized`, `invalid`, `not_found`, `limited`, …).
        kind: String,
        /// What it said.
        message: String,
    },
    /// Kura could not be reached or answered nonsense.
    #[error("cannot reach kura serve at the agent URL: {0}")]
    Unreachable(String),
}

/// A refusal's body, as the routes send it.
#[derive(serde::Deserialize)]
struct Refusal {
    error: String,
    kind: String,
}

/// One operation on the JSON routes (`/agent/v1/<op>`).
pub async fn call<Req: serde::Serialize, Resp: serde::de::DeserializeOwned>(
    client: &reqwest::Client,
    args: &AgentArgs,
    token: &str,
    op: &str,
    req: &Req,
) -> Result<Resp, CallError> {
    let resp = client
        .post(args.at(&format!("/agent/v1/{op}")))
        .bearer_auth(token)
        .json(req)
        .timeout(std::time::Duration::from_secs(15))
        .send()
        .await
        .map_err(|e| CallError::Unreachable(e.to_string()))?;
    let status = resp.status();
    let body = resp
        .bytes()
        .await
        .map_err(|e| CallError::Unreachable(e.to_string()))?;
    if status.is_success() {
        return serde_json::from_slice(&body).map_err(|e| CallError::Unreachable(e.to_string()));
    }
    let refusal: Refusal = serde_json::from_slice(&body)
        .map_err(|_| CallError::Unreachable(format!("HTTP {status} without a Kura refusal")))?;
    Err(CallError::Refused {
        status: status.as_u16(),
        kind: refusal.kind,
        message: refusal.error,
    })
}
