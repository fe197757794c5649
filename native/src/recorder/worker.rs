//! The encoder thread: cut steps hashed and written as records beside the serving loop.
//!
//! A publisher submits each cut step (with its numbering) as a `Job`; one thread of our own
//! claims the cuts in submission order from the recorder (which applies the ops to its table in
//! recording order) and writes their records. It never touches Python, so it never waits for
//! the GIL and the serving loop never hands it over: the loop only pushes jobs and, when told
//! by `notify` that records are ready, takes them with `take_done`.
//!
//! The thread works in rounds: woken by the first job after a pause, it lingers up to `LINGER`
//! for more (or until `BATCH_JOBS` wait, or `hurry()`), then writes every waiting job and calls
//! `notify` once. A serving loop that steps every 100 µs thus wakes it, and is woken by it,
//! about once a millisecond rather than once a step.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::error::Error;
use super::pipeline::{CutId, Recorder};
use super::records::{step_records, Numbering, Record, TokenIds};

/// How long a round waits for more jobs after its first one.
pub const LINGER: Duration = Duration::from_millis(1);
/// A round starts at once when this many jobs wait.
pub const BATCH_JOBS: usize = 16;

/// One cut step to write: which cut, its batch plan and its numbering.
#[derive(Clone, Debug)]
pub struct Job {
    pub id: u64,
    pub cut: CutId,
    pub batch_ends: Vec<usize>,
    pub epoch: String,
    pub first_seq: u64,
    pub ts: f64,
    pub with_digest: bool,
}

/// What became of a job.
#[derive(Clone, Debug, PartialEq)]
pub enum Done {
    /// The records of its batches, in order.
    Records(Vec<Record>),
    /// Its cut was discarded (a resync) before it was written.
    Discarded,
    /// The recorder or the encoder failed; the publisher must fail loudly.
    Failed(Error),
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    done: Vec<(u64, Done)>,
    closing: bool,
    /// Start the next round now (a flush is waiting).
    hurry: bool,
    /// The thread sleeps until a job comes (not lingering in a round).
    idle: bool,
    /// `notify` was called and `take_done` has not run since: no need to call it again.
    notified: bool,
}

struct Shared {
    recorder: Arc<Recorder>,
    source: String,
    tokens: TokenIds,
    state: Mutex<State>,
    wake: Condvar,
    notify: Box<dyn Fn() + Send + Sync>,
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    // Nothing that can panic runs while the lock is held; recover the plain data if it ever did.
    shared
        .state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A running encoder thread for one source.
pub struct EncodeWorker {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl EncodeWorker {
    /// Start the thread, which writes each store's token ids as `tokens` says; `notify` is
    /// called (from it) when finished jobs wait to be taken.
    pub fn start(
        recorder: Arc<Recorder>,
        source: String,
        tokens: TokenIds,
        notify: impl Fn() + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            recorder,
            source,
            tokens,
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            notify: Box::new(notify),
        });
        let thread = std::thread::Builder::new()
            .name("swa-es-encoder".into())
            .spawn({
                let shared = shared.clone();
                move || run(&shared)
            })?;
        Ok(EncodeWorker {
            shared,
            thread: Some(thread),
        })
    }

    /// Queue a job (written after every job submitted before it).
    pub fn submit(&self, job: Job) {
        let wake = {
            let mut state = lock(&self.shared);
            state.jobs.push_back(job);
            state.idle || state.jobs.len() == BATCH_JOBS
        };
        if wake {
            self.shared.wake.notify_one();
        }
    }

    /// Write the waiting jobs now, without lingering for more.
    pub fn hurry(&self) {
        lock(&self.shared).hurry = true;
        self.shared.wake.notify_one();
    }

    /// Every finished job since the last call, in submission order.
    pub fn take_done(&self) -> Vec<(u64, Done)> {
        let mut state = lock(&self.shared);
        state.notified = false;
        std::mem::take(&mut state.done)
    }

    /// Stop the thread once its current job is written; jobs not started are dropped.
    pub fn close(&mut self) {
        lock(&self.shared).closing = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            // The thread only ends by returning from `run`; a panic there is a bug, and it has
            // already been reported on stderr by the panic hook.
            let _ = thread.join();
        }
    }
}

impl Drop for EncodeWorker {
    fn drop(&mut self) {
        self.close();
    }
}

fn write(shared: &Shared, job: &Job) -> Done {
    let numbering = Numbering {
        source: &shared.source,
        epoch: &job.epoch,
        first_seq: job.first_seq,
        ts: job.ts,
    };
    match shared.recorder.claim(job.cut) {
        Err(error) => Done::Failed(error),
        Ok(None) => Done::Discarded,
        Ok(Some(outcome)) => {
            let written = step_records(
                outcome,
                &job.batch_ends,
                &numbering,
                job.with_digest,
                shared.tokens,
            );
            match written {
                Ok(records) => Done::Records(records),
                Err(error) => Done::Failed(Error::Encode(error)),
            }
        }
    }
}

