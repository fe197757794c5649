//! Bindings of `crate::replica`: the `ReplicaStore` class (apply, reads, snapshot bytes, prefix
//! match) and the SWA rule. Errors become the Python exceptions of `cache.events.replica_store`
//! (`ReplicaConsistencyError(source, reason)`, `ReplicaSnapshotError(reason)`) through
//! `super::errors`; bad arguments raise ValueError.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple, PyType};
use pyo3::{intern, IntoPyObjectExt};

use super::answer_rows::{self, held_usable, PackedAnswers, StateCodes};
use super::classes::{classes, new_uninitialised, set_field};
use super::codec::WireBatch;
use super::errors::{consistency_error, snapshot_error};
use super::events_in::event_from_py;
use super::tokens::prompt_tokens;
use crate::event_types::EventType;
use crate::hashing::namespace_prior;
use crate::replica::{
    self, swa_rule, Answer, Churn, ChurnCounts, ConsistencyError, Inconsistency, Replica,
    SourceMeta, TierHits, Tiers,
};

/// A `result_type` instance with `full_tokens` and `swa_tokens` set, made without running its
/// `__init__` (its fields are exactly these two).
fn prefix_match<'py>(
    py: Python<'py>,
    result_type: &Bound<'py, PyType>,
    held: Option<u64>,
    usable: Option<u64>,
) -> PyResult<Bound<'py, PyAny>> {
    let instance = new_uninitialised(result_type)?;
    set_field(
        &instance,
        intern!(py, "full_tokens"),
        &held.into_pyobject(py)?,
    )?;
    set_field(
        &instance,
        intern!(py, "swa_tokens"),
        &usable.into_pyobject(py)?,
    )?;
    Ok(instance)
}

/// Every source's replica, held natively (see `crate::replica`).
#[pyclass(module = "cache.events._native", name = "ReplicaStore")]
pub(crate) struct PyReplicaStore {
    pub(crate) store: replica::ReplicaStore,
    /// Each source's name as a Python string, by source id (names never change).
    names: Vec<Py<PyString>>,
}

impl PyReplicaStore {
    /// Set `source`'s meta; sizes must fit the store's u32 (`meta.<field>` names one that does
    /// not).
    fn record_meta(
        &mut self,
        py: Python<'_>,
        source: &str,
        page_size: u64,
        sliding_window_size: u64,
        swa_events: bool,
        json: String,
    ) -> PyResult<()> {
        let fit = |field: &'static str, value: u64| {
            u32::try_from(value)
                .ok()
                .filter(|&size| size > 0)
                .ok_or_else(|| {
                    let error = ConsistencyError {
                        source: source.to_owned(),
                        reason: Inconsistency::MetaSize { field, value },
                    };
                    consistency_error(py, error)
                })
        };
        let page_size = fit("page_size", page_size)?;
        let sliding_window_size = fit("sliding_window_size", sliding_window_size)?;
        self.store.replica_mut(source).meta = Some(SourceMeta {
            page_size,
            sliding_window_size,
            swa_events,
            json,
        });
        Ok(())
    }

    fn replica(&self, source: &str) -> PyResult<&Replica> {
        self.store
            .get(source)
            .ok_or_else(|| PyValueError::new_err(format!("unknown source {source:?}")))
    }
}

#[pymethods]
impl PyReplicaStore {
    /// An empty store; `keep_tokens=False` keeps no token ids (`block` and `blocks` then give
    /// None for them): the same blocks, digests and matches, in less memory.
    #[new]
    #[pyo3(signature = (*, keep_tokens = true))]
    fn new(keep_tokens: bool) -> Self {
        Self {
            store: replica::ReplicaStore::keeping_tokens(keep_tokens),
            names: Vec::new(),
        }
    }

    /// Whether the store keeps each block's token ids.
    #[getter]
    fn keeps_tokens(&self) -> bool {
        self.store.keeps_tokens()
    }

    /// Every source seen, in the order first seen.
    fn sources(&self) -> Vec<String> {
        self.store
            .replicas()
            .iter()
            .map(|r| r.name.clone())
            .collect()
    }

