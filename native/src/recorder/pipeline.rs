//! The recorder: ops recorded on the serving loop, processed in order wherever it is cheapest.
//!
//! Three stages, each behind its own lock so the serving loop never waits on the hashing:
//! - **recording** (serving loop): each tree change pushes one op; the ops since the last cut
//!   belong to the *owner* that the next `cut` will return, and their per-page event count and
//!   size bounds are counted as they come, so a cut knows its batches without hashing anything;
//! - **queue**: a cut (or a read that needs the table current) hands the recorded ops over as
//!   a chunk tagged with their owner;
//! - **processing** (the publisher's encoder thread, `worker`, or whoever needs a result first):
//!   chunks are applied strictly in order to the node table, which hashes pages and keeps the
//!   digest; the events of each owner wait in an outcome until their owner claims them.
//!
//! Whoever processes, the order is the recording order, so the table is the same. Owners that
//! were discarded (a publisher's resync) are still applied to the table but make no events.
//!
//! Lock order: `processed` may be held while `recording` is taken briefly, never the reverse.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use super::error::{Error, Result};
use super::ops::{NodeId, Op, OpLog};
use super::plan::{bound, plan_batches, BatchLimits, Run};
use super::table::NodeTable;
use crate::events::Event;

/// The id of a cut; ids grow by one per cut, from 1.
pub type CutId = u64;

/// A step's events, cut: known at once, hashed later.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cut {
    pub id: CutId,
    /// Per-page events (a store of n pages is n events).
    pub events: usize,
    /// `batch_ends[i]`: the event index just past batch i (see `plan::plan_batches`).
    pub batch_ends: Vec<usize>,
}

/// The processed events of one owner and the table's digest just after its last op.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub owner: CutId,
    pub events: Vec<Event>,
    pub digest: u64,
}

struct Chunk {
    owner: CutId,
    log: OpLog,
}

/// Processed logs kept for recording to reuse, so a step's recording grows no buffer from
/// empty and frees none on the processing thread.
const SPARE_LOGS: usize = 2;
/// A processed log bigger than this (tokens) is freed rather than kept.
const MAX_SPARE_TOKENS: usize = 1 << 16;
/// A processed log bigger than this (ops) is freed rather than kept.
const MAX_SPARE_OPS: usize = 1 << 12;

struct Recording {
    log: OpLog,
    owner: CutId,
    runs: Vec<Run>,
    events: usize,
    queue: VecDeque<Chunk>,
    /// Owners up to this one (0: none) make no events.
    discard_through: CutId,
    /// Emptied logs that `hand_over` reuses (see `SPARE_LOGS`).
    spare: Vec<OpLog>,
}

impl Recording {
    fn count(&mut self, count: usize, bound: usize) {
        self.events += count;
        match self.runs.last_mut() {
            Some(run) if run.bound == bound => run.count += count,
            _ => self.runs.push(Run { count, bound }),
        }
    }

    /// Hand the recorded ops to the queue (their owner stays open).
    fn hand_over(&mut self) -> CutId {
        if !self.log.is_empty() {
            let fresh = self.spare.pop().unwrap_or_default();
            let log = std::mem::replace(&mut self.log, fresh);
            self.queue.push_back(Chunk {
                owner: self.owner,
                log,
            });
        }
        self.owner
    }

    /// Keep an emptied log for reuse, unless enough are kept or it is oversized.
    fn recycle(&mut self, log: OpLog) {
        debug_assert!(log.is_empty() && log.tokens.is_empty());
        if self.spare.len() < SPARE_LOGS
            && log.tokens.capacity() <= MAX_SPARE_TOKENS
            && log.ops.capacity() <= MAX_SPARE_OPS
        {
            self.spare.push(log);
        }
    }

    /// Close the current owner: later ops belong to the next one.
    fn seal(&mut self) -> CutId {
        let owner = self.hand_over();
        self.owner += 1;
        self.runs.clear();
        self.events = 0;
        owner
    }
}

struct Processed {
    table: NodeTable,
    outcomes: VecDeque<Outcome>,
    failure: Option<Error>,
}

