//! The hub's JetStream side: each Pi's own stream and object store and the shared
//! checkpoints bucket, made by the hub's operator ([`setup`], for every Pi `kura fleet
//! add-pi` let in) and only opened by Pis ([`open`]), whose leaf connections may not create,
//! change or delete them.

use std::time::Duration;

use async_nats::jetstream::{self, kv, object_store, stream};
use proto::fleet::{self, CHECKPOINTS_BUCKET, ReplMessage};

use crate::{FleetError, Result};

/// How long JetStream remembers a `Nats-Msg-Id` (a publisher killed and restarted within
/// it republishes nothing twice; after it, the cursor and the expected sequence hold).
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(600);
/// The largest message a Pi's stream takes (the Pi's own bus takes 64 KiB).
pub const MAX_MESSAGE: i32 = 64 * 1024;
/// The largest value of the checkpoints bucket (a signed note with a few cosignatures).
pub const MAX_CHECKPOINT: i32 = 16 * 1024;

/// What one Pi's history may take on the hub, and how many copies the hub keeps.
#[derive(Debug, Clone, Copy)]
pub struct Quota {
    /// Copies of everything (1 or 3).
    pub replicas: usize,
    /// Bytes of one Pi's stream, and again of its object store; when full, the hub refuses
    /// new messages (history is never aged out), and the Pi's publisher retries.
    pub bytes_per_pi: i64,
}

/// `pi`'s stream and object store, and the checkpoints bucket (made by [`setup`]).
pub async fn open(
    js: &jetstream::Context,
    pi: &str,
) -> Result<(stream::Stream, kv::Store, object_store::ObjectStore)> {
    let missing = |what: &str, e: &dyn std::fmt::Display| {
        FleetError::Hub(format!(
            "{what} is not on the hub ({e}): on the hub, `kura fleet add-pi {pi}` then `kura fleet setup-hub`"
        ))
    };
    let name = fleet::stream(pi);
    let s = js
        .get_stream(&name)
        .await
        .map_err(|e| missing(&format!("stream {name}"), &e))?;
    let k = js
        .get_key_value(CHECKPOINTS_BUCKET)
        .await
        .map_err(|e| missing(&format!("bucket {CHECKPOINTS_BUCKET}"), &e))?;
    let bucket = fleet::objects_bucket(pi);
    let o = js
        .get_object_store(&bucket)
        .await
        .map_err(|e| missing(&format!("object store {bucket}"), &e))?;
    Ok((s, k, o))
}

/// The hub's refusal, as [`FleetError::HubFull`] when JetStream had no room for the quota —
/// known by its error codes, never by its words.
fn refused<E: std::error::Error + 'static>(e: E) -> FleetError {
    let full = |c: jetstream::ErrorCode| {
        [
            jetstream::ErrorCode::STORAGE_RESOURCES_EXCEEDED,
            jetstream::ErrorCode::INSUFFICIENT_RESOURCES,
            jetstream::ErrorCode::ACCOUNT_RESOURCES_EXCEEDED,
        ]
        .contains(&c)
    };
    let mut at: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(cause) = at {
        let code = cause
            .downcast_ref::<jetstream::Error>()
            .map(jetstream::Error::error_code)
            .or_else(|| {
                match cause
                    .downcast_ref::<jetstream::context::CreateStreamError>()?
                    .kind()
                {
                    jetstream::context::CreateStreamErrorKind::JetStream(j) => Some(j.error_code()),
                    _ => None,
                }
            });
        if code.is_some_and(full) {
            return FleetError::HubFull(e.to_string());
        }
        at = cause.source();
    }
    FleetError::hub(e)
}

