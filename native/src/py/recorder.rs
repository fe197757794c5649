//! Bindings of `crate::recorder`: the tree's `EventRecorder` and a publisher's
//! `RecordEncoder`.
//!
//! Recording methods are called on the serving loop with the GIL held and only push an op.
//! Everything that processes (hashing, digest, events, encoding) releases the GIL while it
//! works, so a publisher's worker thread runs it beside the serving loop.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use std::io::Write;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::classes::classes;
use super::codec::push_events;
use super::errors::{encode_error, recorder_error};
use crate::codec;
use crate::events::Event;
use crate::recorder::{
    self, opening_records, BatchLimits, Done, EncodeWorker, Job, Numbering, Op, Record, Recorder,
    Sequencer, TokenIds,
};

fn token(item: &Bound<'_, PyAny>) -> PyResult<u32> {
    let value: i64 = item.extract().map_err(|_| {
        PyValueError::new_err(format!("token id {item} is not an int in [0, 2**32)"))
    })?;
    u32::try_from(value)
        .map_err(|_| PyValueError::new_err(format!("token id {value} outside [0, 2**32)")))
}

/// The `start..start + length` (`None`: to the end) range of a sequence of `len` items.
fn token_range(len: usize, start: usize, length: Option<usize>) -> PyResult<Range<usize>> {
    let end = match length {
        None => Some(len),
        Some(length) => start.checked_add(length),
    };
    match end {
        Some(end) if start <= end && end <= len => Ok(start..end),
        _ => Err(PyValueError::new_err(format!(
            "token range start={start} length={} is outside the {len} token ids given",
            length.map_or_else(|| "None".to_owned(), |length| length.to_string())
        ))),
    }
}

/// Token ids `start..start + length` as u32. An `array("I")` (what the tree records from: it
/// checks every key by converting it so) is copied in one block through the buffer protocol;
/// the serving loop records every stored token, and the item-by-item read of a tuple costs
/// about fifty instructions a token.
fn tokens_u32(
    token_ids: &Bound<'_, PyAny>,
    start: usize,
    length: Option<usize>,
) -> PyResult<Vec<u32>> {
    let py = token_ids.py();
    if !token_ids.is_instance_of::<PyTuple>() && !token_ids.is_instance_of::<PyList>() {
        if let Ok(buffer) = PyBuffer::<u32>::get(token_ids) {
            // One block copy of the whole key (a few KB), then the node's range kept.
            let mut tokens = buffer.to_vec(py)?;
            let range = token_range(tokens.len(), start, length)?;
            tokens.truncate(range.end);
            tokens.drain(..range.start);
            return Ok(tokens);
        }
    }
    let Ok(tuple) = token_ids.cast::<PyTuple>() else {
        let items: Vec<u32> = token_ids
            .try_iter()?
            .map(|item| token(&item?))
            .collect::<PyResult<_>>()?;
        let range = token_range(items.len(), start, length)?;
        return Ok(items[range].to_vec());
    };
    // A tuple is read item by item through the C API: PyO3's generic path (a new reference and
    // a type check per item) costs about twice as much.
    let range = token_range(tuple.len(), start, length)?;
    let mut tokens = Vec::with_capacity(range.len());
    for index in range {
        // SAFETY: the GIL is held (`py` proves it) and `tuple` is a live tuple for the whole
        // loop (the `Bound` holds a strong reference). `index` lies in `range`, which
        // `token_range` checked to be within its size, and a tuple's size never changes, so
        // PyTuple_GetItem returns a valid borrowed reference owned by the tuple, which keeps it
        // alive while we read it. PyLong_AsLongLong only reads it (it may run `__index__` for
        // a non-int, which cannot touch the tuple's items) and reports failure as -1 with an
        // exception set, which `PyErr::take` consumes.
        let value = unsafe {
            let item = ffi::PyTuple_GetItem(tuple.as_ptr(), index as ffi::Py_ssize_t);
            if item.is_null() {
                return Err(PyErr::fetch(py));
            }
            let value = ffi::PyLong_AsLongLong(item);
            if value == -1 {
                if let Some(_error) = PyErr::take(py) {
                    return Err(PyValueError::new_err(format!(
                        "token id {} is not an int in [0, 2**32)",
                        tuple.get_item(index)?
                    )));
                }
            }
            value
        };
        tokens.push(
            u32::try_from(value).map_err(|_| {
                PyValueError::new_err(format!("token id {value} outside [0, 2**32)"))
            })?,
        );
    }
    Ok(tokens)
}

