//! From processed events to log records: a step's batches and an epoch's opening, encoded.
//!
//! The numbering (epoch, first seq, timestamp, whether the digest is due) is decided by the
//! publisher when it cuts the step; here the events are split where the cut's plan says and each
//! batch is written in the v2 wire form (`crate::codec::encode`, chains compacted).

use super::pipeline::Outcome;
use super::plan::{page_events, plan_batches, runs_of, split_events, BatchLimits};
use crate::codec::{self, WIRE_VERSION};
use crate::digest::format_digest;
use crate::events::{Batch, Event, Header, Tokens};

/// Where a run of batches goes in the source's sequence.
#[derive(Clone, Copy, Debug)]
pub struct Numbering<'a> {
    pub source: &'a str,
    pub epoch: &'a str,
    /// The seq of the first batch; the next ones follow.
    pub first_seq: u64,
    pub ts: f64,
}

/// The seq numbering of one source's step batches within an epoch, and the in-band digest
/// cadence: the native twin of `swa_es.publish.batching.BatchBuilder.reserve` (the publisher's
/// records are held byte-equal to that path by tests).
#[derive(Clone, Debug)]
pub struct Sequencer {
    epoch: String,
    next_seq: u64,
    since_digest: u64,
    digest_every: u64,
}

impl Sequencer {
    /// No epoch yet; the digest rides on every `digest_every`-th batch (at least 1).
    pub fn new(digest_every: u64) -> Self {
        Sequencer {
            epoch: String::new(),
            next_seq: 0,
            since_digest: 0,
            digest_every: digest_every.max(1),
        }
    }

    /// A new epoch whose opening took seqs `0..next_seq` (its last batch carried the digest).
    pub fn begin(&mut self, epoch: String, next_seq: u64) {
        self.epoch = epoch;
        self.next_seq = next_seq;
        self.since_digest = 0;
    }

    /// The epoch being numbered (empty before the first `begin`).
    pub fn epoch(&self) -> &str {
        &self.epoch
    }

    /// Number a step of `batches` batches: the first one's seq, and whether the cadence puts
    /// the digest on its last batch.
    pub fn reserve(&mut self, batches: u64) -> (u64, bool) {
        let first = self.next_seq;
        self.next_seq += batches;
        self.since_digest += batches;
        let due = batches > 0 && self.since_digest >= self.digest_every;
        if due {
            self.since_digest = 0;
        }
        (first, due)
    }
}

/// Whether a writer's records carry each store's token ids, or withhold them (a token-free
/// source, docs/security.md): its stores then keep their hashes, block size and pages, and say
/// no token id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenIds {
    Written,
    Withheld,
}

impl TokenIds {
    /// `events` as this writer writes them: every store's token ids dropped when withheld.
    fn apply(self, events: &mut [Event]) {
        if self == TokenIds::Withheld {
            for event in events {
                if let Event::Stored(stored) = event {
                    stored.tokens = Tokens::new();
                }
            }
        }
    }
}

/// One encoded record and the number of (per-page) events it carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub bytes: Vec<u8>,
    pub events: usize,
}

fn encode_all(
    batches: Vec<Vec<Event>>,
    numbering: &Numbering<'_>,
    digest: Option<u64>,
    meta_json: Option<&str>,
    tokens: TokenIds,
) -> codec::Result<Vec<Record>> {
    let last = batches.len().saturating_sub(1);
    let mut records = Vec::with_capacity(batches.len());
    for (index, mut events) in batches.into_iter().enumerate() {
        let count = events.iter().map(page_events).sum();
        tokens.apply(&mut events);
        let batch = Batch {
            header: Header {
                version: WIRE_VERSION,
                source: numbering.source.to_owned(),
                epoch: numbering.epoch.to_owned(),
                seq: numbering.first_seq + index as u64,
                ts: numbering.ts,
                digest: digest.filter(|_| index == last).map(format_digest),
                meta_json: meta_json.filter(|_| index == 0).map(str::to_owned),
            },
            events,
        };
        records.push(Record {
            bytes: codec::encode(&batch)?,
            events: count,
        });
    }
    Ok(records)
}

/// The records of one cut step: its events split at `batch_ends`, the digest after the step on
/// the last one when `with_digest`, each store's token ids as `tokens` says.
pub fn step_records(
    outcome: Outcome,
    batch_ends: &[usize],
    numbering: &Numbering<'_>,
    with_digest: bool,
    tokens: TokenIds,
) -> codec::Result<Vec<Record>> {
    let digest = with_digest.then_some(outcome.digest);
    encode_all(
        split_events(outcome.events, batch_ends),
        numbering,
        digest,
        None,
        tokens,
    )
}

