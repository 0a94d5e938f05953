//! Keeping a verified replica of another Pi: read its subjects in stream order, hold its
//! records and ledgers in memory (bounded) until its signed checkpoint covers them, then
//! write them in one transaction that recomputes every hash, checks the seals, rebuilds the
//! origin's seal log and compares its root with the checkpoint's — and commits only if all
//! hold. A refusal is an ALARM: logged, kept in `<pi>.alarm` beside the replica, and the
//! replica stays as it was until a person looks.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use async_nats::jetstream::{self, kv, object_store::ObjectStore, stream::Stream};
use futures::StreamExt;
use kura_store::replica::{has_record, inbox, logged_hash};
use kura_store::{Store, StoreError, StoreOptions};
use kura_tlog::checkpoint::{self, Signed};
use kura_tlog::cosign::Witness;
use kura_tlog::sealer::Keyring;
use proto::OwnedColumns;
use proto::fleet::{self, ReplLedger, ReplMessage};

use crate::{FleetError, FleetPeer, Result, wire};

/// How long a receiver behind its origin's checkpoint waits for a message before it builds
/// its consumer again.
const STALLED: Duration = Duration::from_secs(5);

/// A replica of one origin Pi.
pub struct Receiver {
    origin: String,
    vkey: String,
    keyring: Option<Keyring>,
    db: PathBuf,
    alarm: PathBuf,
    max_pending: u64,
    witness: Option<(String, Arc<Witness>)>,
    stream: Stream,
    kv: kv::Store,
    objects: ObjectStore,
}

/// What the receiver holds of an origin's history not yet covered by a checkpoint.
#[derive(Default)]
struct Pending {
    records: HashMap<String, OwnedColumns>,
    ledgers: BTreeMap<u64, (u64, ReplLedger)>,
    bytes: u64,
    /// The last checkpoint (size, root) found consistent with what the replica holds.
    checked: Option<(u64, [u8; 32])>,
}

/// The replica's file for `origin` in `dir`.
pub fn replica_path(dir: &Path, origin: &str) -> PathBuf {
    dir.join(format!("{origin}.db"))
}

/// The ALARM file for `origin` in `dir`.
pub fn alarm_path(dir: &Path, origin: &str) -> PathBuf {
    dir.join(format!("{origin}.alarm"))
}

impl Receiver {
    /// A receiver for `peer` (its sealers' `keyring` when pinned), keeping its replica in
    /// `dir`; `witness` (this Pi's name and
    /// witness) cosigns each checkpoint it verified.
    pub async fn new(
        client: async_nats::Client,
        peer: &FleetPeer,
        keyring: Option<Keyring>,
        dir: &Path,
        max_pending: u64,
        witness: Option<(String, Arc<Witness>)>,
    ) -> Result<Receiver> {
        proto::fleet::check_pi_name(&peer.name).map_err(|e| FleetError::Config(e.to_string()))?;
        std::fs::create_dir_all(dir)
            .map_err(|e| FleetError::Config(format!("cannot create {}: {e}", dir.display())))?;
        let js = jetstream::with_domain(client, fleet::DOMAIN);
        let (stream, kv, objects) = crate::hub::open(&js).await?;
        Ok(Receiver {
            origin: peer.name.clone(),
            vkey: peer.log_verifier.trim().to_owned(),
            keyring,
            db: replica_path(dir, &peer.name),
            alarm: alarm_path(dir, &peer.name),
            max_pending,
            witness,
            stream,
            kv,
            objects,
        })
    }

    fn refused(&self, why: impl Into<String>) -> FleetError {
        FleetError::Refused {
            origin: self.origin.clone(),
            why: why.into(),
        }
    }

    fn open_store(&self) -> Result<Store> {
        let options = StoreOptions::default();
        Ok(match Store::open(&self.db, &options) {
            Ok(s) => s,
            Err(StoreError::NoDatabase(_)) => Store::create(&self.db, &options)?,
            Err(e) => return Err(e.into()),
        })
    }