fn limits(max_events: usize, max_bytes: usize) -> PyResult<BatchLimits> {
    if max_events == 0 || max_bytes == 0 {
        return Err(PyValueError::new_err(format!(
            "batch limits must be positive, got max_events={max_events}, max_bytes={max_bytes}"
        )));
    }
    Ok(BatchLimits {
        max_events,
        max_bytes,
    })
}

/// Python events of native ones, one `BlockStored` per page.
fn py_events<'py>(py: Python<'py>, events: &[Event]) -> PyResult<Bound<'py, PyList>> {
    let classes = classes(py)?;
    let mut items = Vec::with_capacity(events.len());
    for event in events {
        push_events(py, classes, event, &mut items)?;
    }
    PyList::new(py, items)
}

/// What can go wrong while processing with the GIL released; converted once it is held again.
enum Failure {
    Recorder(recorder::Error),
    Encode(codec::Error),
}

impl Failure {
    fn into_py(self, py: Python<'_>) -> PyErr {
        match self {
            Failure::Recorder(error) => recorder_error(py, error),
            Failure::Encode(error) => encode_error(error),
        }
    }
}

/// Encoded records as Python sees them: (record bytes, events in it).
type PyRecords<'py> = Vec<(Bound<'py, PyBytes>, usize)>;

/// Each record copied into a new `bytes` object (the public constructor: the encoder thread
/// never writes into memory Python owns).
fn py_records<'py>(py: Python<'py>, records: &[Record]) -> PyRecords<'py> {
    records
        .iter()
        .map(|record| (PyBytes::new(py, &record.bytes), record.events))
        .collect()
}

/// The native event recorder of one tree (see `crate::recorder`).
#[pyclass(frozen, module = "cache.events._native")]
pub struct EventRecorder {
    inner: Arc<Recorder>,
}

#[pymethods]
impl EventRecorder {
    /// A recorder for a tree of `page_size` tokens per page.
    #[new]
    fn new(page_size: usize) -> PyResult<Self> {
        if page_size == 0 {
            return Err(PyValueError::new_err("page_size must be positive, got 0"));
        }
        Ok(EventRecorder {
            inner: Arc::new(Recorder::new(page_size)),
        })
    }

    /// Tokens per page.
    #[getter]
    fn page_size(&self) -> usize {
        self.inner.page_size()
    }

    // --- recording ------------------------------------------------------------------------

    /// Record that `node_id` became the root of namespace `extra_key`.
    #[pyo3(signature = (node_id, extra_key))]
    fn root(&self, node_id: u64, extra_key: Option<&str>) {
        self.inner.root(node_id, extra_key);
    }

    /// Record that `node_id` was linked under `parent_id` holding `token_ids[start:start +
    /// length]` (whole pages; `length` None: to the end). An `array("I")` is copied in one
    /// block; any other sequence of ints is converted item by item.
    #[pyo3(signature = (node_id, parent_id, token_ids, start=0, length=None))]
    fn stored(
        &self,
        node_id: u64,
        parent_id: u64,
        token_ids: &Bound<'_, PyAny>,
        start: usize,
        length: Option<usize>,
    ) -> PyResult<()> {
        let tokens = tokens_u32(token_ids, start, length)?;
        if tokens.is_empty() || tokens.len() % self.inner.page_size() != 0 {
            return Err(PyValueError::new_err(format!(
                "node {node_id}: {} tokens is not a positive whole number of pages of {}",
                tokens.len(),
                self.inner.page_size()
            )));
        }
        self.inner.stored(node_id, parent_id, &tokens);
        Ok(())
    }

    /// Record that `node_id` (of `pages` pages) left the tree.
    fn removed(&self, node_id: u64, pages: usize) {
        self.inner.node_event(Op::Removed { node: node_id }, pages);
    }

    /// Record that `node_id` (of `pages` pages) was tombstoned.
    fn swa_evicted(&self, node_id: u64, pages: usize) {
        self.inner
            .node_event(Op::SwaEvicted { node: node_id }, pages);
    }

    /// Record that `node_id` (of `pages` pages) got its SWA KV back.
    fn swa_restored(&self, node_id: u64, pages: usize) {
        self.inner
            .node_event(Op::SwaRestored { node: node_id }, pages);
    }

    /// Record that `suffix_id` was split and the new `prefix_id` took its first pages.
    fn split(&self, prefix_id: u64, suffix_id: u64, prefix_pages: usize) {
        self.inner.split(prefix_id, suffix_id, prefix_pages);
    }

