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
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList, PyTuple, PyType};
use std::collections::HashMap;
use std::io::Write;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::codec::{classes, push_events};
use crate::codec::EncodeError;
use crate::events::Event;
use crate::recorder::{
    opening_records, BatchLimits, Done, EncodeWorker, Job, Numbering, Record, Recorder,
    RecorderError, Sequencer, Target,
};

static RECORDER_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// The Python `cache.events.recorder.EventRecorderError` of a native recorder error.
fn recorder_error(py: Python<'_>, error: RecorderError) -> PyErr {
    let class = RECORDER_ERROR.get_or_try_init(py, || -> PyResult<Py<PyType>> {
        Ok(py
            .import("cache.events.recorder")?
            .getattr("EventRecorderError")?
            .cast_into::<PyType>()?
            .unbind())
    });
    match class.and_then(|class| class.bind(py).call1((error.reason,))) {
        Ok(instance) => PyErr::from_value(instance),
        Err(lookup_failed) => lookup_failed,
    }
}

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
    Recorder(RecorderError),
    Encode(EncodeError),
}

impl Failure {
    fn into_py(self, py: Python<'_>) -> PyErr {
        match self {
            Failure::Recorder(error) => recorder_error(py, error),
            Failure::Encode(error) => PyValueError::new_err(error.to_string()),
        }
    }
}

/// Encoded records as Python sees them: (record bytes, events in it).
type PyRecords<'py> = Vec<(Bound<'py, PyBytes>, usize)>;

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
        self.inner.removed(node_id, pages);
    }

    /// Record that `node_id` (of `pages` pages) was tombstoned.
    fn swa_evicted(&self, node_id: u64, pages: usize) {
        self.inner.swa_evicted(node_id, pages);
    }

    /// Record that `node_id` (of `pages` pages) got its SWA KV back.
    fn swa_restored(&self, node_id: u64, pages: usize) {
        self.inner.swa_restored(node_id, pages);
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
    /// `digest_every`-th batch (see `RecordEncoder`). A step's records of at least
    /// `fill_beside_bytes` bytes in all are copied into their `bytes` by the thread.
    #[pyo3(signature = (source, max_events, max_bytes, digest_every, fill_beside_bytes=FILL_BESIDE_BYTES))]
    fn encoder(
        &self,
        source: String,
        max_events: usize,
        max_bytes: usize,
        digest_every: u64,
        fill_beside_bytes: usize,
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
            fill_beside_bytes,
        )
    }

    /// Never deliver what was recorded or cut so far (a resync); it still reaches the table.
    fn discard_all(&self) {
        self.inner.discard_all();
    }

    /// Open a new epoch: discard everything unclaimed, then write `AllBlocksCleared` and the
    /// node table's snapshot as records (seq 0.., `meta_json` on the first, the digest on the
    /// last), split by the limits. The GIL is released while it works.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (source, epoch, ts, meta_json, max_events, max_bytes))]
    fn encode_opening<'py>(
        &self,
        py: Python<'py>,
        source: &str,
        epoch: &str,
        ts: f64,
        meta_json: &[u8],
        max_events: usize,
        max_bytes: usize,
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
                opening_records(snapshot, digest, page_size, limits, &numbering, meta_json)
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

/// A job's records whose bytes objects the encoder thread fills: (bytes, events) each.
type Filling = Vec<(Py<PyBytes>, usize)>;

/// By default, a job whose records take at least this many bytes has them copied into its
/// `bytes` objects by the encoder thread (`EncodeWorker::fill`): a publisher to an in-memory
/// log keeps every record, so their memory is fresh and each page of it faults on first write,
/// and that write is better made beside the serving loop than on it. Smaller jobs are copied
/// at once (one more round trip to the thread would cost them more than it saves).
const FILL_BESIDE_BYTES: usize = 4096;