fn run(shared: &Shared) {
    // When the current round's first job came (None: no job waits).
    let mut round_started: Option<Instant> = None;
    loop {
        let work = {
            let mut state = lock(shared);
            loop {
                if state.closing {
                    return;
                }
                if state.jobs.is_empty() {
                    round_started = None;
                    state.idle = true;
                    state = wait(shared, state, None);
                    state.idle = false;
                    continue;
                }
                let started = *round_started.get_or_insert_with(Instant::now);
                let left = LINGER.saturating_sub(started.elapsed());
                if state.hurry || state.jobs.len() >= BATCH_JOBS || left.is_zero() {
                    state.hurry = false;
                    round_started = None;
                    break state.jobs.drain(..).collect::<Vec<_>>();
                }
                state = wait(shared, state, Some(left));
            }
        };
        let written: Vec<_> = work
            .iter()
            .map(|job| (job.id, write(shared, job)))
            .collect();
        let first = {
            let mut state = lock(shared);
            state.done.extend(written);
            !std::mem::replace(&mut state.notified, true)
        };
        if first {
            (shared.notify)();
        }
    }
}

fn wait<'a>(
    shared: &'a Shared,
    state: MutexGuard<'a, State>,
    timeout: Option<Duration>,
) -> MutexGuard<'a, State> {
    // A poisoned lock only means a panic elsewhere; the state is plain data, so go on.
    match timeout {
        None => shared
            .wake
            .wait(state)
            .unwrap_or_else(std::sync::PoisonError::into_inner),
        Some(timeout) => {
            shared
                .wake
                .wait_timeout(state, timeout)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recorder::{BatchLimits, Op};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    fn job(id: u64, cut: &crate::recorder::Cut) -> Job {
        Job {
            id,
            cut: cut.id,
            batch_ends: cut.batch_ends.clone(),
            epoch: "e".into(),
            first_seq: id,
            ts: 0.0,
            with_digest: false,
        }
    }

    fn wait_for(worker: &EncodeWorker, count: usize) -> Vec<(u64, Done)> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut done = Vec::new();
        while done.len() < count {
            assert!(
                Instant::now() < deadline,
                "the worker did not finish in time"
            );
            done.extend(worker.take_done());
            std::thread::sleep(Duration::from_millis(1));
        }
        done
    }

    #[test]
    fn jobs_are_written_in_order_off_the_calling_thread_and_discards_are_reported() {
        let recorder = Arc::new(Recorder::new(1));
        let notified = Arc::new(AtomicUsize::new(0));
        let mut worker = EncodeWorker::start(recorder.clone(), "w0".into(), TokenIds::Written, {
            let notified = notified.clone();
            move || {
                notified.fetch_add(1, Ordering::SeqCst);
            }
        })
        .unwrap();
        recorder.cleared();
        recorder.root(1, None);
        let first = recorder.cut(BatchLimits::UNLIMITED).unwrap();
        recorder.stored(2, 1, &[1, 2, 3]);
        let second = recorder.cut(BatchLimits::UNLIMITED).unwrap();
        worker.submit(job(0, &first));
        worker.submit(job(1, &second));
        let done = wait_for(&worker, 2);
        assert_eq!(
            done.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
            vec![0, 1]
        );
        assert!(matches!(&done[1].1, Done::Records(records) if records[0].events == 3));
        assert!(notified.load(Ordering::SeqCst) >= 1);

        recorder.node_event(Op::Removed { node: 2 }, 3);
        let third = recorder.cut(BatchLimits::UNLIMITED).unwrap();
        recorder.discard_all();
        worker.submit(job(2, &third));
        assert_eq!(wait_for(&worker, 1), vec![(2, Done::Discarded)]);
        worker.close();
    }

    #[test]
    fn a_recorder_failure_is_reported_as_a_failed_job() {
        let recorder = Arc::new(Recorder::new(1));
        let worker =
            EncodeWorker::start(recorder.clone(), "w0".into(), TokenIds::Written, || {}).unwrap();
        recorder.node_event(Op::Removed { node: 7 }, 1);
        let cut = recorder.cut(BatchLimits::UNLIMITED).unwrap();
        worker.submit(job(0, &cut));
        let done = wait_for(&worker, 1);
        assert_eq!(done[0].1, Done::Failed(Error::UnknownNode(7)));
        assert_eq!(
            Error::UnknownNode(7).to_string(),
            "event recorder: node 7 is not in the table"
        );
    }
}
