//! Embeddings from an OpenAI-compatible `/embeddings` endpoint, for memory search.

use serde_json::Value;

/// Embeds `text` with an OpenAI-compatible `/embeddings` endpoint (`base_url` up to `/v1`).
pub async fn embed(
    base_url: &str,
    model: &str,
    text: &str,
) -> std::result::Result<Vec<f32>, String> {
    let url = format!("{}/embeddings", base_url.trim_end_matches('/'));
    let resp = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .map_err(|e| e.to_string())?
        .post(&url)
        .json(&serde_json::json!({"model": model, "input": text}))
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    if !resp.status().is_success() {
        return Err(format!("{url}: HTTP {}", resp.status()));
    }
    let v: Value = resp.json().await.map_err(|e| format!("{url}: {e}"))?;
    v.pointer("/data/0/embedding")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_f64)
                .map(|f| f as f32)
                .collect::<Vec<f32>>()
        })
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("{url}: response has no data[0].embedding"))
}