    fn has_source(&self, source: &str) -> bool {
        self.store.id(source).is_some()
    }

    /// Create the (empty) replica of `source` when new.
    fn add_source(&mut self, source: &str) {
        self.store.id_or_create(source);
    }

    /// Record `source`'s meta from a `BatchMeta` (already checked when it was made);
    /// `ReplicaConsistencyError` when a size does not fit the store (at most 2**32 - 1).
    fn set_meta(&mut self, py: Python<'_>, source: &str, meta: &Bound<'_, PyAny>) -> PyResult<()> {
        let size = |name: &Bound<'_, PyString>| -> PyResult<u64> { meta.getattr(name)?.extract() };
        let page_size = size(intern!(py, "page_size"))?;
        let sliding_window_size = size(intern!(py, "sliding_window_size"))?;
        let swa_events: bool = meta.getattr(intern!(py, "swa_events"))?.extract()?;
        let json: String = meta
            .call_method0(intern!(py, "to_json"))?
            .extract::<&[u8]>()
            .map(|bytes| String::from_utf8_lossy(bytes).into_owned())?;
        self.record_meta(py, source, page_size, sliding_window_size, swa_events, json)
    }

    /// Record the meta a decoded record carries (if any) for its source, as the decoder parsed
    /// it: nothing is parsed or serialised again.
    fn set_wire_meta(&mut self, py: Python<'_>, wire: &Bound<'_, WireBatch>) -> PyResult<()> {
        let wire = wire.get();
        let header = &wire.batch.header;
        let (Some(meta), Some(json)) = (&wire.meta, &header.meta_json) else {
            return Ok(());
        };
        self.record_meta(
            py,
            &header.source,
            meta.page_size,
            meta.sliding_window_size,
            meta.swa_events,
            json.clone(),
        )
    }

    fn meta_json(&self, source: &str) -> PyResult<Option<String>> {
        Ok(self.replica(source)?.meta.as_ref().map(|m| m.json.clone()))
    }

    /// Apply a decoded record to its source's replica (the caller set the meta first), reading
    /// the natively held batch: no Python object per event. Events before a failing one stay
    /// applied.
    fn apply_wire(&mut self, py: Python<'_>, wire: &Bound<'_, WireBatch>) -> PyResult<()> {
        self.store
            .apply(&wire.get().batch)
            .map_err(|error| consistency_error(py, error))
    }

    /// Keep the holder index (block hash -> sources) that prefix matching reads, from now on.
    fn enable_prefix_index(&mut self) {
        self.store.enable_holders();
    }

    /// Stop keeping the holder index (`enable_prefix_index` builds it again).
    fn disable_prefix_index(&mut self) {
        self.store.disable_holders();
    }

    fn prefix_index_enabled(&self) -> bool {
        self.store.holders().is_some()
    }

    /// Bytes the holder index holds (0 when not kept).
    fn prefix_index_heap_bytes(&self) -> usize {
        self.store.holders_heap_bytes()
    }

    /// Apply Python events to `source`'s replica; events before a failing one stay applied.
    fn apply_events(
        &mut self,
        py: Python<'_>,
        source: &str,
        events: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let classes = classes(py)?;
        let mut decoded = Vec::new();
        for (index, event) in events.try_iter()?.enumerate() {
            decoded.push(event_from_py(py, classes, &event?, index)?);
        }
        self.store
            .apply_events(source, &decoded)
            .map_err(|error| consistency_error(py, error))
    }

    fn mark_diverged(&mut self, source: &str, reason: &str) {
        self.store.replica_mut(source).mark_diverged(reason);
    }

    fn clear(&mut self, source: &str) {
        self.store.clear(source);
    }

    fn diverged(&self, source: &str) -> PyResult<Option<String>> {
        Ok(self.replica(source)?.diverged.clone())
    }

    fn block_count(&self, source: &str) -> PyResult<usize> {
        Ok(self.replica(source)?.blocks.len())
    }