    /// Record that every node, namespace roots included, was dropped.
    fn cleared(&self) {
        self.inner.cleared();
    }

    /// Per-page events recorded since the last cut or take.
    #[getter]
    fn pending_events(&self) -> usize {
        self.inner.pending_events()
    }

    // --- reading (processes what is pending first) ----------------------------------------

    /// The events since the last cut or take, one `BlockStored` per page (processes first).
    fn take_events<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let events = py
            .detach(|| self.inner.take())
            .map_err(|e| recorder_error(py, e))?;
        py_events(py, &events)
    }

    /// The digest accumulator of every page now (processes what is pending first).
    fn digest(&self, py: Python<'_>) -> PyResult<u64> {
        py.detach(|| self.inner.digest())
            .map_err(|e| recorder_error(py, e))
    }

    /// The whole tree as events from the node table (processes what is pending first).
    fn snapshot_events<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let (events, _) = py
            .detach(|| self.inner.snapshot())
            .map_err(|e| recorder_error(py, e))?;
        py_events(py, &events)
    }

    /// The block hashes of `node_id`'s pages now, or None for a node not in the tree.
    fn block_hashes(&self, py: Python<'_>, node_id: u64) -> PyResult<Option<Vec<i64>>> {
        py.detach(|| self.inner.hashes_of(node_id))
            .map_err(|e| recorder_error(py, e))
    }

    // --- the publisher's path -------------------------------------------------------------

    /// Start an encoder thread for a publisher of `source` whose batches hold at most
    /// `max_events` events and `max_bytes` of event size bounds, with the digest on every
    /// `digest_every`-th batch (see `RecordEncoder`); `token_ids=False` writes every store
    /// without its token ids (a token-free source).
    #[pyo3(signature = (source, max_events, max_bytes, digest_every, *, token_ids = true))]
    fn encoder(
        &self,
        source: String,
        max_events: usize,
        max_bytes: usize,
        digest_every: u64,
        token_ids: bool,
    ) -> PyResult<RecordEncoder> {
        if digest_every == 0 {
            return Err(PyValueError::new_err(
                "digest_every must be positive, got 0",
            ));
        }
        RecordEncoder::start(
            self.inner.clone(),
            source,
            limits(max_events, max_bytes)?,
            digest_every,
            written(token_ids),
        )
    }

    /// Never deliver what was recorded or cut so far (a resync); it still reaches the table.
    fn discard_all(&self) {
        self.inner.discard_all();
    }

    /// Open a new epoch: discard everything unclaimed, then write `AllBlocksCleared` and the
    /// node table's snapshot as records (seq 0.., `meta_json` on the first, the digest on the
    /// last), split by the limits; `token_ids=False` writes every store without its token ids.
    /// The GIL is released while it works.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (source, epoch, ts, meta_json, max_events, max_bytes, *, token_ids = true))]
    fn encode_opening<'py>(
        &self,
        py: Python<'py>,
        source: &str,
        epoch: &str,
        ts: f64,
        meta_json: &[u8],
        max_events: usize,
        max_bytes: usize,
        token_ids: bool,
    ) -> PyResult<PyRecords<'py>> {
        let limits = limits(max_events, max_bytes)?;
        let meta_json = std::str::from_utf8(meta_json)
            .map_err(|_| PyValueError::new_err("meta_json: not UTF-8"))?;
        let numbering = Numbering {
            source,
            epoch,
            first_seq: 0,
            ts,
        };
        let page_size = self.inner.page_size();
        let records = py
            .detach(|| -> Result<_, Failure> {
                let (snapshot, digest) = self.inner.reopen().map_err(Failure::Recorder)?;
                opening_records(
                    snapshot,
                    digest,
                    page_size,
                    limits,
                    &numbering,
                    meta_json,
                    written(token_ids),
                )
                .map_err(Failure::Encode)
            })
            .map_err(|failure| failure.into_py(py))?;
        Ok(py_records(py, &records))
    }

    fn __repr__(&self) -> String {
        format!(
            "EventRecorder(page_size={}, pending_events={})",
            self.inner.page_size(),
            self.inner.pending_events()
        )
    }
}