    /// Follows the origin until `stop` resolves. Returns the refusal that halted it (also
    /// kept in the ALARM file), or `Ok` on stop. Hub trouble is retried.
    pub async fn run(self, stop: impl std::future::Future<Output = ()>) -> Result<()> {
        tokio::pin!(stop);
        if let Ok(why) = std::fs::read_to_string(&self.alarm) {
            return Err(self.refused(format!(
                "halted by an earlier ALARM ({}): {}; remove that file after investigating to resume",
                self.alarm.display(),
                why.trim()
            )));
        }
        loop {
            let outcome = tokio::select! {
                r = self.follow() => r,
                _ = &mut stop => return Ok(()),
            };
            match outcome {
                Err(e @ FleetError::Refused { .. }) => {
                    let why = e.to_string();
                    tracing::error!(origin = %self.origin, %why, "ALARM: a replica refused its origin's history; nothing of it was written");
                    let _ = std::fs::write(&self.alarm, format!("{why}\n"));
                    return Err(e);
                }
                Err(e) => {
                    tracing::warn!(origin = %self.origin, error = %e, "replication paused; retrying");
                }
                Ok(()) => {}
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = &mut stop => return Ok(()),
            }
        }
    }

    /// Builds (or brings up to date) the replica up to the origin's newest checkpoint and
    /// returns: for `kura fleet restore`. Returns the leaves verified and the checkpoint.
    pub async fn catch_up(self) -> Result<(u64, String)> {
        let Some((note, target)) = self.latest_checkpoint().await? else {
            return Err(FleetError::Hub(format!(
                "the hub holds no checkpoint of {}: nothing to restore",
                self.origin
            )));
        };
        let mut store = self.open_store()?;
        self.follow_until(&mut store, Some(target.size)).await?;
        let (seq, _) = inbox(&store, &self.origin)?.unwrap_or((0, note.clone()));
        let origin = self.origin.clone();
        store.write(|tx| tx.set_outbox(&origin, target.size, seq))?;
        Ok((target.size, note))
    }

    /// One pass: from the replica's cursor, apply what checkpoints cover, until an error.
    async fn follow(&self) -> Result<()> {
        let mut store = self.open_store()?;
        self.follow_until(&mut store, None).await
    }

    /// Follows until an error, or until the replica holds `until` leaves.
    async fn follow_until(&self, store: &mut Store, until: Option<u64>) -> Result<()> {
        let start = inbox(&*store, &self.origin)?.map_or(1, |(seq, _)| seq + 1);
        let consumer = self
            .stream
            .create_consumer(pull::OrderedConfig {
                filter_subject: fleet::pi_subjects(&self.origin),
                deliver_policy: DeliverPolicy::ByStartSequence {
                    start_sequence: start,
                },
                ..Default::default()
            })
            .await
            .map_err(FleetError::hub)?;
        let mut messages = consumer.messages().await.map_err(FleetError::hub)?;
        let mut watch = self.kv.watch(&self.origin).await.map_err(FleetError::hub)?;
        let mut pending = Pending::default();
        let mut cp = self.latest_checkpoint().await?;
        let mut tick = tokio::time::interval(Duration::from_secs(2));
        let mut progress = std::time::Instant::now();
        loop {
            self.apply(store, &mut pending, cp.as_ref()).await?;
            if let Some(until) = until
                && kura_tlog::seallog::size(&store.seal_log()).map_err(StoreError::from)? >= until
            {
                return Ok(());
            }
            tokio::select! {
                m = messages.next() => {
                    let m = m.ok_or_else(|| FleetError::Hub("the stream ended".into()))?
                        .map_err(FleetError::hub)?;
                    let seq = m.info().map_err(FleetError::hub)?.stream_sequence;
                    progress = std::time::Instant::now();
                    self.take(store, &mut pending, &mut cp, seq, &m.payload).await?;
                }
                e = watch.next() => {
                    if let Some(Ok(entry)) = e && entry.operation == kv::Operation::Put {
                        self.newer(&mut cp, self.open_checkpoint(&entry.value)?);
                    }
                }
                _ = tick.tick() => {
                    if let Some(latest) = self.latest_checkpoint().await? {
                        self.newer(&mut cp, latest);
                    }
                    // A consumer whose hub node died can stall without an error: when the
                    // origin's checkpoint is ahead and nothing came for a while, start over
                    // from the replica's cursor.
                    let behind = cp.as_ref().is_some_and(|(_, c)| {
                        kura_tlog::seallog::size(&store.seal_log()).is_ok_and(|n| n < c.size)
                    });
                    if behind && progress.elapsed() > STALLED {
                        return Err(FleetError::Hub(format!(
                            "nothing from {} for {} s while its checkpoint is ahead; reconnecting",
                            self.origin,
                            STALLED.as_secs()
                        )));
                    }
                }
            }
        }
    }