    fn tombstone_count(&self, source: &str) -> PyResult<u64> {
        Ok(self.replica(source)?.blocks.tombstone_count())
    }

    fn block_size(&self, source: &str) -> PyResult<Option<u32>> {
        Ok(self.replica(source)?.blocks.block_size())
    }

    /// Every lower tier `source` has reported (the GPU is the block table), in the order first
    /// reported, with the blocks it holds: [(medium, blocks)].
    fn tiers(&self, source: &str) -> PyResult<Vec<(String, usize)>> {
        Ok(self
            .replica(source)?
            .tiers
            .tiers()
            .iter()
            .map(|tier| (tier.medium.to_string(), tier.blocks.len()))
            .collect())
    }

    /// The block hashes `source`'s lower tier `medium` holds, sorted (empty for a medium it
    /// never reported).
    fn tier_blocks(&self, source: &str, medium: &str) -> PyResult<Vec<i64>> {
        let mut hashes: Vec<i64> = self
            .replica(source)?
            .tiers
            .get(medium)
            .map(|tier| tier.blocks.iter().copied().collect())
            .unwrap_or_default();
        hashes.sort_unstable();
        Ok(hashes)
    }

    /// Whether `source`'s lower tier `medium` holds `block_hash`.
    fn tier_holds(&self, source: &str, medium: &str, block_hash: i64) -> PyResult<bool> {
        Ok(self
            .replica(source)?
            .tiers
            .get(medium)
            .is_some_and(|tier| tier.blocks.contains(&block_hash)))
    }

    fn residency(&self, source: &str, block_hash: i64) -> PyResult<Option<bool>> {
        Ok(self.replica(source)?.blocks.residency(block_hash))
    }