/// A publisher's side of the recorder: `step()` cuts what the tree recorded, numbers its
/// batches and hands them to the encoder thread (`crate::recorder::worker`); when `fileno()`
/// turns readable, read it empty and `take_done()` the records.
#[pyclass(frozen, module = "cache.events._native")]
pub struct RecordEncoder {
    recorder: Arc<Recorder>,
    limits: BatchLimits,
    sequencer: Mutex<Sequencer>,
    worker: Mutex<Option<EncodeWorker>>,
    /// The end the event loop waits on (non-blocking); the thread writes to the other.
    wake: UnixStream,
    next_id: AtomicU64,
}

impl RecordEncoder {
    fn start(
        recorder: Arc<Recorder>,
        source: String,
        limits: BatchLimits,
        digest_every: u64,
        tokens: TokenIds,
    ) -> PyResult<Self> {
        let (wake, signal) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        signal.set_nonblocking(true)?;
        let worker = EncodeWorker::start(recorder.clone(), source, tokens, move || {
            // One byte per batch of finished jobs. A full buffer (a reader that stopped
            // draining) or a gone reader needs no more bytes: it is readable, or nobody waits.
            let _ = (&signal).write_all(&[1]);
        })?;
        Ok(RecordEncoder {
            recorder,
            limits,
            sequencer: Mutex::new(Sequencer::new(digest_every)),
            worker: Mutex::new(Some(worker)),
            wake,
            next_id: AtomicU64::new(0),
        })
    }

    fn with_worker<T>(&self, use_it: impl FnOnce(&EncodeWorker) -> T) -> PyResult<T> {
        let guard = self
            .worker
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match guard.as_ref() {
            Some(worker) => Ok(use_it(worker)),
            None => Err(PyValueError::new_err("the encoder is closed")),
        }
    }
}

#[pymethods]
impl RecordEncoder {
    /// The wake-up socket the event loop waits on: readable once finished jobs wait in
    /// `take_done()` (read it empty before calling).
    fn fileno(&self) -> i32 {
        self.wake.as_raw_fd()
    }

    /// Number the steps of a new epoch whose opening took seqs `0..next_seq`.
    fn begin_epoch(&self, epoch: String, next_seq: u64) {
        self.sequencer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .begin(epoch, next_seq);
    }

    /// Cut what the tree recorded since the last cut, number its batches and queue them for
    /// the encoder thread, stamped `ts`: the job's id and each batch's event count, or None
    /// (nothing cut) when nothing that makes an event was recorded.
    fn step(&self, ts: f64) -> PyResult<Option<(u64, Vec<usize>)>> {
        let Some(cut) = self.recorder.cut(self.limits) else {
            return Ok(None);
        };
        let mut sequencer = self
            .sequencer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (first_seq, with_digest) = sequencer.reserve(cut.batch_ends.len() as u64);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut start = 0;
        let batch_events = cut
            .batch_ends
            .iter()
            .map(|&end| end - std::mem::replace(&mut start, end))
            .collect();
        let job = Job {
            id,
            cut: cut.id,
            batch_ends: cut.batch_ends,
            epoch: sequencer.epoch().to_owned(),
            first_seq,
            ts,
            with_digest,
        };
        drop(sequencer);
        self.with_worker(|worker| worker.submit(job))?;
        Ok(Some((id, batch_events)))
    }

    /// Write the waiting jobs now rather than lingering for more (someone waits for them).
    fn hurry(&self) -> PyResult<()> {
        self.with_worker(EncodeWorker::hurry)
    }

    /// The jobs finished since the last call: `(id, records)`, records `None` for a discarded
    /// cut. A failure of the recorder raises `EventRecorderError`.
    fn take_done<'py>(&self, py: Python<'py>) -> PyResult<Vec<(u64, Option<PyRecords<'py>>)>> {
        let done = self.with_worker(EncodeWorker::take_done)?;
        let mut finished = Vec::with_capacity(done.len());
        for (id, done) in done {
            match done {
                Done::Records(records) => finished.push((id, Some(py_records(py, &records)))),
                Done::Discarded => finished.push((id, None)),
                Done::Failed(error) => return Err(recorder_error(py, error)),
            }
        }
        Ok(finished)
    }

    /// Stop the thread after its current job (the rest are dropped); idempotent.
    fn close(&self, py: Python<'_>) {
        let worker = self
            .worker
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(mut worker) = worker {
            py.detach(move || worker.close());
        }
    }
}

/// The writing of token ids that the Python flag `token_ids` asks for.
fn written(token_ids: bool) -> TokenIds {
    if token_ids {
        TokenIds::Written
    } else {
        TokenIds::Withheld
    }
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<EventRecorder>()?;
    module.add_class::<RecordEncoder>()?;
    Ok(())
}