/// The recorder of one tree. `Sync`: recording, cutting and processing may run on different
/// threads; see the module docs for who waits for whom.
pub struct Recorder {
    page_size: usize,
    recording: Mutex<Recording>,
    processed: Mutex<Processed>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while a lock was held would be a bug in this module; the data behind it is plain
    // state that every method leaves consistent between statements that can panic, so go on.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Recorder {
    /// A recorder for a tree of `page_size` tokens per page (positive).
    pub fn new(page_size: usize) -> Self {
        Recorder {
            page_size,
            recording: Mutex::new(Recording {
                log: OpLog::default(),
                owner: 1,
                runs: Vec::new(),
                events: 0,
                queue: VecDeque::new(),
                discard_through: 0,
                spare: Vec::new(),
            }),
            processed: Mutex::new(Processed {
                table: NodeTable::new(page_size),
                outcomes: VecDeque::new(),
                failure: None,
            }),
        }
    }

    /// Tokens per page.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    // --- recording (the serving loop) -----------------------------------------------------

    /// A namespace root `node` was made for `extra_key`.
    pub fn root(&self, node: NodeId, extra_key: Option<&str>) {
        lock(&self.recording).log.ops.push(Op::Root {
            node,
            extra_key: extra_key.map(Box::from),
        });
    }

    /// `node` was linked under `parent` with `tokens` (whole pages), all resident.
    pub fn stored(&self, node: NodeId, parent: NodeId, tokens: &[u32]) {
        let mut recording = lock(&self.recording);
        recording.log.push_stored(node, parent, tokens);
        let pages = tokens.len() / self.page_size;
        recording.count(pages, bound::stored_page(self.page_size));
    }

    /// An event of one whole node, of `pages` pages (`pages` only sizes the batch plan): `op`
    /// names the node and what happened to it (`Op::Removed`, `Op::SwaEvicted`,
    /// `Op::SwaRestored`).
    pub fn node_event(&self, op: Op, pages: usize) {
        let mut recording = lock(&self.recording);
        recording.log.ops.push(op);
        recording.count(1, bound::node_event(pages));
    }

    /// `suffix` was split; the new node `prefix` took its first `prefix_pages` pages. No event.
    pub fn split(&self, prefix: NodeId, suffix: NodeId, prefix_pages: usize) {
        lock(&self.recording).log.ops.push(Op::Split {
            prefix,
            suffix,
            prefix_pages,
        });
    }

    /// Every node was dropped (roots included: the tree makes them again after).
    pub fn cleared(&self) {
        let mut recording = lock(&self.recording);
        recording.log.ops.push(Op::Cleared);
        recording.count(1, bound::CLEARED);
    }

    /// Per-page events recorded since the last cut.
    pub fn pending_events(&self) -> usize {
        lock(&self.recording).events
    }

    // --- cutting --------------------------------------------------------------------------

    /// Close the events recorded since the last cut, planned into batches by `limits`; `None`
    /// (and nothing closed) when they make no event.
    pub fn cut(&self, limits: BatchLimits) -> Option<Cut> {
        let mut recording = lock(&self.recording);
        if recording.events == 0 {
            return None;
        }
        let batch_ends = plan_batches(&recording.runs, limits);
        let events = recording.events;
        let id = recording.seal();
        Some(Cut {
            id,
            events,
            batch_ends,
        })
    }

    /// Every event recorded or cut so far will never be claimed: the ops still reach the
    /// table, but make no events (a publisher's resync, which snapshots the table instead).
    pub fn discard_all(&self) {
        let through = {
            let mut recording = lock(&self.recording);
            let owner = recording.seal();
            recording.discard_through = owner;
            owner
        };
        // A processor holds `processed` while it applies a chunk, so once we hold it no chunk
        // popped before the mark is still on its way to an outcome.
        lock(&self.processed)
            .outcomes
            .retain(|outcome| outcome.owner > through);
    }

    // --- processing (anywhere; blocking) --------------------------------------------------