    /// (parent hash, token ids, SWA-resident) of one block, None when not held; the token ids
    /// are None when the store keeps none.
    #[allow(clippy::type_complexity)]
    fn block<'py>(
        &self,
        py: Python<'py>,
        source: &str,
        block_hash: i64,
    ) -> PyResult<Option<(Option<i64>, Option<Bound<'py, PyTuple>>, bool)>> {
        let Some(block) = self.replica(source)?.blocks.block(block_hash) else {
            return Ok(None);
        };
        let tokens = block
            .token_ids
            .map(|ids| PyTuple::new(py, ids))
            .transpose()?;
        Ok(Some((block.parent, tokens, block.swa_resident)))
    }

    /// Every block as (hash, parent hash, token ids, SWA-resident), in slot order; the token
    /// ids are None when the store keeps none.
    #[allow(clippy::type_complexity)]
    fn blocks<'py>(
        &self,
        py: Python<'py>,
        source: &str,
    ) -> PyResult<Vec<(i64, Option<i64>, Option<Bound<'py, PyTuple>>, bool)>> {
        self.replica(source)?
            .blocks
            .blocks()
            .map(|block| {
                let tokens = block
                    .token_ids
                    .map(|ids| PyTuple::new(py, ids))
                    .transpose()?;
                Ok((block.block_hash, block.parent, tokens, block.swa_resident))
            })
            .collect()
    }

    fn digest_value(&self, source: &str) -> PyResult<String> {
        Ok(self.replica(source)?.digest().hexdigest())
    }

    fn state_digest(&self, source: &str) -> PyResult<Option<String>> {
        Ok(self.replica(source)?.state_digest())
    }

    /// Bytes the block tables hold (capacity).
    fn heap_bytes(&self) -> usize {
        self.store.heap_bytes()
    }

    /// Every replica as bytes (see `crate::replica::snapshot`).
    fn snapshot<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let store = &self.store;
        let bytes = py.detach(|| replica::to_bytes(store));
        PyBytes::new(py, &bytes)
    }

    /// Replace every replica with the ones `snapshot` wrote; nothing changes when `data` is bad.
    /// A store that keeps no token ids drops the snapshot's; one that keeps them refuses a
    /// snapshot that holds none (`ReplicaSnapshotError`).
    fn load(&mut self, py: Python<'_>, data: &[u8]) -> PyResult<()> {
        let keep_tokens = self.store.keeps_tokens();
        let mut loaded = py
            .detach(|| replica::from_bytes_keeping(data, keep_tokens))
            .map_err(|error| snapshot_error(py, error))?;
        // keep a holder index exactly when this store kept one: the snapshot's (version 4 on)
        // or, when it holds none, one built from the blocks
        if self.store.holders().is_some() {
            py.detach(|| loaded.enable_holders());
        } else {
            loaded.disable_holders();
        }
        self.store = loaded;
        self.names.clear();
        Ok(())
    }

    /// Per source, (held tokens, SWA-usable tokens) of `token_ids` in namespace `extra_key`:
    /// (None, None) when the source's state is unknown, usable None when the source does not
    /// report tombstones; sources holding none of it are left out.
    #[pyo3(signature = (token_ids, extra_key=None))]
    #[allow(clippy::type_complexity)]
    fn match_prefix(
        &mut self,
        token_ids: &Bound<'_, PyAny>,
        extra_key: Option<&str>,
    ) -> PyResult<Vec<(String, Option<u64>, Option<u64>)>> {
        let tokens = prompt_tokens(token_ids)?;
        let prior = namespace_prior(extra_key);
        let answers = self.store.match_prefix(&prior, &tokens);
        Ok(answers
            .into_iter()
            .map(|(id, answer)| {
                let name = self.store.by_id(id).name.clone();
                let (held, usable) = held_usable(answer);
                (name, held, usable)
            })
            .collect())
    }

    /// `match_prefix` as a dict: source -> an instance of `result_type` (an immutable class whose
    /// fields are exactly `full_tokens` and `swa_tokens`, like `consumers.PrefixMatch`), made
    /// without a Python call per source; sources with equal answers share one instance.
    #[pyo3(signature = (token_ids, extra_key, result_type))]
    fn match_into<'py>(
        &mut self,
        py: Python<'py>,
        token_ids: &Bound<'py, PyAny>,
        extra_key: Option<&str>,
        result_type: &Bound<'py, PyType>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let tokens = prompt_tokens(token_ids)?;
        let prior = namespace_prior(extra_key);
        let answers = self.store.match_prefix(&prior, &tokens);
        self.answers_into(py, answers, result_type)
    }

    /// `match_into` for a prompt given as the block hashes of its pages of `page_size` tokens
    /// (a namespace is in the hashes already), walked without hashing; sources of another page
    /// size are left out.
    #[pyo3(signature = (block_hashes, page_size, result_type))]
    fn match_hashes_into<'py>(
        &mut self,
        py: Python<'py>,
        block_hashes: Vec<i64>,
        page_size: u32,
        result_type: &Bound<'py, PyType>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let answers = self.store.match_hashes(positive(page_size)?, &block_hashes);
        self.answers_into(py, answers, result_type)
    }

    /// `match_into`'s walk, answered as the routing API's per-source answers: source -> a dict
    /// `{"cached_tokens", "usable_tokens", "state", "last_heard_s", "tiers"}`, built here with no
    /// Python code per source (`answer_dicts`).
    #[pyo3(signature = (token_ids, extra_key, now, heard_at, known_state, unknown_state, leave_out))]
    #[allow(clippy::too_many_arguments)]
    fn match_answers<'py>(
        &mut self,
        py: Python<'py>,
        token_ids: &Bound<'py, PyAny>,
        extra_key: Option<&str>,
        now: f64,
        heard_at: &Bound<'py, PyDict>,
        known_state: &Bound<'py, PyString>,
        unknown_state: &Bound<'py, PyString>,
        leave_out: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let (answers, hits) = self.walk_tokens(token_ids, extra_key)?;
        let states = (known_state, unknown_state);
        self.answer_dicts(py, answers, &hits, now, heard_at, states, leave_out)
    }

    /// `match_answers` for a prompt given as the block hashes of its pages of `page_size`
    /// tokens (`match_hashes_into`'s walk); sources of another page size are left out.
    #[pyo3(signature = (block_hashes, page_size, now, heard_at, known_state, unknown_state, leave_out))]
    #[allow(clippy::too_many_arguments)]
    fn match_hashes_answers<'py>(
        &mut self,
        py: Python<'py>,
        block_hashes: Vec<i64>,
        page_size: u32,
        now: f64,
        heard_at: &Bound<'py, PyDict>,
        known_state: &Bound<'py, PyString>,
        unknown_state: &Bound<'py, PyString>,
        leave_out: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let (answers, hits) = self.walk_hashes(&block_hashes, page_size)?;
        let states = (known_state, unknown_state);
        self.answer_dicts(py, answers, &hits, now, heard_at, states, leave_out)
    }

    /// `match_answers` packed as rows (`super::answer_rows`): (names, media, rows, tier
    /// entries, row index), with `known` and `unknown` as the state codes of the rows.
    #[pyo3(signature = (token_ids, extra_key, now, heard_at, known, unknown, leave_out))]
    #[allow(clippy::too_many_arguments)]
    fn match_rows<'py>(
        &mut self,
        py: Python<'py>,
        token_ids: &Bound<'py, PyAny>,
        extra_key: Option<&str>,
        now: f64,
        heard_at: &Bound<'py, PyDict>,
        known: u8,
        unknown: u8,
        leave_out: &Bound<'py, PyAny>,
    ) -> PyResult<PackedRows<'py>> {
        let (answers, hits) = self.walk_tokens(token_ids, extra_key)?;
        let states = StateCodes { known, unknown };
        self.rows_of(py, answers, &hits, now, heard_at, states, leave_out)
    }

    /// `match_rows` for a prompt given as the block hashes of its pages of `page_size` tokens.
    #[pyo3(signature = (block_hashes, page_size, now, heard_at, known, unknown, leave_out))]
    #[allow(clippy::too_many_arguments)]
    fn match_hashes_rows<'py>(
        &mut self,
        py: Python<'py>,
        block_hashes: Vec<i64>,
        page_size: u32,
        now: f64,
        heard_at: &Bound<'py, PyDict>,
        known: u8,
        unknown: u8,
        leave_out: &Bound<'py, PyAny>,
    ) -> PyResult<PackedRows<'py>> {
        let (answers, hits) = self.walk_hashes(&block_hashes, page_size)?;
        let states = StateCodes { known, unknown };
        self.rows_of(py, answers, &hits, now, heard_at, states, leave_out)
    }
}

