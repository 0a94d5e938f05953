//! Publishing this Pi's sealed history: walk the seal log from the cursor kept in SQLite,
//! publish each leaf's new records (`Nats-Msg-Id` = the record hash) and then the ledger
//! itself (expected last sequence on this Pi's ledger subject, so the stream keeps one
//! linear order per Pi and refuses a different ledger at a taken place), then a signed
//! checkpoint covering them. The cursor moves only after the hub acknowledged.

use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, kv, object_store::ObjectStore, stream::Stream};
use kura_store::Store;
use kura_store::replica::{logged_hash, outbox, outgoing};
use proto::fleet::{self, ReplLedger, ReplMessage, ReplRecord};

use crate::{FleetError, Result, wire};

/// How a halted publisher resumes, said in its ALARM.
const RESUME: &str = "on the hub: `kura fleet reseat <pi> --seq <sequence> --dir <hub dir>`; \
     then on this Pi remove replicas/<pi>.publish.alarm and restart kura serve";

/// Where this Pi's publisher keeps its ALARM (in the replicas directory `dir`): while the
/// file is there, the publisher does not start.
pub fn alarm_path(dir: &std::path::Path, pi: &str) -> std::path::PathBuf {
    dir.join(format!("{pi}.publish.alarm"))
}

/// Leaves published before a checkpoint covers them (bounds what a receiver holds).
pub const LEAVES_PER_CHECKPOINT: u64 = 256;

/// Signs a checkpoint of this Pi's log at a size (the caller holds the log key and has
/// checked that the log extends its last checkpoint).
pub type SignAt<'a> = dyn FnMut(&Store, u64) -> Option<String> + 'a;

/// This Pi's publisher.
pub struct Publisher {
    pi: String,
    js: jetstream::Context,
    stream: Stream,
    kv: kv::Store,
    objects: ObjectStore,
}

/// What a round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Round {
    /// Leaves the hub holds now.
    pub published: u64,
    /// Leaves published in this round.
    pub new: u64,
}

impl Publisher {
    /// Finds the hub's stream and buckets through `client` (made by `kura fleet init-hub`'s
    /// setup; a Pi may not create them).
    pub async fn connect(client: async_nats::Client, pi: &str) -> Result<Publisher> {
        proto::fleet::check_pi_name(pi).map_err(|e| FleetError::Config(e.to_string()))?;
        let js = jetstream::with_domain(client, fleet::DOMAIN);
        let (stream, kv, objects) = crate::hub::open(&js, pi).await?;
        Ok(Publisher {
            pi: pi.to_owned(),
            js,
            stream,
            kv,
            objects,
        })
    }

    /// Publishes every leaf after the cursor, with a checkpoint after each
    /// [`LEAVES_PER_CHECKPOINT`] and at the end.
    pub async fn round(&self, store: &mut Store, sign: &mut SignAt<'_>) -> Result<Round> {
        let size =
            kura_tlog::seallog::size(&store.seal_log()).map_err(kura_store::StoreError::from)?;
        let (mut published, mut ledger_seq) = outbox(store, &self.pi)?;
        let start = published;
        let mut put_at = None;
        while published < size {
            let Some((mut ledger, records)) = outgoing(store, published)? else {
                break;
            };
            // A record erased here goes out as its tombstone with its kept leaf and redaction.
            let redactions = kura_store::redact::redactions(&*store)?;
            let records = records
                .into_iter()
                .map(|c| {
                    let kept = redactions
                        .get(&c.record_id)
                        .map(|d| proto::proof::RedactedLeaf {
                            leaf_hash: d.leaf_hash.clone(),
                            redaction: d.redaction.clone(),
                        });
                    (c, kept)
                })
                .collect();
            let ends_batch = published + 1 == size || (published + 1) % LEAVES_PER_CHECKPOINT == 0;
            let t = std::time::Instant::now();
            // The checkpoint rides with the batch's last ledger: receivers verify on arrival.
            let note = if ends_batch {
                sign(store, published + 1)
            } else {
                None
            };
            let signed = t.elapsed();
            ledger.checkpoint = note.clone();
            let placed = self.publish_leaf(&ledger, records, ledger_seq).await?;
            tracing::debug!(
                index = published,
                sign_us = signed.as_micros() as u64,
                publish_us = (t.elapsed() - signed).as_micros() as u64,
                "fleet: ledger published"
            );
            match placed {
                Placed::At(seq) => {
                    ledger_seq = seq;
                    published += 1;
                }
                Placed::HubAhead { index, seq, hash } => {
                    if logged_hash(store, index)?.as_deref() != Some(hash.as_str()) {
                        return Err(FleetError::Diverged(format!(
                            "the hub holds another ledger at leaf {index} (stream sequence {seq} \
                             of {}) under {:?} than this Pi's seal log: the hub's operator or \
                             another machine publishing under this Pi's name put it there; \
                             nothing more is published until the hub's operator reseats this Pi ({RESUME})",
                            fleet::stream(&self.pi),
                            self.pi
                        )));
                    }
                    tracing::info!(pi = %self.pi, index, "the hub already holds this Pi's ledgers up to here; resuming after them");
                    ledger_seq = seq;
                    published = index + 1;
                    continue;
                }
            }
            if ends_batch {
                // The bucket keeps the newest for `kura fleet status`, restores and receivers
                // that start later; the cursor moves after it.
                if let Some(note) = &note {
                    self.put_checkpoint(note).await?;
                    put_at = Some(published);
                }
                store.write(|tx| tx.set_outbox(&self.pi, published, ledger_seq))?;
            }
        }
        // Resumed past ledgers the hub already held: their checkpoint may never have gone out.
        if published > start && put_at != Some(published) {
            if let Some(note) = sign(store, published) {
                self.put_checkpoint(&note).await?;
            }
            store.write(|tx| tx.set_outbox(&self.pi, published, ledger_seq))?;
        }
        Ok(Round {
            published,
            new: published.saturating_sub(start),
        })
    }

