//! Kura's sessions as traces in the tools people already watch (Arize Phoenix, Langfuse,
//! Jaeger, any OpenTelemetry collector): each turn's sealed output ledger becomes a trace —
//! an `invoke_agent` span holding a `chat` span per model answer and an `execute_tool` span
//! per tool call, named and attributed by OpenTelemetry's GenAI semantic conventions — and
//! every span carries its record's hash, its ledger's hash and a link to its proof, so a
//! trace leads back to what can be verified. `kura serve` exports them over OTLP/HTTP from a
//! durable cursor over the seal log: batched, bounded (one batch in memory), retried with
//! backoff while the receiver is away (a batch it refuses for what it is, 400 or 413, is
//! skipped and said), and never in a turn's way. Off unless configured.

mod client;
mod spans;

use std::time::Duration;

use kura_store::Store;
use kura_tlog::storage::LogStorage as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::trace::SpanExporter as _;
use serde::{Deserialize, Serialize};

pub use spans::spans_of;

/// The cursor the export keeps in the store: the seal-log leaves already exported.
pub const CURSOR: &str = "serve.traces";

/// `[traces]`: where to send sessions as traces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TracesConfig {
    /// The OTLP/HTTP traces endpoint (e.g. `http://127.0.0.1:6006/v1/traces` for Phoenix,
    /// `http://127.0.0.1:4318/v1/traces` for a collector); unset: no traces.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The `service.name` the spans are under.
    pub service_name: String,
    /// The console's address as people reach it, for each span's link to its proof.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub console_url: Option<String>,
    /// Turns sent in one batch.
    pub batch_turns: usize,
    /// How often new sealed turns are looked for.
    pub interval_ms: u64,
}

impl Default for TracesConfig {
    fn default() -> Self {
        TracesConfig {
            endpoint: None,
            service_name: "kura".into(),
            console_url: None,
            batch_turns: 64,
            interval_ms: 2000,
        }
    }
}

/// The spans of the sealed turns after the cursor (at most `limit` ledgers looked at), and
/// where the cursor goes once they are delivered.
pub fn next_batch(
    store: &Store,
    console: Option<&str>,
    limit: usize,
) -> kura_store::Result<(Vec<opentelemetry_sdk::trace::SpanData>, i64)> {
    let from = kura_work::cursor(store, CURSOR)?.max(0) as u64;
    let log = store.seal_log();
    let mut ledgers = Vec::new();
    log.scan_leaves(from, from + limit as u64, &mut |index, id, _| {
        ledgers.push((index, id));
        Ok(true)
    })?;
    let mut out = Vec::new();
    let mut to = from as i64;
    for (index, id) in ledgers {
        to = index as i64 + 1;
        let Ok(id) = kura_store::store::parse_id(&id) else {
            continue;
        };
        let ledger = store.read_ledger(id)?;
        // A turn's output ledger is one trace; contexts, memory and forks are not turns.
        if ledger.label.ends_with("-out") {
            out.extend(spans_of(&ledger, &store.hydrate(id)?, console));
        }
    }
    Ok((out, to))
}

/// Exports until `stop` resolves. The store is opened for each look (no long read); a
/// failed export is retried with a backoff that doubles up to a minute, and the cursor moves
/// only once a batch is delivered.
pub async fn run(
    config: TracesConfig,
    db: std::path::PathBuf,
    options: kura_store::StoreOptions,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let Some(endpoint) = config.endpoint.clone() else {
        return Ok(());
    };
    let client = client::Client::new(
        reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()?,
    );
    let refused = client.refused();
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_endpoint(endpoint.clone())
        .with_timeout(Duration::from_secs(10))
        .build()?;
    exporter.set_resource(
        &opentelemetry_sdk::Resource::builder()
            .with_service_name(config.service_name.clone())
            .build(),
    );
    // The host only: an endpoint may hold a token.
    let host = reqwest::Url::parse(&endpoint)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_default();
    tracing::info!(%host, "traces: sessions exported as OpenTelemetry spans");
    let every = Duration::from_millis(config.interval_ms.max(100));
    let mut backoff = every;
    loop {
        // Nothing here ends the export: a failed look or write is said, and tried again.
        let wait = match round(&config, &db, &options, &exporter, &refused).await {
            Ok(true) => {
                backoff = every;
                Duration::ZERO
            }
            Ok(false) => every,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), retry_in_ms = backoff.as_millis() as u64, "traces: not delivered; trying again");
                let w = backoff;
                backoff = (backoff * 2).min(Duration::from_secs(60));
                w
            }
        };
        tokio::select! {
            _ = stop.changed() => return Ok(()),
            _ = tokio::time::sleep(wait.max(Duration::from_millis(50))) => {}
        }
    }
}

/// One look: the next batch read off the runtime, exported, the cursor moved once it is
/// delivered (and only when it moves). Whether there was anything to send.
async fn round(
    config: &TracesConfig,
    db: &std::path::Path,
    options: &kura_store::StoreOptions,
    exporter: &opentelemetry_otlp::SpanExporter,
    refused: &std::sync::atomic::AtomicU16,
) -> anyhow::Result<bool> {
    let (db, options, console, limit) = (
        db.to_owned(),
        options.clone(),
        config.console_url.clone(),
        config.batch_turns.max(1),
    );
    let (spans, from, to, store) = tokio::task::spawn_blocking(move || {
        let store = Store::open(&db, &options)?;
        let from = kura_work::cursor(&store, CURSOR)?;
        let (spans, to) = next_batch(&store, console.as_deref(), limit)?;
        anyhow::Ok((spans, from, to, store))
    })
    .await??;
    if to == from {
        return Ok(false);
    }
    let n = spans.len();
    if !spans.is_empty()
        && let Err(e) = exporter.export(spans).await
    {
        let status = refused.load(std::sync::atomic::Ordering::Relaxed);
        if !client::batch_refused(status) {
            anyhow::bail!("the receiver did not take the spans: {e}");
        }
        // Sent again it would be refused again, and hold back every later turn's spans.
        tracing::warn!(
            status,
            spans = n,
            leaves = format!("{from}..{to}"),
            "traces: the receiver refused this batch for what it is; skipped (413: lower [traces] batch_turns)"
        );
    }
    tokio::task::spawn_blocking(move || kura_work::set_cursor(&store, CURSOR, to)).await??;
    tracing::debug!(spans = n, to, "traces: exported");
    Ok(true)
}