impl PyReplicaStore {
    /// The walk of a prompt of `token_ids` in namespace `extra_key`, with its lower tiers' hits.
    fn walk_tokens(
        &mut self,
        token_ids: &Bound<'_, PyAny>,
        extra_key: Option<&str>,
    ) -> PyResult<(Vec<(u32, Answer)>, TierHits)> {
        let tokens = prompt_tokens(token_ids)?;
        let prior = namespace_prior(extra_key);
        Ok(self.store.match_prefix_tiers(&prior, &tokens))
    }

    /// The walk of a prompt given as the block hashes of its pages of `page_size` tokens.
    fn walk_hashes(
        &mut self,
        block_hashes: &[i64],
        page_size: u32,
    ) -> PyResult<(Vec<(u32, Answer)>, TierHits)> {
        Ok(self
            .store
            .match_hashes_tiers(positive(page_size)?, block_hashes))
    }

    /// The packed rows of a walk's answers (`super::answer_rows::pack`), as Python values.
    #[allow(clippy::too_many_arguments)]
    fn rows_of<'py>(
        &mut self,
        py: Python<'py>,
        answers: Vec<(u32, Answer)>,
        hits: &TierHits,
        now: f64,
        heard_at: &Bound<'py, PyDict>,
        states: StateCodes,
        leave_out: &Bound<'py, PyAny>,
    ) -> PyResult<PackedRows<'py>> {
        self.cache_names(py);
        let packed = answer_rows::pack(
            py,
            &self.store,
            &self.names,
            answers,
            hits,
            now,
            heard_at,
            states,
            leave_out,
        )?;
        packed_rows(py, packed)
    }

    /// The routing API's per-source answers to a walk: source -> `{"cached_tokens",
    /// "usable_tokens", "state", "last_heard_s", "tiers"}`. `state` is the first of `states`
    /// (known) for a source that holds part of the prompt, the second (unknown) for one whose
    /// state is unknown; `last_heard_s` is `now` minus the source's time in `heard_at` (0 when
    /// absent). `tiers` is `{medium: {"cached_tokens", "usable_tokens"}}`: `"GPU"` (the
    /// top-level lengths), then every lower tier the source reported, its cached tokens
    /// continuing after the GPU hit (`hits`), its usable tokens None; every length None for a
    /// source whose state is unknown. Sources in `leave_out` (the caller answers them itself,
    /// e.g. offline ones) are left out.
    #[allow(clippy::too_many_arguments)]
    fn answer_dicts<'py>(
        &mut self,
        py: Python<'py>,
        answers: Vec<(u32, Answer)>,
        hits: &TierHits,
        now: f64,
        heard_at: &Bound<'py, PyDict>,
        states: (&Bound<'py, PyString>, &Bound<'py, PyString>),
        leave_out: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.cache_names(py);
        let result = PyDict::new(py);
        // Sources with no lower tier and equal lengths share one `tiers` dict (never changed
        // after it is built): a fleet mostly holds a prompt to a few common lengths.
        const SHARED: usize = 16;
        let mut made: Vec<(Answer, Bound<'py, PyDict>)> = Vec::new();
        let store = &self.store;
        answer_rows::visit_answers(
            py,
            &self.names,
            answers,
            hits,
            now,
            heard_at,
            leave_out,
            |visit| {
                let answer = visit.answer;
                let (held, usable) = held_usable(answer);
                let entry = PyDict::new(py);
                entry.set_item(intern!(py, "cached_tokens"), held)?;
                entry.set_item(intern!(py, "usable_tokens"), usable)?;
                let state = if held.is_some() { states.0 } else { states.1 };
                entry.set_item(intern!(py, "state"), state)?;
                entry.set_item(intern!(py, "last_heard_s"), visit.heard_s)?;
                let tiers = &store.by_id(visit.id).tiers;
                let tier_dict = if tiers.has_media() {
                    tier_answers(py, answer, tiers, visit.hit)?
                } else if let Some((_, shared)) = made.iter().find(|(seen, _)| *seen == answer) {
                    shared.clone()
                } else {
                    let fresh = tier_answers(py, answer, tiers, None)?;
                    if made.len() < SHARED {
                        made.push((answer, fresh.clone()));
                    }
                    fresh
                };
                entry.set_item(intern!(py, "tiers"), tier_dict)?;
                result.set_item(visit.name, entry)
            },
        )?;
        Ok(result)
    }

    /// Keep every source's name as a Python string (ids index `names`).
    fn cache_names(&mut self, py: Python<'_>) {
        let replicas = self.store.replicas();
        while self.names.len() < replicas.len() {
            let name = &replicas[self.names.len()].name;
            self.names.push(PyString::new(py, name).unbind());
        }
    }

    /// Answers as a dict: source -> an instance of `result_type`, made without a Python call per
    /// source; sources with equal answers share one instance.
    fn answers_into<'py>(
        &mut self,
        py: Python<'py>,
        answers: Vec<(u32, Answer)>,
        result_type: &Bound<'py, PyType>,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.cache_names(py);
        let result = PyDict::new(py);
        // Equal answers share one instance (the result type is immutable): a fleet mostly holds
        // a prompt to a few common lengths. Only the first few distinct answers are remembered,
        // which bounds the search.
        const SHARED: usize = 16;
        let mut made: Vec<(Answer, Bound<'py, PyAny>)> = Vec::new();
        for (id, answer) in answers {
            let name = self.names[id as usize].bind(py);
            if let Some((_, value)) = made.iter().find(|(seen, _)| *seen == answer) {
                result.set_item(name, value)?;
                continue;
            }
            let (held, usable) = held_usable(answer);
            let value = prefix_match(py, result_type, held, usable)?;
            result.set_item(name, &value)?;
            if made.len() < SHARED {
                made.push((answer, value));
            }
        }
        Ok(result)
    }
}