/// A publisher's side of the recorder: `step()` cuts what the tree recorded, numbers its
/// batches and hands them to the encoder thread (`crate::recorder::worker`); when `fileno()`
/// turns readable, read it empty and `take_done()` the records.
#[pyclass(frozen, module = "cache.events._native")]
pub struct RecordEncoder {
    recorder: Arc<Recorder>,
    limits: BatchLimits,
    sequencer: Mutex<Sequencer>,
    /// Declared before `filling`: fields drop in order, so the thread is joined before the
    /// bytes objects it may still be writing into are released.
    worker: Mutex<Option<EncodeWorker>>,
    /// Jobs whose records the thread is copying into these (not yet filled) bytes objects, by
    /// id. None of them is seen by Python before the thread reports the job `Filled`.
    filling: Mutex<HashMap<u64, Filling>>,
    /// A job's records of at least this many bytes in all are filled beside the loop.
    fill_beside_bytes: usize,
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
        fill_beside_bytes: usize,
    ) -> PyResult<Self> {
        let (wake, signal) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        signal.set_nonblocking(true)?;
        let worker = EncodeWorker::start(recorder.clone(), source, move || {
            // One byte per batch of finished jobs. A full buffer (a reader that stopped
            // draining) or a gone reader needs no more bytes: it is readable, or nobody waits.
            let _ = (&signal).write_all(&[1]);
        })?;
        Ok(RecordEncoder {
            recorder,
            limits,
            sequencer: Mutex::new(Sequencer::new(digest_every)),
            worker: Mutex::new(Some(worker)),
            filling: Mutex::new(HashMap::new()),
            fill_beside_bytes,
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
    /// cut. A failure of the recorder raises `EventRecorderError`. A job of many bytes is
    /// finished in two rounds: written, its bytes objects are made here and handed to the
    /// thread to copy into (see `FILL_BESIDE_BYTES`); they come out of a later call, once
    /// filled (the socket signals again).
    fn take_done<'py>(&self, py: Python<'py>) -> PyResult<Vec<(u64, Option<PyRecords<'py>>)>> {
        let done = self.with_worker(EncodeWorker::take_done)?;
        let mut finished = Vec::with_capacity(done.len());
        for (id, done) in done {
            match done {
                Done::Records(records) => {
                    let size: usize = records.iter().map(|record| record.bytes.len()).sum();
                    if size < self.fill_beside_bytes {
                        finished.push((id, Some(py_records(py, &records))));
                    } else {
                        self.fill_beside(py, id, records)?;
                    }
                }
                Done::Filled => {
                    let filled = self
                        .filling
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .remove(&id)
                        .ok_or_else(|| {
                            PyValueError::new_err(format!("encoder filled unknown job {id}"))
                        })?;
                    let records = filled
                        .into_iter()
                        .map(|(bytes, events)| (bytes.into_bound(py), events))
                        .collect();
                    finished.push((id, Some(records)));
                }
                Done::Discarded => finished.push((id, None)),
                Done::Failed(reason) => {
                    return Err(recorder_error(py, RecorderError { reason }));
                }
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
        // The thread is joined: nothing writes into these any more.
        self.filling
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    }
}

impl RecordEncoder {
    /// Make job `id`'s bytes objects, uninitialised, and hand them to the thread to copy
    /// `records` into; kept in `filling` until it reports them filled.
    fn fill_beside(&self, py: Python<'_>, id: u64, records: Vec<Record>) -> PyResult<()> {
        let mut objects: Filling = Vec::with_capacity(records.len());
        let mut copies = Vec::with_capacity(records.len());
        for record in records {
            let len = record.bytes.len();
            // SAFETY: the GIL is held (`py`). A null source asks for an uninitialised bytes
            // object of `len` bytes (a new reference, or null with an exception set, which
            // `from_owned_ptr_or_err` turns into the error). Its contents are written by the
            // thread before any Python code can see the object: it stays in `filling` until
            // the thread reports the job filled.
            let object = unsafe {
                Bound::from_owned_ptr_or_err(
                    py,
                    ffi::PyBytes_FromStringAndSize(std::ptr::null(), len as ffi::Py_ssize_t),
                )?
                .cast_into_unchecked::<PyBytes>()
            };
            // SAFETY: `object` is a bytes object of `len` bytes, alive while we hold it, so
            // PyBytes_AsString returns its buffer, `len` bytes long (plus the terminating NUL).
            let start = unsafe { ffi::PyBytes_AsString(object.as_ptr()) }.cast::<u8>();
            // SAFETY: the buffer stays valid while `filling` holds `object`, which it does until
            // the thread reports the fill (`take_done`) or is joined (`close`, and the field
            // order of `RecordEncoder` on drop); no Python code reads or writes it meanwhile,
            // since the object is not handed out before the fill is reported.
            let target = unsafe { Target::new(start, len) };
            copies.push((target, record.bytes));
            objects.push((object.unbind(), record.events));
        }
        self.filling
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id, objects);
        self.with_worker(|worker| worker.fill(id, copies))
    }
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<EventRecorder>()?;
    module.add_class::<RecordEncoder>()?;
    Ok(())
}
