//! A request body built from a frame and records — the one path a provider sends by and
//! `kura show --prompt` rebuilds by: the frame on the answer's first record (rule, model,
//! system prompt, tools, `max_tokens`, prompt budget), the turn's sealed context ledger and
//! the records before it in the turn. The same function both times, so the bytes agree or
//! the record was changed.

use proto::RecordId;
use proto::prompt::{ANTHROPIC_MESSAGES_V1, Frame, OPENAI_CHAT_V1, Sent};
use proto::record::Record;

use crate::TurnInput;

/// Why a body cannot be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RebuildError {
    /// The frame names a rule this build does not know.
    #[error(
        "rendering rule {0:?} is not one this kura knows ({OPENAI_CHAT_V1:?}, {ANTHROPIC_MESSAGES_V1:?}); use the kura release that recorded it"
    )]
    UnknownRule(String),
    /// The recorded frame does not read as one.
    #[error("the recorded prompt frame is not a frame: {0}")]
    Frame(String),
}

/// The request body `frame` with `context` and `history` makes, byte for byte, and the
/// context records cut to fit its prompt budget (first cut first).
pub fn build(
    frame: &Frame,
    context: &[Record],
    history: &[Record],
) -> Result<(Vec<u8>, Vec<RecordId>), RebuildError> {
    let rendered = crate::render::render(context, frame.prompt_tokens);
    let input = TurnInput {
        session_id: proto::SessionId::from(uuid::Uuid::nil()),
        seq: 0,
        context,
        history,
        tools: &frame.tools,
        max_tokens: frame.max_tokens,
    };
    let body = match frame.rule.as_str() {
        OPENAI_CHAT_V1 => crate::openai::body_bytes(frame, &rendered.text, &input),
        ANTHROPIC_MESSAGES_V1 => crate::anthropic::body_bytes(frame, &rendered.text, &input),
        other => return Err(RebuildError::UnknownRule(other.to_owned())),
    };
    Ok((body, rendered.cut))
}

/// The request body `frame` with `context` and `history` makes, byte for byte.
pub fn rebuild(
    frame: &Frame,
    context: &[Record],
    history: &[Record],
) -> Result<Vec<u8>, RebuildError> {
    build(frame, context, history).map(|(body, _)| body)
}

/// A recorded prompt built again and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proven {
    /// The body rebuilt from the store, byte for byte as it would have been sent.
    pub body: Vec<u8>,
    /// Its SHA-256 (hex).
    pub sha256: String,
    /// Whether that is the hash the record carries.
    pub matches: bool,
}

/// Builds the body again from `frame` (as recorded, JSON), `context` and `history`, and
/// checks it against `recorded` (the SHA-256 the answer's first record carries).
pub fn prove(
    frame: &str,
    recorded: &str,
    context: &[Record],
    history: &[Record],
) -> Result<Proven, RebuildError> {
    let frame: Frame =
        serde_json::from_str(frame).map_err(|e| RebuildError::Frame(e.to_string()))?;
    let body = rebuild(&frame, context, history)?;
    let sha256 = proto::prompt::sha256_hex(&body);
    Ok(Proven {
        matches: sha256 == recorded,
        body,
        sha256,
    })
}

/// What a provider sends for `input` in `frame`, and what it records of it: the body's
/// SHA-256, the frame and the records cut.
pub(crate) fn prepare(
    frame: Frame,
    input: &TurnInput<'_>,
) -> Result<(Vec<u8>, Sent), crate::ProviderError> {
    let (body, cut) = build(&frame, input.context, input.history)
        .map_err(|e| crate::ProviderError::Fatal(e.to_string()))?;
    let sent = Sent {
        sha256: proto::prompt::sha256_hex(&body),
        frame,
        cut,
    };
    Ok((body, sent))
}
