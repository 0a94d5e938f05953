//! The HTTP client the OTLP exporter sends through: reqwest's, keeping the status of the
//! last refusal, so the export can tell a batch the receiver will never take from a receiver
//! that is away or not yet set up right (the exporter itself reports both as one error).

use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// reqwest, and the status of the last answer that refused a batch (0: none).
#[derive(Debug, Clone)]
pub(crate) struct Client {
    inner: reqwest::Client,
    refused: Arc<AtomicU16>,
}

impl Client {
    pub(crate) fn new(inner: reqwest::Client) -> Client {
        Client {
            inner,
            refused: Arc::default(),
        }
    }

    /// The status of the last refusal, shared with the clone the exporter holds.
    pub(crate) fn refused(&self) -> Arc<AtomicU16> {
        Arc::clone(&self.refused)
    }
}

#[async_trait::async_trait]
impl HttpClient for Client {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        self.refused.store(0, Ordering::Relaxed);
        let out = self.inner.send_bytes(request).await;
        if let Err(e) = &out
            && let Some(status) = e.downcast_ref::<reqwest::Error>().and_then(|e| e.status())
        {
            self.refused.store(status.as_u16(), Ordering::Relaxed);
        }
        out
    }
}

/// Whether a refusal with `status` is about the batch itself, so sending it again cannot
/// help: 400 (the receiver cannot read it) and 413 (too large for it). OTLP/HTTP says no
/// other 4xx or 5xx but 429, 502, 503 and 504 is worth a retry either; Kura still retries
/// them, because the spans come from the cursor, not from memory: a receiver that wants a
/// token (401, 403), is at another path (404) or is failing (500) takes every span once it
/// is put right, where dropping would lose them for good.
pub(crate) fn batch_refused(status: u16) -> bool {
    matches!(status, 400 | 413)
}

#[cfg(test)]
mod tests {
    use super::batch_refused;

    #[test]
    fn only_a_refusal_of_the_batch_itself_drops_it() {
        for s in [400, 413] {
            assert!(batch_refused(s), "{s}");
        }
        for s in [0, 200, 401, 403, 404, 408, 429, 500, 502, 503, 504] {
            assert!(!batch_refused(s), "{s}");
        }
    }
}
