//! Publishing this Pi's sealed history: walk the seal log from the cursor kept in SQLite,
//! publish each leaf's new records (`Nats-Msg-Id` = the record hash) and then the ledger
//! itself (expected last sequence on this Pi's ledger subject, so the stream keeps one
//! linear order per Pi and refuses a different ledger at a taken place), then a signed
//! checkpoint covering them. The cursor moves only after the hub acknowledged.

use kura_store::Store;
use kura_store::replica::{logged_hash, outbox, outgoing};
use proto::fleet::{self, ReplLedger, ReplMessage, ReplRecord};

pub use crate::decide::LEAVES_PER_CHECKPOINT;
use crate::decide::{self, Held, Placed};
use crate::port::{Hub, JetStream, Sent};
use crate::{FleetError, Result, wire};

/// Where this Pi's publisher keeps its ALARM (in the replicas directory `dir`): while the
/// file is there, the publisher does not start.
pub fn alarm_path(dir: &std::path::Path, pi: &str) -> std::path::PathBuf {
    dir.join(format!("{pi}.publish.alarm"))
}

/// Signs a checkpoint of this Pi's log at a size (the caller holds the log key and has
/// checked that the log extends its last checkpoint).
pub type SignAt<'a> = dyn FnMut(&Store, u64) -> Option<String> + 'a;

/// This Pi's publisher, over its place on the hub (JetStream unless a test says otherwise).
pub struct Publisher<H = JetStream> {
    pi: String,
    hub: H,
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
        let js = async_nats::jetstream::with_domain(client, fleet::DOMAIN);
        Ok(Publisher::over(JetStream::open(js, pi).await?, pi))
    }
}

impl<H: Hub> Publisher<H> {
    /// `pi`'s publisher over `hub`.
    pub fn over(hub: H, pi: &str) -> Publisher<H> {
        Publisher {
            pi: pi.to_owned(),
            hub,
        }
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
            let records: Vec<_> = records
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
            let ends_batch = decide::ends_batch(published, size);
            let t = std::time::Instant::now();
            // The checkpoint rides with the batch's last ledger: receivers verify on arrival.
            let note = if ends_batch {
                sign(store, published + 1)
            } else {
                None
            };
            let signed = t.elapsed();
            ledger.checkpoint = note.clone();
            // The files the ledger's records name go first: a receiver finds them there.
            self.push_files(store, records.iter().map(|(c, _)| c))
                .await?;
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
                    let ours = logged_hash(store, index)?;
                    decide::resume(&self.pi, index, seq, &hash, ours.as_deref())?;
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

    /// Puts on the hub the objects of every tree `records` name that it lacks.
    async fn push_files<'a>(
        &self,
        store: &Store,
        records: impl Iterator<Item = &'a proto::OwnedColumns>,
    ) -> Result<()> {
        let trees = crate::files::trees_in(records);
        let dir = kura_objects::Objects::beside(store.path());
        if trees.is_empty() || !dir.is_dir() {
            return Ok(());
        }
        let objects = kura_objects::Objects::open(&dir)
            .map_err(|e| FleetError::Config(format!("the object store: {e}")))?;
        for t in &trees {
            let put = crate::files::push(&self.hub, &objects, t).await?;
            tracing::debug!(tree = %t, put, "fleet: workspace objects published");
        }
        Ok(())
    }

    /// Puts a signed checkpoint where receivers watch for it.
    pub async fn put_checkpoint(&self, note: &str) -> Result<()> {
        self.hub.put_checkpoint(note).await
    }

