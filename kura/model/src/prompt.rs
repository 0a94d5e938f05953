//! Building a request body again from what the store holds (the frame on the answer's first
//! record, the sealed context ledger, the records before it in the turn), for `kura show
//! --prompt`: the same function the provider sent it with, so the bytes agree or the record
//! was changed.

use proto::prompt::{ANTHROPIC_MESSAGES_V1, Frame, OPENAI_CHAT_V1};
use proto::record::Record;

use crate::{ToolSpec, TurnInput};

/// Why a body cannot be built again.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RebuildError {
    /// The frame names a rule this build does not know.
    #[error(
        "rendering rule {0:?} is not one this kura knows (it knows {OPENAI_CHAT_V1:?}); use the kura release that recorded it"
    )]
    UnknownRule(String),
    /// The recorded frame does not read as one.
    #[error("the recorded prompt frame is not a frame: {0}")]
    Frame(String),
}

/// The request body `frame` with `context` and `history` makes, byte for byte.
pub fn rebuild(
    frame: &Frame,
    context: &[Record],
    history: &[Record],
) -> Result<Vec<u8>, RebuildError> {
    let tools: Vec<ToolSpec> = frame
        .tools
        .iter()
        .map(|t| ToolSpec {
            name: t.name.clone(),
            description: t.description.clone(),
            parameters: t.parameters.clone(),
        })
        .collect();
    let input = TurnInput {
        session_id: proto::SessionId::from(uuid::Uuid::nil()),
        seq: 0,
        context,
        history,
        tools: &tools,
        max_tokens: frame.max_tokens,
    };
    match frame.rule.as_str() {
        OPENAI_CHAT_V1 => Ok(crate::openai::body_bytes(
            &frame.model,
            &frame.system,
            frame.prompt_tokens,
            &input,
        )),
        // The frame holds the `max_tokens` sent (the API requires one).
        ANTHROPIC_MESSAGES_V1 => Ok(crate::anthropic::body_bytes(
            &frame.model,
            &frame.system,
            (frame.max_tokens.unwrap_or(0), frame.prompt_tokens),
            &input,
        )),
        other => Err(RebuildError::UnknownRule(other.to_owned())),
    }
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

/// What a provider records of a request it sends: the SHA-256 of `body`, the frame it was
/// built in (rule, model, system prompt, tools, the `max_tokens` sent, the prompt budget)
/// and the context records cut to fit that budget.
pub(crate) fn sent(
    (rule, model, system): (&str, &str, &str),
    (max_tokens, prompt_tokens): (Option<u64>, Option<u64>),
    input: &TurnInput<'_>,
    body: &[u8],
) -> proto::prompt::Sent {
    proto::prompt::Sent {
        sha256: proto::prompt::sha256_hex(body),
        frame: Frame {
            rule: rule.into(),
            model: model.into(),
            system: system.into(),
            tools: input
                .tools
                .iter()
                .map(|t| proto::prompt::FrameTool {
                    name: t.name.clone(),
                    description: t.description.clone(),
                    parameters: t.parameters.clone(),
                })
                .collect(),
            max_tokens,
            prompt_tokens,
        },
        cut: crate::render::render(input.context, prompt_tokens).cut,
    }
}
