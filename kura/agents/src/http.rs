//! The operations as plain HTTP JSON routes (`POST /agent/v1/<operation>`), for a script or
//! a program without an MCP client. The same [`crate::Gateway`] methods as the MCP tools.

use std::sync::Arc;

use axum::Json;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{Caller, Gateway, GatewayError, Surface};

/// The body of a refusal.
#[derive(Debug, Serialize)]
struct Refusal {
    error: String,
    kind: &'static str,
}

impl GatewayError {
    /// A short name for the kind, as both surfaces report it.
    pub fn kind(&self) -> &'static str {
        match self {
            GatewayError::Unauthorized => "unauthorized",
            GatewayError::Invalid(_) => "invalid",
            GatewayError::NotFound(_) => "not_found",
            GatewayError::TooLarge(_) => "too_large",
            GatewayError::Limited(_) => "limited",
            GatewayError::Internal(_) => "internal",
        }
    }
}

impl IntoResponse for GatewayError {
    fn into_response(self) -> Response {
        let status = match self {
            GatewayError::Unauthorized => StatusCode::UNAUTHORIZED,
            GatewayError::Invalid(_) => StatusCode::BAD_REQUEST,
            GatewayError::NotFound(_) => StatusCode::NOT_FOUND,
            GatewayError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            GatewayError::Limited(_) => StatusCode::TOO_MANY_REQUESTS,
            GatewayError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let body = Refusal {
            error: self.to_string(),
            kind: self.kind(),
        };
        (status, Json(body)).into_response()
    }
}

/// One operation: authenticate, read the body as `Req`, run on a blocking thread.
async fn call<Req, Resp>(
    surface: Arc<Surface>,
    headers: HeaderMap,
    body: axum::body::Bytes,
    op: fn(&Gateway, &Caller, Req) -> Result<Resp, GatewayError>,
) -> Response
where
    Req: DeserializeOwned + Send + 'static,
    Resp: Serialize + Send + 'static,
{
    let text = |h| {
        headers
            .get(h)
            .and_then(|v: &axum::http::HeaderValue| v.to_str().ok())
    };
    let caller = match surface.caller(
        text(header::AUTHORIZATION),
        "http",
        text(header::USER_AGENT).unwrap_or(""),
    ) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    let req: Req = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return GatewayError::Invalid(format!("the request body: {e}")).into_response(),
    };
    let ran = tokio::task::spawn_blocking(move || op(&surface.gateway, &caller, req)).await;
    match ran {
        Ok(Ok(resp)) => Json(resp).into_response(),
        Ok(Err(e)) => e.into_response(),
        Err(e) => GatewayError::Internal(e.to_string()).into_response(),
    }
}

macro_rules! route {
    ($router:expr, $path:literal, $op:path) => {
        $router.route(
            $path,
            post(
                |State(s): State<Arc<Surface>>, h: HeaderMap, b: axum::body::Bytes| async move {
                    call(s, h, b, $op).await
                },
            ),
        )
    };
}

/// Refuses a request without a known token before its body is read: a stranger cannot
/// make kura serve buffer anything. (Each operation checks the token again, and names the
/// caller from it.)
pub(crate) async fn require_token(
    State(surface): State<Arc<Surface>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let auth = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match surface.caller(auth, "http", "") {
        Ok(_) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// `POST /agent/v1/<operation>` for each operation.
pub fn routes(surface: Arc<Surface>) -> axum::Router {
    let r = axum::Router::new();
    let r = route!(r, "/agent/v1/start_session", Gateway::start_session);
    let r = route!(r, "/agent/v1/record_step", Gateway::record_step);
    let r = route!(r, "/agent/v1/declare_call", Gateway::declare_call);
    let r = route!(r, "/agent/v1/wait_decision", Gateway::wait_decision);
    let r = route!(r, "/agent/v1/withdraw_call", Gateway::withdraw_call);
    let r = route!(r, "/agent/v1/report_ungated", Gateway::report_ungated);
    let r = route!(r, "/agent/v1/ask_person", Gateway::ask_person);
    let r = route!(r, "/agent/v1/end_turn", Gateway::end_turn);
    let r = route!(r, "/agent/v1/remember", Gateway::remember);
    let r = route!(r, "/agent/v1/search", Gateway::search);
    let r = route!(r, "/agent/v1/read_log", Gateway::read_log);
    let r = route!(r, "/agent/v1/show_record", Gateway::show_record);
    let r = route!(r, "/agent/v1/verify", Gateway::verify);
    let r = route!(r, "/agent/v1/prove", Gateway::prove);
    let r = route!(r, "/agent/v1/diff", Gateway::diff);
    let r = route!(r, "/agent/v1/delegate", Gateway::delegate);
    let r = route!(r, "/agent/v1/delegation", Gateway::delegation);
    // A body over the record bound (plus room for the envelope) is refused before it is read
    // whole; the gateway checks the record's own size again.
    let limit = surface.gateway.max_body();
    r.layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            surface.clone(),
            require_token,
        ))
        .with_state(surface)
}