    /// Puts a signed checkpoint where receivers watch for it.
    pub async fn put_checkpoint(&self, note: &str) -> Result<()> {
        self.kv
            .put(&self.pi, note.as_bytes().to_vec().into())
            .await
            .map_err(FleetError::hub)?;
        Ok(())
    }

    async fn publish_leaf(
        &self,
        ledger: &ReplLedger,
        records: Vec<(proto::OwnedColumns, Option<proto::proof::RedactedLeaf>)>,
        ledger_seq: u64,
    ) -> Result<Placed> {
        // Records and the ledger go out back to back (one connection keeps their order in
        // the stream) and their acknowledgements are awaited together: one round trip, not two.
        // A record the hub lost while it kept the ledger is published again by the next
        // round; receivers wait for it rather than refuse.
        let mut acks = Vec::with_capacity(records.len());
        for (columns, redacted) in records {
            let id = fleet::record_msg_id(&self.pi, &columns.hash);
            let body = ReplMessage::Record(ReplRecord { columns, redacted });
            let payload = wire::encode(&self.pi, &body, &self.objects).await?;
            let msg = PublishMessage::build().payload(payload).message_id(id);
            acks.push(
                self.js
                    .send_publish(fleet::record_subject(&self.pi), msg)
                    .await
                    .map_err(FleetError::hub)?,
            );
        }
        let payload = wire::encode(
            &self.pi,
            &ReplMessage::Ledger(ledger.clone()),
            &self.objects,
        )
        .await?;
        let msg = PublishMessage::build()
            .payload(payload)
            .message_id(fleet::ledger_msg_id(
                &self.pi,
                ledger.index,
                &ledger.ledger_hash,
            ))
            .expected_last_subject_sequence(ledger_seq);
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
            // A duplicate's sequence is the message that took this ledger's id first: ours
            // from a round that was cut short, or someone else's under our id.
            Ok(ack) if ack.duplicate => self.duplicate_at(ledger, ack.sequence).await,
            Ok(ack) => Ok(Placed::At(ack.sequence)),
            Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => {
                self.hub_ahead(ledger).await
            }
            Err(e) => Err(FleetError::hub(e)),
        }
    }

    /// The hub took this ledger's message id before, at stream sequence `seq`: placed if
    /// that message is this ledger, else someone published under this Pi's id (an ALARM).
    async fn duplicate_at(&self, ours: &ReplLedger, seq: u64) -> Result<Placed> {
        let m = self
            .stream
            .get_raw_message(seq)
            .await
            .map_err(FleetError::hub)?;
        match wire::decode(&self.pi, &m.payload, &self.objects).await {
            Ok(ReplMessage::Ledger(l))
                if l.index == ours.index && l.ledger_hash == ours.ledger_hash =>
            {
                Ok(Placed::At(seq))
            }
            Ok(_) | Err(FleetError::Refused { .. }) => Err(FleetError::Diverged(format!(
                "the hub holds another message under this Pi's id for leaf {} (stream sequence \
                 {seq} of {}): this Pi never published it; nothing more is published until \
                 the hub's operator reseats this Pi ({RESUME})",
                ours.index,
                fleet::stream(&self.pi)
            ))),
            Err(e) => Err(e),
        }
    }

    /// The hub's last ledger of this Pi is not where the cursor says (a publisher killed
    /// after the hub acknowledged and before the cursor moved): resume after it if it is
    /// this Pi's own ledger at that place, else this Pi's history and the hub's differ.
    async fn hub_ahead(&self, ours: &ReplLedger) -> Result<Placed> {
        let last = self
            .stream
            .get_last_raw_message_by_subject(&fleet::ledger_subject(&self.pi))
            .await
            .map_err(FleetError::hub)?;
        // Whatever is there, this Pi did not publish it: the hub's word, named by its place.
        let foreign = |what: String| {
            FleetError::Diverged(format!(
                "the hub's last message on {} (stream sequence {} of {}) {what}: this Pi never \
                 published it; nothing more is published until the hub's operator reseats this Pi ({RESUME})",
                fleet::ledger_subject(&self.pi),
                last.sequence,
                fleet::stream(&self.pi)
            ))
        };
        let theirs = match wire::decode(&self.pi, &last.payload, &self.objects).await {
            Ok(ReplMessage::Ledger(l)) => l,
            Ok(_) => return Err(foreign("is not a ledger".into())),
            Err(FleetError::Refused { why, .. }) => {
                return Err(foreign(format!("does not read as a ledger ({why})")));
            }
            Err(e) => return Err(e),
        };
        if theirs.index + 1 < ours.index {
            return Err(FleetError::Diverged(format!(
                "the hub holds this Pi's ledgers only up to leaf {} but the cursor is at {}: \
                 run `kura fleet status` and check the hub's stream",
                theirs.index, ours.index
            )));
        }
        Ok(Placed::HubAhead {
            index: theirs.index,
            seq: last.sequence,
            hash: theirs.ledger_hash,
        })
    }
}

/// Where a leaf's ledger landed.
enum Placed {
    /// At this stream sequence.
    At(u64),
    /// The hub already holds this Pi's ledgers up to `index` (its last at `seq`, with
    /// ledger hash `hash`).
    HubAhead { index: u64, seq: u64, hash: String },
}