/// One tier's answer: `{"cached_tokens": held, "usable_tokens": usable}`.
fn tier_entry<'py>(
    py: Python<'py>,
    held: Option<u64>,
    usable: Option<u64>,
) -> PyResult<Bound<'py, PyDict>> {
    let entry = PyDict::new(py);
    entry.set_item(intern!(py, "cached_tokens"), held)?;
    entry.set_item(intern!(py, "usable_tokens"), usable)?;
    Ok(entry)
}

/// A source's `tiers` answer: `"GPU"` as `answer`, then each lower tier of `tiers` with its
/// tokens in `hit` (0 when absent; None for every tier when `answer` is unknown).
fn tier_answers<'py>(
    py: Python<'py>,
    answer: Answer,
    tiers: &Tiers,
    hit: Option<&[u64]>,
) -> PyResult<Bound<'py, PyDict>> {
    let (held, usable) = held_usable(answer);
    let result = PyDict::new(py);
    result.set_item(intern!(py, "GPU"), tier_entry(py, held, usable)?)?;
    for (at, tier) in tiers.tiers().iter().enumerate() {
        let tokens = answer_rows::lower_tier_tokens(held, hit, at);
        result.set_item(&*tier.medium, tier_entry(py, tokens, None)?)?;
    }
    Ok(result)
}