    /// Publishes a leaf's records and then its ledger, expected after `ledger_seq`. A
    /// record the hub lost while it kept the ledger is published again by the next round;
    /// receivers wait for it rather than refuse.
    async fn publish_leaf(
        &self,
        ledger: &ReplLedger,
        records: Vec<(proto::OwnedColumns, Option<proto::proof::RedactedLeaf>)>,
        ledger_seq: u64,
    ) -> Result<Placed> {
        let mut bodies = Vec::with_capacity(records.len());
        for (columns, redacted) in records {
            let id = fleet::record_msg_id(&self.pi, &columns.hash);
            let body = ReplMessage::Record(ReplRecord { columns, redacted });
            bodies.push((id, wire::encode(&self.pi, &body, &self.hub).await?));
        }
        let body = wire::encode(&self.pi, &ReplMessage::Ledger(ledger.clone()), &self.hub).await?;
        let ours = body.clone();
        let id = fleet::ledger_msg_id(&self.pi, ledger.index, &ledger.ledger_hash);
        match self
            .hub
            .publish_leaf(bodies, (id, body), ledger_seq)
            .await?
        {
            Sent::At(seq) => Ok(Placed::At(seq)),
            // A duplicate's sequence is the message that took this ledger's id first: ours
            // from a round that was cut short, or someone else's under our id.
            Sent::Duplicate(seq) => {
                let theirs = self.hub.message(seq).await?;
                // Our very bytes: ours, placed by a round that was cut short.
                if theirs == ours {
                    return Ok(Placed::At(seq));
                }
                // Other bytes under our id (ours re-encoded can differ: its checkpoint). An
                // object they point at that is not on the hub is no reason to wait for ever
                // (found in review); a slow or busy hub still is a reason to retry.
                let held = match self.held(&theirs).await {
                    Err(FleetError::Missing(why)) => Held::Unreadable(why),
                    other => other?,
                };
                decide::duplicate(&self.pi, ledger.index, &ledger.ledger_hash, seq, &held)
            }
            Sent::NotAfter => {
                let (seq, body) = self.hub.last_ledger().await?;
                decide::hub_ahead(&self.pi, ledger.index, seq, self.held(&body).await?)
            }
        }
    }

