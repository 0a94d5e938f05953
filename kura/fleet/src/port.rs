//! The hub as the publisher sees it — publish a leaf, read a message back, put a checkpoint,
//! keep large bodies as objects — so the publishing core runs the same against JetStream
//! ([`JetStream`], the adapter) and the in-memory hub its unit tests use.

use std::future::Future;

use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::object_store::{ObjectMetadata, ObjectStore};
use async_nats::jetstream::{self, kv, stream::Stream};
use bytes::Bytes;
use proto::fleet::{self, OBJECT_CHUNK};
use tokio::io::AsyncReadExt;

use crate::{FleetError, Result};

/// What the hub said to a published ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// Stored at this stream sequence.
    At(u64),
    /// Its message id was taken before, by the message at this stream sequence.
    Duplicate(u64),
    /// This Pi's ledger subject does not end where the publisher expected (the hub is ahead
    /// of the cursor, or holds someone else's message there).
    NotAfter,
}

/// Where large bodies go (an object store on the hub), content-addressed by name.
pub trait Objects {
    /// Whether an object `name` of `size` bytes is there.
    fn holds(&self, name: &str, size: u64) -> impl Future<Output = bool> + Send;
    /// Puts `body` as object `name`.
    fn put(&self, name: &str, body: &[u8]) -> impl Future<Output = Result<()>> + Send;
    /// Reads object `name`, at most `max` bytes of it (one more tells it is too long).
    fn get(&self, name: &str, max: u64) -> impl Future<Output = Result<Vec<u8>>> + Send;
}

/// One Pi's place on the hub, as its publisher uses it.
pub trait Hub: Objects {
    /// Publishes one leaf: `records` (message id, body), each idempotent by its id, then the
    /// ledger (message id, body) expected to follow stream sequence `after` on this Pi's
    /// ledger subject; all acknowledged before it returns.
    fn publish_leaf(
        &self,
        records: Vec<(String, Bytes)>,
        ledger: (String, Bytes),
        after: u64,
    ) -> impl Future<Output = Result<Sent>> + Send;
    /// The body at stream sequence `seq`.
    fn message(&self, seq: u64) -> impl Future<Output = Result<Bytes>> + Send;
    /// The last message on this Pi's ledger subject: its stream sequence and body.
    fn last_ledger(&self) -> impl Future<Output = Result<(u64, Bytes)>> + Send;
    /// Puts this Pi's newest signed checkpoint where receivers watch for it.
    fn put_checkpoint(&self, note: &str) -> impl Future<Output = Result<()>> + Send;
}

impl Objects for ObjectStore {
    async fn holds(&self, name: &str, size: u64) -> bool {
        self.info(name)
            .await
            .is_ok_and(|i| i.size as u64 == size && !i.deleted)
    }

    async fn put(&self, name: &str, body: &[u8]) -> Result<()> {
        let meta = ObjectMetadata {
            name: name.to_owned(),
            chunk_size: Some(OBJECT_CHUNK),
            ..Default::default()
        };
        let mut body = body;
        ObjectStore::put(self, meta, &mut body)
            .await
            .map_err(FleetError::hub)?;
        Ok(())
    }

    async fn get(&self, name: &str, max: u64) -> Result<Vec<u8>> {
        use async_nats::jetstream::object_store::GetErrorKind;
        let object = ObjectStore::get(self, name)
            .await
            .map_err(|e| match e.kind() {
                // Known by its kind, never its words: the object is not there.
                GetErrorKind::NotFound => FleetError::Missing(format!("no object {name}")),
                _ => FleetError::hub(e),
            })?;
        let mut body = Vec::new();
        object
            .take(max + 1)
            .read_to_end(&mut body)
            .await
            .map_err(FleetError::hub)?;
        Ok(body)
    }
}

/// A Pi's place on a JetStream hub: its stream, the checkpoints bucket and its object store.
pub struct JetStream {
    pi: String,
    js: jetstream::Context,
    stream: Stream,
    kv: kv::Store,
    objects: ObjectStore,
}

impl JetStream {
    /// Opens `pi`'s place through `js` (made by the hub's operator; a Pi may not create it).
    pub async fn open(js: jetstream::Context, pi: &str) -> Result<JetStream> {
        let (stream, kv, objects) = crate::hub::open(&js, pi).await?;
        Ok(JetStream {
            pi: pi.to_owned(),
            js,
            stream,
            kv,
            objects,
        })
    }
}

impl Objects for JetStream {
    fn holds(&self, name: &str, size: u64) -> impl Future<Output = bool> + Send {
        self.objects.holds(name, size)
    }
    fn put(&self, name: &str, body: &[u8]) -> impl Future<Output = Result<()>> + Send {
        Objects::put(&self.objects, name, body)
    }
    fn get(&self, name: &str, max: u64) -> impl Future<Output = Result<Vec<u8>>> + Send {
        Objects::get(&self.objects, name, max)
    }
}

impl Hub for JetStream {
    async fn publish_leaf(
        &self,
        records: Vec<(String, Bytes)>,
        (id, body): (String, Bytes),
        after: u64,
    ) -> Result<Sent> {
        // Records and the ledger go out back to back (one connection keeps their order in
        // the stream) and their acknowledgements are awaited together: one round trip, not two.
        let mut acks = Vec::with_capacity(records.len());
        for (id, payload) in records {
            let msg = PublishMessage::build().payload(payload).message_id(id);
            acks.push(
                self.js
                    .send_publish(fleet::record_subject(&self.pi), msg)
                    .await
                    .map_err(FleetError::hub)?,
            );
        }
        let msg = PublishMessage::build()
            .payload(body)
            .message_id(id)
            .expected_last_subject_sequence(after);
        let sent = self
            .js
            .send_publish(fleet::ledger_subject(&self.pi), msg)
            .await
            .map_err(FleetError::hub)?;
        let placed = sent.await;
        for ack in acks {
            ack.await.map_err(FleetError::hub)?;
        }
        match placed {
            Ok(ack) if ack.duplicate => Ok(Sent::Duplicate(ack.sequence)),
            Ok(ack) => Ok(Sent::At(ack.sequence)),
            Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => Ok(Sent::NotAfter),
            Err(e) => Err(FleetError::hub(e)),
        }
    }

    async fn message(&self, seq: u64) -> Result<Bytes> {
        let m = self
            .stream
            .get_raw_message(seq)
            .await
            .map_err(FleetError::hub)?;
        Ok(m.payload)
    }

    async fn last_ledger(&self) -> Result<(u64, Bytes)> {
        let m = self
            .stream
            .get_last_raw_message_by_subject(&fleet::ledger_subject(&self.pi))
            .await
            .map_err(FleetError::hub)?;
        Ok((m.sequence, m.payload))
    }

    async fn put_checkpoint(&self, note: &str) -> Result<()> {
        self.kv
            .put(&self.pi, note.as_bytes().to_vec().into())
            .await
            .map_err(FleetError::hub)?;
        Ok(())
    }
}
