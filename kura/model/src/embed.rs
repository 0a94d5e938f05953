//! Embeddings from an OpenAI-compatible `/embeddings` endpoint, for memory search.

use serde::Serialize;
use serde_json::Value;

/// Why no embedding came back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbedError {
    /// The HTTP client could not be built.
    #[error("{0}")]
    Client(reqwest::Error),
    /// The endpoint could not be reached, or its answer not read.
    #[error("{url}: {source}")]
    Transport {
        /// The endpoint.
        url: String,
        /// What failed.
        source: reqwest::Error,
    },
    /// The endpoint answered with an HTTP error.
    #[error("{url}: HTTP {status}")]
    Status {
        /// The endpoint.
        url: String,
        /// Its status.
        status: reqwest::StatusCode,
    },
    /// The answer holds no embedding.
    #[error("{0}: response has no data[0].embedding")]
    NoEmbedding(String),
}

/// The body of an `/embeddings` request.
#[derive(Serialize)]
struct EmbedRequest<'a> {
    model: &'a str,
    input: &'a str,
}

/// Embeds `text` with an OpenAI-compatible `/embeddings` endpoint (`base_url` up to `/v1`).
pub async fn embed(base_url: &str, model: &str, text: &str) -> Result<Vec<f32>, EmbedError> {
    let url = format!("{}/embeddings", base_url.trim_end_matches('/'));
    let transport = |source| EmbedError::Transport {
        url: url.clone(),
        source,
    };
    let resp = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .map_err(EmbedError::Client)?
        .post(&url)
        .json(&EmbedRequest { model, input: text })
        .send()
        .await
        .map_err(transport)?;
    if !resp.status().is_success() {
        return Err(EmbedError::Status {
            url,
            status: resp.status(),
        });
    }
    let v: Value = resp.json().await.map_err(transport)?;
    v.pointer("/data/0/embedding")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_f64)
                .map(|f| f as f32)
                .collect::<Vec<f32>>()
        })
        .filter(|v| !v.is_empty())
        .ok_or(EmbedError::NoEmbedding(url))
}
