//! One POST to a model server, as every HTTP provider makes it: the body sent as given
//! (its hash is on the record), the answer read with its size bounded, 429 and 5xx reported
//! as busy with the server's `Retry-After`, any other failure as fatal with a short quote.

use std::time::Duration;

use serde_json::Value;

use crate::ProviderError;
use crate::bounded::excerpt;

/// Largest response body read.
const MAX_BODY: usize = 8 * 1024 * 1024;
/// Most of an error body read (only a quote of it is kept).
const MAX_ERROR_BODY: usize = 64 * 1024;
/// Most of a body quoted in an error.
pub(crate) const MAX_QUOTE: usize = 2048;

/// A model server as both HTTP providers reach it: the client with the configured timeout,
/// the endpoint, the model, the key (read from the named variable), the system prompt, the
/// prompt budget, the runtime the worker blocks on and the price table.
pub(crate) struct Server {
    http: reqwest::Client,
    /// `<base_url>/<path>`.
    pub(crate) url: String,
    pub(crate) model: String,
    pub(crate) api_key: Option<String>,
    system: String,
    prompt_tokens: Option<u64>,
    handle: tokio::runtime::Handle,
    pub(crate) prices: std::collections::BTreeMap<String, crate::Price>,
}

impl Server {
    /// The server `config` names, at `path` under its base URL.
    pub(crate) fn new(
        config: &crate::ProviderConfig,
        path: &str,
        handle: tokio::runtime::Handle,
    ) -> anyhow::Result<Server> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(config.timeout_ms.max(1)))
            .build()?;
        Ok(Server {
            http,
            url: format!("{}/{path}", config.base_url.trim_end_matches('/')),
            model: config.model.clone(),
            api_key: config
                .api_key_env
                .as_deref()
                .and_then(|name| std::env::var(name).ok())
                .filter(|k| !k.is_empty()),
            system: config.system_prompt.clone(),
            prompt_tokens: config.prompt_budget(),
            handle,
            prices: config.prices.clone(),
        })
    }

    /// Builds the request for `input` by `rule` (the answer bounded by `max_tokens` and the
    /// budgets), lets `auth` add the server's headers, sends it and reads the answer: the
    /// response, and what was sent.
    pub(crate) fn ask(
        &self,
        rule: &str,
        max_tokens: Option<u64>,
        input: &crate::TurnInput<'_>,
        auth: impl FnOnce(reqwest::RequestBuilder, Option<&str>) -> reqwest::RequestBuilder,
    ) -> Result<(Value, proto::prompt::Sent), ProviderError> {
        let frame = proto::prompt::Frame {
            rule: rule.into(),
            model: self.model.clone(),
            system: self.system.clone(),
            tools: input.tools.to_vec(),
            max_tokens,
            prompt_tokens: self.prompt_tokens,
        };
        let (body, sent) = crate::prompt::prepare(frame, input, input.max_tokens)?;
        let req = self
            .http
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        let req = auth(req, self.api_key.as_deref());
        let response = self.handle.block_on(post(req, &self.url))?;
        Ok((response, sent))
    }
}

/// Sends `req` (to `url`, named in errors) and reads its JSON answer.
pub(crate) async fn post(req: reqwest::RequestBuilder, url: &str) -> Result<Value, ProviderError> {
    let resp = req
        .send()
        .await
        .map_err(|e| ProviderError::Transient(format!("{url}: {e}")))?;
    let status = resp.status();
    let retry_after = retry_after(resp.headers(), std::time::SystemTime::now());
    // An error body is only quoted, so little of it is read; a success body is bounded too
    // (a server streaming gigabytes must not exhaust a Pi's memory).
    let limit = if status.is_success() {
        MAX_BODY
    } else {
        MAX_ERROR_BODY
    };
    let text = read_body(resp, limit).await?;
    let quote = || excerpt(&text, MAX_QUOTE);
    // 529 is Anthropic's "overloaded"; every 5xx is a server that may recover.
    if status.is_server_error() || status.as_u16() == 429 {
        return Err(ProviderError::Busy {
            why: format!("{url}: HTTP {status}: {}", quote()),
            retry_after,
        });
    }
    if !status.is_success() {
        return Err(ProviderError::Fatal(format!(
            "{url}: HTTP {status}: {}",
            quote()
        )));
    }
    if text.len() > MAX_BODY {
        return Err(ProviderError::Fatal(format!(
            "{url}: response larger than {MAX_BODY} bytes"
        )));
    }
    serde_json::from_str(&text)
        .map_err(|e| ProviderError::Fatal(format!("response is not JSON: {e}")))
}

/// How long a `Retry-After` header asks to wait (delta-seconds or an HTTP date, RFC 9110
/// §10.2.3), seen at `now`; `None` when there is none or it does not read.
pub fn retry_after(
    headers: &reqwest::header::HeaderMap,
    now: std::time::SystemTime,
) -> Option<Duration> {
    let v = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Reads at most `limit` + 1 bytes of the body, as text.
async fn read_body(mut resp: reqwest::Response, limit: usize) -> Result<String, ProviderError> {
    let mut body = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| ProviderError::Transient(e.to_string()))?
    {
        body.extend_from_slice(&chunk[..chunk.len().min(limit + 1 - body.len())]);
        if body.len() > limit {
            break;
        }
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}
