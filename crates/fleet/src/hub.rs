//! The hub's JetStream side: the stream every Pi publishes into, the checkpoints bucket and
//! the object store, made once by the hub's operator ([`setup`]) and only opened by Pis
//! ([`open`]), whose leaf connections may not create, change or delete them.

use std::time::Duration;

use async_nats::jetstream::{self, kv, object_store, stream};
use proto::fleet::{CHECKPOINTS_BUCKET, OBJECTS_BUCKET, STREAM, SUBJECT_PREFIX};

use crate::{FleetError, Result};

/// How long JetStream remembers a `Nats-Msg-Id` (a publisher killed and restarted within
/// it republishes nothing twice; after it, the cursor and the expected sequence hold).
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(600);

/// Opens the stream and buckets (made by [`setup`]).
pub async fn open(
    js: &jetstream::Context,
) -> Result<(stream::Stream, kv::Store, object_store::ObjectStore)> {
    let missing = |what: &str, e: &dyn std::fmt::Display| {
        FleetError::Hub(format!(
            "{what} is not on the hub ({e}): run `kura fleet setup-hub` against the hub once"
        ))
    };
    let s = js
        .get_stream(STREAM)
        .await
        .map_err(|e| missing(&format!("stream {STREAM}"), &e))?;
    let k = js
        .get_key_value(CHECKPOINTS_BUCKET)
        .await
        .map_err(|e| missing(&format!("bucket {CHECKPOINTS_BUCKET}"), &e))?;
    let o = js
        .get_object_store(OBJECTS_BUCKET)
        .await
        .map_err(|e| missing(&format!("object store {OBJECTS_BUCKET}"), &e))?;
    Ok((s, k, o))
}

/// Makes the stream (every Pi's subjects, kept forever, file storage, `replicas` copies) and
/// the buckets, if they are not there yet. Run by the hub's operator identity.
pub async fn setup(js: &jetstream::Context, replicas: usize) -> Result<()> {
    js.get_or_create_stream(stream::Config {
        name: STREAM.into(),
        subjects: vec![format!("{SUBJECT_PREFIX}.>")],
        storage: stream::StorageType::File,
        retention: stream::RetentionPolicy::Limits,
        num_replicas: replicas,
        duplicate_window: DUPLICATE_WINDOW,
        // History is never aged out or rolled up; nobody may delete a message.
        deny_delete: true,
        deny_purge: true,
        ..Default::default()
    })
    .await
    .map_err(FleetError::hub)?;
    if js.get_key_value(CHECKPOINTS_BUCKET).await.is_err() {
        js.create_key_value(kv::Config {
            bucket: CHECKPOINTS_BUCKET.into(),
            history: 16,
            num_replicas: replicas,
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .map_err(FleetError::hub)?;
    }
    if js.get_object_store(OBJECTS_BUCKET).await.is_err() {
        js.create_object_store(object_store::Config {
            bucket: OBJECTS_BUCKET.into(),
            num_replicas: replicas,
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .map_err(FleetError::hub)?;
    }
    Ok(())
}