    async fn latest_checkpoint(&self) -> Result<Option<(String, Signed)>> {
        match self.kv.get(&self.origin).await.map_err(FleetError::hub)? {
            Some(v) => Ok(Some(self.open_checkpoint(&v)?)),
            None => Ok(None),
        }
    }

    /// A checkpoint from the bucket, under the origin's pinned key (any other is refused).
    fn open_checkpoint(&self, bytes: &[u8]) -> Result<(String, Signed)> {
        let note = std::str::from_utf8(bytes)
            .map_err(|_| self.refused("its checkpoint is not text"))?
            .to_owned();
        let signed = checkpoint::open(&note, &self.vkey)
            .map_err(|e| self.refused(format!("its checkpoint does not verify: {e}")))?;
        Ok((note, signed))
    }

    /// Keeps `new` as the checkpoint to verify against when it is larger than `cp`.
    fn newer(&self, cp: &mut Option<(String, Signed)>, new: (String, Signed)) {
        if cp.as_ref().is_none_or(|(_, old)| new.1.size > old.size) {
            *cp = Some(new);
        }
    }

    /// Holds one message (or refuses it at once when it contradicts the replica); a
    /// checkpoint riding with a ledger replaces `cp` when newer.
    async fn take(
        &self,
        store: &Store,
        p: &mut Pending,
        cp: &mut Option<(String, Signed)>,
        seq: u64,
        payload: &[u8],
    ) -> Result<()> {
        p.bytes += payload.len() as u64;
        if p.bytes > self.max_pending {
            return Err(FleetError::Hub(format!(
                "{} sent more than {} bytes no checkpoint covers yet; starting over from the replica's cursor",
                self.origin, self.max_pending
            )));
        }
        match wire::decode(&self.origin, payload, &self.objects).await? {
            ReplMessage::Record(r) => {
                p.records.insert(r.columns.hash.clone(), r.columns);
            }
            ReplMessage::Ledger(l) => match logged_hash(store, l.index)? {
                Some(h) if h == l.ledger_hash => {
                    if let Some(note) = &l.checkpoint {
                        self.newer(cp, self.open_checkpoint(note.as_bytes())?);
                    }
                }
                Some(h) => {
                    return Err(self.refused(format!(
                        "it republished leaf {} as ledger {} with hash {}, but the replica verified {h} there: its history was rewritten",
                        l.index, l.ledger_id, l.ledger_hash
                    )));
                }
                None => {
                    if let Some(note) = &l.checkpoint {
                        self.newer(cp, self.open_checkpoint(note.as_bytes())?);
                    }
                    p.ledgers.insert(l.index, (seq, l));
                }
            },
            ReplMessage::Object { .. } => return Err(self.refused("an object inside an object")),
        }
        Ok(())
    }