    /// What a body on the hub is, to the rules (the hub's trouble reading it stays an error).
    async fn held(&self, body: &[u8]) -> Result<Held> {
        match wire::decode(&self.pi, body, &self.hub).await {
            Ok(ReplMessage::Ledger(l)) => Ok(Held::Ledger {
                index: l.index,
                hash: l.ledger_hash,
            }),
            Ok(_) => Ok(Held::NotALedger),
            Err(FleetError::Refused { why, .. }) => Ok(Held::Unreadable(why)),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use kura_store::{Store, StoreOptions};
    use proto::record::{NewRecord, RecordType};

    use super::*;
    use crate::memory::MemoryHub;

    struct Pi {
        _dir: tempfile::TempDir,
        store: Store,
        session: proto::SessionId,
        publisher: Publisher<MemoryHub>,
    }

    fn pi() -> Pi {
        let dir = tempfile::tempdir().expect("dir");
        let mut store =
            Store::create(dir.path().join("k.db"), &StoreOptions::default()).expect("create");
        let session = store.create_session("fleet").expect("session").session_id;
        Pi {
            _dir: dir,
            store,
            session,
            publisher: Publisher::over(MemoryHub::default(), "pi-a"),
        }
    }

    impl Pi {
        fn seal(&mut self, text: &str) {
            let l = self
                .store
                .open_ledger(self.session, text, &[])
                .expect("open");
            let r = NewRecord {
                record_type: RecordType::AgentThought,
                content: serde_json::json!({ "text": text }),
                author_id: "agent:test".into(),
                metadata: Default::default(),
            };
            self.store.append_batch(l.ledger_id, &[r]).expect("append");
            self.store.seal_ledger(l.ledger_id).expect("seal");
        }

        fn round(&mut self) -> Result<Round> {
            let mut sign = |_: &Store, size: u64| Some(format!("checkpoint at {size}"));
            rt().block_on(self.publisher.round(&mut self.store, &mut sign))
        }

        /// The (leaf, ledger hash) of each ledger on the hub, in stream order.
        fn on_hub(&self) -> Vec<(u64, String)> {
            self.publisher
                .hub
                .ledgers()
                .iter()
                .map(|b| match serde_json::from_slice(b) {
                    Ok(ReplMessage::Ledger(l)) => (l.index, l.ledger_hash),
                    _ => (u64::MAX, String::new()),
                })
                .collect()
        }

        fn seal_log(&self) -> Vec<(u64, String)> {
            let size = kura_tlog::seallog::size(&self.store.seal_log()).expect("size");
            (0..size)
                .map(|i| {
                    let h = logged_hash(&self.store, i).expect("hash");
                    (i, h.unwrap_or_default())
                })
                .collect()
        }
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    fn forged(index: u64, hash: &str) -> ReplLedger {
        ReplLedger {
            index,
            ledger_id: proto::LedgerId::new(),
            session_id: proto::SessionId::new(),
            session_label: String::new(),
            label: "forged".into(),
            parent_ids: Vec::new(),
            members: Vec::new(),
            root_hash: String::new(),
            ledger_hash: hash.into(),
            created_at: String::new(),
            sealed_at: String::new(),
            seal: None,
            checkpoint: None,
        }
    }

    fn ledger_body(index: u64, hash: &str) -> Vec<u8> {
        serde_json::to_vec(&ReplMessage::Ledger(forged(index, hash))).expect("body")
    }

    #[test]
    fn a_round_publishes_each_sealed_leaf_once_with_a_checkpoint_covering_them() {
        let mut p = pi();
        for t in ["one", "two", "three"] {
            p.seal(t);
        }
        let size = p.seal_log().len() as u64;
        let r = p.round().expect("round");
        assert_eq!((r.published, r.new), (size, size));
        assert_eq!(p.on_hub(), p.seal_log());
        assert_eq!(
            p.publisher.hub.checkpoint(),
            Some(format!("checkpoint at {size}"))
        );
        assert_eq!(outbox(&p.store, "pi-a").expect("outbox").0, size);
        let again = p.round().expect("again");
        assert_eq!(again.new, 0, "nothing is published twice");
        assert_eq!(p.on_hub().len() as u64, size);
    }

    #[test]
    fn a_publisher_killed_before_its_cursor_moved_resumes_after_what_the_hub_holds() {
        let mut p = pi();
        p.seal("one");
        p.seal("two");
        p.round().expect("round");
        // Killed after the hub acknowledged and before the cursor moved: the cursor is back
        // at the start. Within the duplicate window the ids say where each ledger is...
        p.store
            .write(|tx| tx.set_outbox("pi-a", 0, 0))
            .expect("cursor");
        p.seal("three");
        p.round().expect("resumed by message ids");
        assert_eq!(p.on_hub(), p.seal_log());
        // ...and past it, the hub's last ledger, checked against the seal log.
        p.store
            .write(|tx| tx.set_outbox("pi-a", 0, 0))
            .expect("cursor");
        p.publisher.hub.forget_ids();
        p.seal("four");
        let r = p.round().expect("resumed after the hub's last ledger");
        assert_eq!(r.published, p.seal_log().len() as u64);
        assert_eq!(p.on_hub(), p.seal_log(), "no ledger twice, none missing");
    }

    #[test]
    fn a_forged_ledger_at_this_pis_place_halts_the_publisher_with_an_alarm() {
        let mut p = pi();
        p.seal("one");
        p.round().expect("round");
        let size = p.seal_log().len() as u64;
        let seq = p.publisher.hub.forge(true, None, &ledger_body(size, "ff"));
        p.seal("two");
        let e = p.round().err().map(|e| e.to_string()).unwrap_or_default();
        // The forged ledger sits past the cursor at the next leaf: the hub is "ahead" with a
        // ledger that is not this Pi's at that leaf.
        assert!(
            e.contains(&format!("stream sequence {seq}")) && e.contains("reseat"),
            "{e}"
        );
        assert_eq!(
            outbox(&p.store, "pi-a").expect("outbox").0,
            size,
            "the cursor stays"
        );
    }

    #[test]
    fn a_message_under_this_pis_ledger_id_that_is_not_its_ledger_is_an_alarm() {
        let mut p = pi();
        p.seal("one");
        let (index, hash) = p.seal_log()[0].clone();
        let id = fleet::ledger_msg_id("pi-a", index, &hash);
        let seq = p.publisher.hub.forge(false, Some(&id), b"junk");
        let e = p.round().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            e.contains(&format!("stream sequence {seq}")) && e.contains("under this Pi's id"),
            "{e}"
        );
        assert!(p.on_hub().is_empty());
    }

    /// Found in review: a pointer under this Pi's id to an object that is not there was the
    /// hub's trouble, retried every second for ever; it is not this Pi's message: an ALARM.
    #[test]
    fn a_pointer_under_this_pis_id_to_a_missing_object_is_an_alarm_not_a_stall() {
        let mut p = pi();
        p.seal("one");
        let (index, hash) = p.seal_log()[0].clone();
        let id = fleet::ledger_msg_id("pi-a", index, &hash);
        let pointer = serde_json::to_vec(&ReplMessage::Object {
            name: format!("pi-a/{}", "0".repeat(64)),
            sha256: "0".repeat(64),
            size: 10,
        })
        .expect("pointer");
        let seq = p.publisher.hub.forge(true, Some(&id), &pointer);
        let e = p.round().err();
        assert!(
            matches!(&e, Some(FleetError::Diverged(w)) if w.contains(&format!("stream sequence {seq}"))),
            "{e:?}"
        );
    }

    /// Found in the second review: mapping every hub error to "not ours" turned a slow or
    /// disturbed object store into an ALARM. Only an object that is not there is definite;
    /// one that reads wrong is the hub's trouble, retried.
    #[test]
    fn a_pointer_under_this_pis_id_to_an_object_that_reads_wrong_is_retried_not_an_alarm() {
        let mut p = pi();
        p.seal("one");
        let (index, hash) = p.seal_log()[0].clone();
        let id = fleet::ledger_msg_id("pi-a", index, &hash);
        let name = format!("pi-a/{}", "1".repeat(64));
        p.publisher
            .hub
            .alter_object(&name, b"not what the pointer names");
        let pointer = serde_json::to_vec(&ReplMessage::Object {
            name,
            sha256: "1".repeat(64),
            size: 26,
        })
        .expect("pointer");
        p.publisher.hub.forge(true, Some(&id), &pointer);
        let e = p.round().err();
        assert!(matches!(&e, Some(FleetError::Hub(_))), "{e:?}");
    }

    #[test]
    fn junk_at_the_end_of_this_pis_ledger_subject_is_an_alarm_not_a_retry() {
        let mut p = pi();
        p.seal("one");
        let seq = p.publisher.hub.forge(true, None, b"\x00 not json");
        let e = p.round().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            e.contains("does not read as a ledger")
                && e.contains(&format!("stream sequence {seq}")),
            "{e}"
        );
    }

    #[test]
    fn a_body_too_large_for_a_message_goes_as_an_object_and_an_altered_object_is_the_hubs_fault() {
        let hub = MemoryHub::default();
        let mut l = forged(0, &"a".repeat(64));
        l.label = "x".repeat(fleet::INLINE_MAX + 1);
        let big = ReplMessage::Ledger(l);
        let rt = rt();
        let sent = rt
            .block_on(wire::encode("pi-a", &big, &hub))
            .expect("encode");
        assert!(
            sent.len() < fleet::INLINE_MAX,
            "a pointer goes on the stream"
        );
        let back = rt
            .block_on(wire::decode("pi-a", &sent, &hub))
            .expect("decode");
        assert_eq!(
            serde_json::to_value(&back).ok(),
            serde_json::to_value(&big).ok()
        );
        let Ok(ReplMessage::Object { name, .. }) = serde_json::from_slice(&sent) else {
            panic!("not a pointer");
        };
        hub.alter_object(&name, b"{}");
        // Any Pi may write the object store: an altered body is retried, never an ALARM
        // against the origin.
        assert!(matches!(
            rt.block_on(wire::decode("pi-a", &sent, &hub)),
            Err(FleetError::Hub(_))
        ));
        // Under another Pi's name it is refused outright.
        assert!(matches!(
            rt.block_on(wire::decode("pi-b", &sent, &hub)),
            Err(FleetError::Refused { .. })
        ));
    }
}