    fn process(&self, processed: &mut Processed, through: CutId) -> Result<()> {
        if let Some(failure) = &processed.failure {
            return Err(failure.clone());
        }
        // The log last applied, emptied, goes back to recording under the lock taken anyway.
        let mut applied: Option<OpLog> = None;
        loop {
            let (chunk, keep) = {
                let mut recording = lock(&self.recording);
                if let Some(log) = applied.take() {
                    recording.recycle(log);
                }
                match recording.queue.front() {
                    Some(chunk) if chunk.owner <= through => {}
                    _ => return Ok(()),
                }
                let chunk = recording.queue.pop_front().expect("looked at above");
                let keep = chunk.owner > recording.discard_through;
                (chunk, keep)
            };
            let result = if keep {
                let mut events = Vec::new();
                let result = processed.table.apply_log(&chunk.log, Some(&mut events));
                let digest = processed.table.digest();
                match processed.outcomes.back_mut() {
                    Some(last) if last.owner == chunk.owner => {
                        last.events.append(&mut events);
                        last.digest = digest;
                    }
                    _ => processed.outcomes.push_back(Outcome {
                        owner: chunk.owner,
                        events,
                        digest,
                    }),
                }
                result
            } else {
                processed.table.apply_log(&chunk.log, None)
            };
            if let Err(error) = result {
                processed.failure = Some(error.clone());
                return Err(error);
            }
            let mut log = chunk.log;
            log.clear();
            applied = Some(log);
        }
    }

    /// Process every op recorded so far and run `read` on the table.
    fn read<T>(&self, read: impl FnOnce(&NodeTable) -> T) -> Result<T> {
        let mut processed = lock(&self.processed);
        let through = lock(&self.recording).hand_over();
        self.process(&mut processed, through)?;
        Ok(read(&processed.table))
    }

    /// The events and digest of cut `id`, processing what must come first; `None` when the
    /// cut was discarded (or claimed before).
    pub fn claim(&self, id: CutId) -> Result<Option<Outcome>> {
        let mut processed = lock(&self.processed);
        self.process(&mut processed, id)?;
        let position = processed.outcomes.iter().position(|o| o.owner == id);
        Ok(position.and_then(|at| processed.outcomes.remove(at)))
    }

    /// Cut and claim at once: the events recorded since the last cut (compacted per op).
    pub fn take(&self) -> Result<Vec<Event>> {
        match self.cut(BatchLimits::UNLIMITED) {
            None => Ok(Vec::new()),
            Some(cut) => Ok(self
                .claim(cut.id)?
                .map(|outcome| outcome.events)
                .unwrap_or_default()),
        }
    }

    /// The digest accumulator of every page in the tree now.
    pub fn digest(&self) -> Result<u64> {
        self.read(NodeTable::digest)
    }

    /// The whole tree as events (see `NodeTable::snapshot`) and its digest.
    pub fn snapshot(&self) -> Result<(Vec<Event>, u64)> {
        self.read(|table| (table.snapshot(), table.digest()))
    }

    /// The block hashes of `node` now (`None`: not in the tree).
    pub fn hashes_of(&self, node: NodeId) -> Result<Option<Vec<i64>>> {
        self.read(|table| table.hashes_of(node))
    }