    /// Writes every held ledger the checkpoint covers, in one transaction that commits only
    /// if the replica's seal log then has the checkpoint's root; checks an older checkpoint
    /// against what the replica holds.
    async fn apply(
        &self,
        store: &mut Store,
        p: &mut Pending,
        cp: Option<&(String, Signed)>,
    ) -> Result<()> {
        let Some((note, cp)) = cp else { return Ok(()) };
        let size = kura_tlog::seallog::size(&store.seal_log()).map_err(StoreError::from)?;
        if cp.size <= size {
            // Checked once per checkpoint (this runs for every message while nothing is due).
            if p.checked == Some((cp.size, cp.root.0)) {
                return Ok(());
            }
            let root = kura_tlog::seallog::root(&store.seal_log(), cp.size)
                .map_err(StoreError::from)?
                .0;
            if root != cp.root.0 {
                return Err(self.refused(format!(
                    "its checkpoint at size {} has another root than the {} leaves the replica verified: its history was rewritten",
                    cp.size, cp.size
                )));
            }
            p.checked = Some((cp.size, cp.root.0));
            return Ok(());
        }
        if !(size..cp.size).all(|i| p.ledgers.contains_key(&i)) {
            return Ok(());
        }
        // A record not here yet is withheld or late (the hub may delay, not forge): wait.
        for i in size..cp.size {
            for hash in p.ledgers.get(&i).map(|(_, l)| &l.members).into_iter().flatten() {
                if !p.records.contains_key(hash) && !has_record(&*store, hash)? {
                    return Ok(());
                }
            }
        }
        let last_seq = p.ledgers.get(&(cp.size - 1)).map_or(0, |(s, _)| *s);
        let batch: Vec<&ReplLedger> = (size..cp.size)
            .filter_map(|i| p.ledgers.get(&i).map(|(_, l)| l))
            .collect();
        let ids: Vec<String> = batch.iter().map(|l| l.ledger_id.to_string()).collect();
        let t = std::time::Instant::now();
        let outcome = store.write(|tx| {
            for l in &batch {
                tx.import_ledger(l, &p.records)?;
            }
            if tx.seal_log_root(cp.size)? != cp.root.0 {
                return Err(StoreError::Corrupt {
                    what: "replica",
                    id: self.origin.clone(),
                    detail: format!(
                        "its seal log rebuilt to {} leaves does not have the signed checkpoint's root",
                        cp.size
                    ),
                });
            }
            let problems = kura_tlog::sealer::check(
                &kura_store::SealLog::over(kura_store::Db::sql(tx)),
                &ids,
                self.keyring.as_ref(),
            )?;
            if let Some((id, check, detail)) = problems.into_iter().next() {
                return Err(StoreError::Corrupt {
                    what: "replicated ledger",
                    id,
                    detail: format!("{check}: {detail}"),
                });
            }
            tx.set_inbox(&self.origin, last_seq, note)
        });
        match outcome {
            Ok(()) => {}
            Err(e) if e.is_corruption() => return Err(self.refused(e.to_string())),
            Err(e) => return Err(e.into()),
        }
        tracing::info!(origin = %self.origin, size = cp.size, ledgers = batch.len(), write_us = t.elapsed().as_micros() as u64, "replica verified against the origin's checkpoint");
        p.ledgers.retain(|i, _| *i >= cp.size);
        p.records.clear();
        p.bytes = 0;
        p.checked = Some((cp.size, cp.root.0));
        self.cosign(store, note).await;
        Ok(())
    }

    /// Cosigns the checkpoint just verified, as a witness, and puts it beside the origin's.
    async fn cosign(&self, store: &Store, note: &str) {
        let Some((me, witness)) = &self.witness else {
            return;
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut old = 0;
        for _ in 0..2 {
            let body = match kura_tlog::cosign::request_body(&store.seal_log(), note, old) {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(origin = %self.origin, error = %e, "cannot cosign");
                    return;
                }
            };
            let reply = witness.add_checkpoint(&body, now);
            match reply.status {
                200 => {
                    let cosigned = format!("{note}{}", reply.body);
                    let key = fleet::cosignature_key(&self.origin, me);
                    if let Err(e) = self.kv.put(&key, cosigned.into_bytes().into()).await {
                        tracing::warn!(origin = %self.origin, error = %e, "cannot put the cosignature");
                    }
                    return;
                }
                409 => old = reply.body.trim().parse().unwrap_or(0),
                _ => {
                    tracing::error!(origin = %self.origin, status = reply.status, why = %reply.body, "ALARM: this Pi's witness refused to cosign a checkpoint the replica verified");
                    return;
                }
            }
        }
    }
}
