//! A request body built from a frame and records — the one path a provider sends by and
//! `kura show --prompt` rebuilds by: the frame in the `model.prompt` record (rule, model,
//! system prompt, tools, `max_tokens`, prompt budget), the turn's sealed context ledger and
//! the records before the prompt in the turn. The same function both times, so the bytes agree or
//! the record was changed.

use proto::RecordId;
use proto::prompt::{ANTHROPIC_MESSAGES_V1, Frame, OPENAI_CHAT_V1, PromptContent, Sent};
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

/// What checking a recorded prompt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The rebuilt body hashes to the recorded hash, the same records were cut, and the
    /// ledgers verify.
    Ok,
    /// The rebuilt body hashes to something else.
    Mismatch,
    /// The renderer cuts other records than the record says were cut.
    CutDiffers,
    /// The ledgers it is rebuilt from do not verify (the first problem).
    Unverified(String),
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verdict::Ok => f.write_str("the rebuilt request hashes to the recorded SHA-256"),
            Verdict::Mismatch => f.write_str(
                "the request rebuilt from the store hashes to another SHA-256 than the record says was sent: the turn's context or the records before the prompt were changed",
            ),
            Verdict::CutDiffers => f.write_str(
                "the renderer cuts other records than the prompt record says were cut",
            ),
            Verdict::Unverified(p) => write!(
                f,
                "the ledgers it is rebuilt from do not verify ({p}); run `kura verify --all`"
            ),
        }
    }
}

/// A recorded prompt built again and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proven {
    /// The body rebuilt from the store, byte for byte as it would have been sent.
    pub body: Vec<u8>,
    /// Its SHA-256 (hex).
    pub sha256: String,
    /// What the check found.
    pub verdict: Verdict,
}

/// Builds the body again from the recorded `prompt`, the turn's `context` and the records
/// before the prompt (`history`), and checks it: its hash, the records cut, and that the
/// ledgers verified (`problems`, what `kura verify` found in them).
pub fn prove(
    prompt: &PromptContent,
    context: &[Record],
    history: &[Record],
    problems: &[String],
) -> Result<Proven, RebuildError> {
    let (body, cut) = build(&prompt.frame, context, history)?;
    let sha256 = proto::prompt::sha256_hex(&body);
    let verdict = if let Some(p) = problems.first() {
        Verdict::Unverified(p.clone())
    } else if sha256 != prompt.sha256 {
        Verdict::Mismatch
    } else if cut != prompt.cut {
        Verdict::CutDiffers
    } else {
        Verdict::Ok
    };
    Ok(Proven {
        body,
        sha256,
        verdict,
    })
}

/// The fewest tokens an answer is allowed when a budget is nearly spent: the request's size
/// is only estimated (4 bytes a token; servers count their own way, and a fake one in the
/// tests counts 40 for a 1 KB request), so the answer keeps this much room rather than the
/// request being refused on an estimate.
pub const MIN_ANSWER_TOKENS: u64 = 64;

/// What a provider sends for `input` in `frame`, and what it records of it: the body's
/// SHA-256, the frame and the records cut. With a token `budget` left (the session's and the
/// writs'), the request's own size counts against it: `max_tokens` is what is left after the
/// prompt (estimated at 4 bytes a token), never less than [`MIN_ANSWER_TOKENS`] (or what is
/// left, when that is less).
pub(crate) fn prepare(
    mut frame: Frame,
    input: &TurnInput<'_>,
    budget: Option<u64>,
) -> Result<(Vec<u8>, Sent), crate::ProviderError> {
    let fatal = |e: RebuildError| crate::ProviderError::Fatal(e.to_string());
    if let Some(left) = budget {
        let (probe, _) = build(&frame, input.context, input.history).map_err(fatal)?;
        let prompt = probe.len().div_ceil(4) as u64;
        let answer = left.saturating_sub(prompt).max(left.min(MIN_ANSWER_TOKENS));
        frame.max_tokens = Some(frame.max_tokens.map_or(answer, |m| m.min(answer)));
    }
    let (body, cut) = build(&frame, input.context, input.history).map_err(fatal)?;
    let sent = Sent {
        sha256: proto::prompt::sha256_hex(&body),
        frame,
        cut,
    };
    Ok((body, sent))
}