    /// Start over for a new epoch: discard every unclaimed event, then snapshot the table.
    pub fn reopen(&self) -> Result<(Vec<Event>, u64)> {
        self.discard_all();
        self.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hashing::{block_hash, chain_page_digests};

    fn hashes(tokens: &[u32], page_size: usize) -> Vec<i64> {
        chain_page_digests(&[], tokens, page_size)
            .iter()
            .map(block_hash)
            .collect()
    }

    fn stored_hashes(events: &[Event]) -> Vec<i64> {
        events
            .iter()
            .flat_map(|event| match event {
                Event::Stored(stored) => stored.hashes.to_vec(),
                _ => Vec::new(),
            })
            .collect()
    }

    fn tree() -> Recorder {
        let recorder = Recorder::new(1);
        recorder.cleared();
        recorder.root(1, None);
        recorder
    }

    #[test]
    fn take_returns_what_was_recorded_since_the_last_take() {
        let recorder = tree();
        assert_eq!(recorder.take().unwrap(), vec![Event::Cleared]);
        recorder.stored(2, 1, &[1, 2]);
        recorder.split(3, 2, 1);
        assert_eq!(stored_hashes(&recorder.take().unwrap()), hashes(&[1, 2], 1));
        assert!(recorder.take().unwrap().is_empty());
    }

    #[test]
    fn a_cut_knows_its_events_and_batches_before_anything_is_hashed() {
        let recorder = tree();
        recorder.stored(2, 1, &[1, 2, 3]);
        recorder.node_event(Op::Removed { node: 2 }, 3);
        let limits = BatchLimits {
            max_events: 2,
            max_bytes: usize::MAX,
        };
        let cut = recorder.cut(limits).unwrap();
        // AllBlocksCleared, three pages, one removal.
        assert_eq!((cut.events, cut.batch_ends.clone()), (5, vec![2, 4, 5]));
        assert!(recorder.cut(limits).is_none());
        let outcome = recorder.claim(cut.id).unwrap().unwrap();
        assert_eq!(outcome.events.len(), 3);
        assert_eq!(outcome.digest, 0);
    }

    #[test]
    fn a_digest_read_between_cuts_keeps_every_event_for_its_owner() {
        let recorder = tree();
        let first = recorder.cut(BatchLimits::UNLIMITED).unwrap();
        recorder.stored(2, 1, &[1]);
        let after_store = recorder.digest().unwrap();
        recorder.stored(3, 2, &[2]);
        let second = recorder.cut(BatchLimits::UNLIMITED).unwrap();
        let digest_now = recorder.digest().unwrap();
        // The later cut claimed first: the earlier one's events wait for their owner.
        let two = recorder.claim(second.id).unwrap().unwrap();
        assert_eq!(stored_hashes(&two.events), hashes(&[1, 2], 1));
        assert_eq!(two.digest, digest_now);
        assert_ne!(after_store, digest_now);
        let one = recorder.claim(first.id).unwrap().unwrap();
        assert_eq!((one.events, one.digest), (vec![Event::Cleared], 0));
    }

    #[test]
    fn discarded_cuts_still_reach_the_table_but_make_no_events() {
        let recorder = tree();
        recorder.stored(2, 1, &[1, 2]);
        let cut = recorder.cut(BatchLimits::UNLIMITED).unwrap();
        recorder.stored(3, 2, &[3]);
        let (snapshot, digest) = recorder.reopen().unwrap();
        assert_eq!(recorder.claim(cut.id).unwrap(), None);
        assert_eq!(stored_hashes(&snapshot), hashes(&[1, 2, 3], 1));
        assert_eq!(digest, recorder.digest().unwrap());
        assert!(recorder.take().unwrap().is_empty());
        recorder.node_event(Op::Removed { node: 3 }, 1);
        assert_eq!(recorder.take().unwrap().len(), 1);
    }

    #[test]
    fn processed_logs_are_reused_for_recording() {
        let recorder = tree();
        recorder.stored(2, 1, &[1, 2, 3]);
        assert_eq!(recorder.take().unwrap().len(), 2);
        assert_eq!(lock(&recorder.recording).spare.len(), 1);
        recorder.stored(3, 2, &[4]);
        recorder.node_event(Op::Removed { node: 3 }, 1);
        let events = recorder.take().unwrap();
        assert_eq!(stored_hashes(&events), hashes(&[1, 2, 3, 4], 1)[3..]);
        assert_eq!(events.len(), 2);
        let recording = lock(&recorder.recording);
        assert_eq!(recording.spare.len(), 1);
        assert!(recording.spare[0].tokens.capacity() >= 1 && recording.log.is_empty());
    }

    #[test]
    fn a_failure_is_reported_and_sticks() {
        let recorder = tree();
        recorder.node_event(Op::Removed { node: 42 }, 1);
        assert!(recorder.take().is_err());
        assert!(recorder.digest().is_err());
    }

    #[test]
    fn recording_and_processing_on_two_threads_keep_the_order() {
        let recorder = std::sync::Arc::new(tree());
        let worker = {
            let recorder = recorder.clone();
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                let mut next = 1;
                while next <= 2001 {
                    if let Ok(Some(outcome)) = recorder.claim(next) {
                        seen.extend(stored_hashes(&outcome.events));
                        next += 1;
                    } else {
                        std::thread::yield_now();
                    }
                }
                seen
            })
        };
        let tokens: Vec<u32> = (0..2000).collect();
        recorder.cut(BatchLimits::UNLIMITED);
        recorder.stored(2, 1, &tokens[..1]);
        recorder.cut(BatchLimits::UNLIMITED);
        for (index, token) in tokens.iter().enumerate().skip(1) {
            recorder.stored(index as u64 + 2, index as u64 + 1, &[*token]);
            recorder.cut(BatchLimits::UNLIMITED);
        }
        // The last cut is id 2001; the worker claims ids 1..=2001 (the first holds no store).
        let seen = worker.join().unwrap();
        assert_eq!(seen, hashes(&tokens, 1));
    }
}