/// The records that open an epoch: `AllBlocksCleared` then `snapshot`, split by `limits`,
/// `meta_json` on the first and `digest` (the snapshot's) on the last, each store's token ids
/// as `tokens` says.
pub fn opening_records(
    snapshot: Vec<Event>,
    digest: u64,
    page_size: usize,
    limits: BatchLimits,
    numbering: &Numbering<'_>,
    meta_json: &str,
    tokens: TokenIds,
) -> codec::Result<Vec<Record>> {
    let mut events = Vec::with_capacity(snapshot.len() + 1);
    events.push(Event::Cleared);
    events.extend(snapshot);
    let ends = plan_batches(&runs_of(&events, page_size), limits);
    encode_all(
        split_events(events, &ends),
        numbering,
        Some(digest),
        Some(meta_json),
        tokens,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode, DEFAULT_MAX_RECORD_BYTES};
    use crate::recorder::{Op, Recorder};

    const META: &str = r#"{"page_size":1,"sliding_window_size":4,"digest_alg":"mix64-v1"}"#;

    fn numbering(first_seq: u64) -> Numbering<'static> {
        Numbering {
            source: "w0",
            epoch: "e1",
            first_seq,
            ts: 1.5,
        }
    }

    fn decoded(records: &[Record]) -> Vec<Batch> {
        records
            .iter()
            .map(|r| decode(&r.bytes, DEFAULT_MAX_RECORD_BYTES).expect("decodes"))
            .collect()
    }

    #[test]
    fn the_digest_rides_every_n_batches_counted_across_steps() {
        let mut sequencer = Sequencer::new(3);
        sequencer.begin("e".into(), 1);
        let steps: Vec<(u64, bool)> = [1, 1, 2, 0, 1, 1, 1].map(|n| sequencer.reserve(n)).to_vec();
        assert_eq!(
            steps,
            vec![
                (1, false),
                (2, false),
                (3, true),
                (5, false),
                (5, false),
                (6, false),
                (7, true)
            ]
        );
    }

    #[test]
    fn a_step_splits_where_its_cut_planned_and_the_digest_rides_on_the_last_batch() {
        let recorder = Recorder::new(1);
        recorder.cleared();
        recorder.root(1, None);
        recorder.stored(2, 1, &[1, 2, 3]);
        let limits = BatchLimits {
            max_events: 3,
            max_bytes: usize::MAX,
        };
        let cut = recorder.cut(limits).unwrap();
        let outcome = recorder.claim(cut.id).unwrap().unwrap();
        let digest = outcome.digest;
        let records = step_records(
            outcome,
            &cut.batch_ends,
            &numbering(7),
            true,
            TokenIds::Written,
        )
        .unwrap();
        assert_eq!(
            records.iter().map(|r| r.events).collect::<Vec<_>>(),
            vec![3, 1]
        );
        let batches = decoded(&records);
        assert_eq!(batches[0].header.seq, 7);
        assert_eq!(batches[1].header.seq, 8);
        assert_eq!(batches[0].header.digest, None);
        assert_eq!(batches[1].header.digest, Some(format_digest(digest)));
        assert_eq!(batches[0].events[0], Event::Cleared);
        // Page-1 compaction: ~ a hash and a token per block.
        let per_block = records[1].bytes.len() as f64;
        assert!(per_block < 400.0, "{per_block}");
    }

    #[test]
    fn a_writer_that_withholds_token_ids_writes_the_same_pages_without_them() {
        let both: Vec<Vec<Batch>> = [TokenIds::Written, TokenIds::Withheld]
            .into_iter()
            .map(|tokens| {
                let recorder = Recorder::new(2);
                recorder.cleared();
                recorder.root(1, None);
                recorder.stored(2, 1, &[1, 2, 3, 4]);
                recorder.stored(3, 2, &[5, 6]);
                let (snapshot, digest) = recorder.reopen().unwrap();
                let limits = BatchLimits {
                    max_events: 100,
                    max_bytes: usize::MAX,
                };
                let opening =
                    opening_records(snapshot, digest, 2, limits, &numbering(0), META, tokens)
                        .unwrap();
                recorder.stored(4, 3, &[7, 8]);
                let cut = recorder.cut(limits).unwrap();
                let outcome = recorder.claim(cut.id).unwrap().unwrap();
                let step =
                    step_records(outcome, &cut.batch_ends, &numbering(1), true, tokens).unwrap();
                decoded(&opening)
                    .into_iter()
                    .chain(decoded(&step))
                    .collect()
            })
            .collect();
        let (written, withheld) = (&both[0], &both[1]);
        assert_eq!(written.len(), withheld.len());
        let mut stores = 0;
        for (with, without) in written.iter().zip(withheld) {
            assert_eq!(with.header, without.header);
            assert_eq!(with.events.len(), without.events.len());
            for (a, b) in with.events.iter().zip(&without.events) {
                match (a, b) {
                    (Event::Stored(a), Event::Stored(b)) => {
                        stores += 1;
                        assert!(!a.tokens.is_empty() && b.tokens.is_empty());
                        assert_eq!((&a.hashes, a.parent), (&b.hashes, b.parent));
                        assert_eq!(a.block_size, b.block_size);
                    }
                    _ => assert_eq!(a, b),
                }
            }
        }
        assert!(stores >= 2, "{stores}");
    }

    #[test]
    fn an_opening_is_cleared_then_the_snapshot_with_meta_first_and_digest_last() {
        let recorder = Recorder::new(1);
        recorder.cleared();
        recorder.root(1, None);
        recorder.stored(2, 1, &[1, 2]);
        recorder.node_event(Op::SwaEvicted { node: 2 }, 2);
        let (snapshot, digest) = recorder.reopen().unwrap();
        let limits = BatchLimits {
            max_events: 2,
            max_bytes: usize::MAX,
        };
        let records = opening_records(
            snapshot,
            digest,
            1,
            limits,
            &numbering(0),
            META,
            TokenIds::Written,
        )
        .unwrap();
        let batches = decoded(&records);
        assert_eq!(batches.len(), 2);
        assert!(batches[0].starts_epoch());
        assert!(batches[0].header.meta_json.is_some() && batches[1].header.meta_json.is_none());
        assert_eq!(batches[1].header.digest, Some(format_digest(digest)));
        assert!(matches!(
            batches[1].events.last(),
            Some(Event::SwaEvicted { .. })
        ));
    }
}