/// `page_size` of a prompt given as block hashes: ValueError for 0.
fn positive(page_size: u32) -> PyResult<u32> {
    if page_size == 0 {
        return Err(PyValueError::new_err(
            "page_size: expected a positive int, got 0",
        ));
    }
    Ok(page_size)
}

/// (names, media, rows, tier entries, row index) as Python values.
type PackedRows<'py> = (
    Vec<Bound<'py, PyString>>,
    Vec<String>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
);

fn packed_rows<'py>(py: Python<'py>, packed: PackedAnswers<'py>) -> PyResult<PackedRows<'py>> {
    Ok((
        packed.names,
        packed.media,
        PyBytes::new(py, &packed.rows),
        PyBytes::new(py, &packed.tiers),
        PyBytes::new(py, &packed.index),
    ))
}

/// `ChurnCounts` as (batches, {event type name: its count}, `[(medium, reason, blocks
/// removed)]`): keyed by the declared names, so a new event type changes no Python signature.
impl<'py> IntoPyObject<'py> for ChurnCounts {
    type Target = PyTuple;
    type Output = Bound<'py, PyTuple>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let by_type = PyDict::new(py);
        for (kind, count) in EventType::ALL.into_iter().zip(self.by_type) {
            by_type.set_item(kind.name(), count)?;
        }
        PyTuple::new(
            py,
            [
                self.batches.into_bound_py_any(py)?,
                by_type.into_any(),
                self.removed_by.into_bound_py_any(py)?,
            ],
        )
    }
}

/// The churn of one decoded record without making its events: (1 batch, blocks of each event
/// type, removals by tier and reason).
#[pyfunction]
fn wire_churn(wire: &Bound<'_, WireBatch>) -> ChurnCounts {
    Churn::of_batch(&wire.get().batch.events).counts()
}

/// (segments walked, leading segments usable) of a path of (tokens, resident) segments.
#[pyfunction]
fn swa_usable_prefix(segments: Vec<(u64, bool)>, sliding_window_size: u64) -> (usize, usize) {
    swa_rule::usable_prefix(&segments, sliding_window_size)
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<PyReplicaStore>()?;
    module.add("ANSWER_ROW_FORMAT", answer_rows::ROW_FORMAT)?;
    module.add("ANSWER_TIER_FORMAT", answer_rows::TIER_FORMAT)?;
    module.add("ANSWER_INDEX_FORMAT", answer_rows::INDEX_FORMAT)?;
    module.add_function(wrap_pyfunction!(swa_usable_prefix, module)?)?;
    module.add_function(wrap_pyfunction!(wire_churn, module)?)?;
    Ok(())
}