/// Makes, if they are not there yet, the checkpoints bucket and for each of `pis` its
/// stream (its subjects only, file storage, kept forever, no deleting or purging) and its
/// object store. Run by the hub's operator identity.
pub async fn setup(js: &jetstream::Context, pis: &[String], quota: Quota) -> Result<()> {
    if js.get_key_value(CHECKPOINTS_BUCKET).await.is_err() {
        js.create_key_value(kv::Config {
            bucket: CHECKPOINTS_BUCKET.into(),
            history: 16,
            num_replicas: quota.replicas,
            storage: stream::StorageType::File,
            max_value_size: MAX_CHECKPOINT,
            // Each Pi writes its own key and one cosignature key per peer it witnesses.
            max_bytes: (pis.len().max(1) as i64).saturating_mul(64 * i64::from(MAX_CHECKPOINT)),
            ..Default::default()
        })
        .await
        .map_err(refused)?;
    }
    for pi in pis {
        proto::fleet::check_pi_name(pi).map_err(|e| FleetError::Config(e.to_string()))?;
        js.get_or_create_stream(stream::Config {
            name: fleet::stream(pi),
            subjects: vec![fleet::pi_subjects(pi)],
            storage: stream::StorageType::File,
            retention: stream::RetentionPolicy::Limits,
            discard: stream::DiscardPolicy::New,
            num_replicas: quota.replicas,
            duplicate_window: DUPLICATE_WINDOW,
            max_bytes: quota.bytes_per_pi,
            max_message_size: MAX_MESSAGE,
            // History is never aged out or rolled up; nobody may delete a message.
            deny_delete: true,
            deny_purge: true,
            ..Default::default()
        })
        .await
        .map_err(refused)?;
        let bucket = fleet::objects_bucket(pi);
        if js.get_object_store(&bucket).await.is_err() {
            js.create_object_store(object_store::Config {
                bucket,
                num_replicas: quota.replicas,
                storage: stream::StorageType::File,
                max_bytes: quota.bytes_per_pi,
                ..Default::default()
            })
            .await
            .map_err(refused)?;
        }
    }
    Ok(())
}

/// How far back `reseat` looks for the Pi's own ledger (messages of every subject).
const RESEAT_REACH: u64 = 100_000;

/// The hub operator's remedy for a message at `pi`'s place that the Pi never published
/// (stream sequence `forged`, named by the Pi's ALARM): the Pi's own ledger before it is
/// published again on top, so the subject's last ledger is the Pi's and its publisher
/// resumes after it. Streams deny deleting (history is never removed), so the message
/// stays; receivers drop it. Returns the sequence republished and its new one.
pub async fn reseat(js: &jetstream::Context, pi: &str, forged: u64) -> Result<(u64, u64)> {
    let (stream, _, objects) = open(js, pi).await?;
    let subject = fleet::ledger_subject(pi);
    let last = stream
        .get_last_raw_message_by_subject(&subject)
        .await
        .map_err(|e| FleetError::Hub(format!("no ledger of {pi} on the hub: {e}")))?;
    if last.sequence != forged {
        return Err(FleetError::Config(format!(
            "the last message on {subject} is {}, not {forged}: only the last one can be \
             reseated (the sequence the Pi's newest ALARM names)",
            last.sequence
        )));
    }
    // The forged message, if it reads as a ledger, names the leaf the Pi's own must precede.
    let at = match crate::wire::decode(pi, &last.payload, &objects).await {
        Ok(ReplMessage::Ledger(l)) => Some(l.index),
        _ => None,
    };
    let mut seq = forged;
    let own = loop {
        seq -= 1;
        // Bounded: a forged index far from the Pi's own cannot send it through the stream.
        if seq == 0 || forged - seq > RESEAT_REACH {
            return Err(FleetError::Config(format!(
                "no ledger of {pi} just before {forged} on {subject} within {RESEAT_REACH} \
                 messages: the Pi has nothing of its own to resume after there; make its stream \
                 again (a new stream name) or restore it"
            )));
        }
        let Ok(m) = stream.get_raw_message(seq).await else {
            continue;
        };
        if m.subject.as_str() != subject {
            continue;
        }
        // Only a ledger, and the one just before the forged leaf: an earlier forgery, or a
        // message that is no ledger, is passed over (the Pi checks the hash again anyway).
        match crate::wire::decode(pi, &m.payload, &objects).await {
            Ok(ReplMessage::Ledger(l)) if at.is_none_or(|i| l.index.checked_add(1) == Some(i)) => {
                break m;
            }
            _ => {}
        }
    };
    let ack = js
        .send_publish(
            subject,
            async_nats::jetstream::message::PublishMessage::build()
                .payload(own.payload)
                .expected_last_subject_sequence(forged),
        )
        .await
        .map_err(FleetError::hub)?
        .await
        .map_err(FleetError::hub)?;
    Ok((seq, ack.sequence))
}
