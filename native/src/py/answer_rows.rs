//! The routing API's per-source answers packed as fixed-size rows: the binary reply of
//! `POST /v1/match` (`swa_es.client.packed_answers` frames and reads it).
//!
//! Each distinct answer is one row, `ROW_FORMAT` (Python `struct` notation, little-endian, no
//! padding): cached tokens, usable tokens (-1 for None), seconds since last heard (NaN for
//! None), the state's code and how many lower tiers follow. Each lower tier is one
//! `TIER_FORMAT` entry, in row order: the index of its medium in the reply's media list, its
//! cached and usable tokens (-1 for None). The GPU tier is the row's own lengths and has no
//! entry. Sources whose answers are equal and have no lower tier share a row (a fleet mostly
//! holds a prompt to a few lengths); each source names its row by one `INDEX_FORMAT` entry.
//! Names travel beside them as a list of Python strings (source `i` is `names[i]`).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::replica::{Answer, ReplicaStore, TierHits};

/// One row: cached (i64), usable (i64), last heard seconds (f64), state code (u8), lower tiers
/// (u8).
pub(crate) const ROW_FORMAT: &str = "<qqdBB";
/// One lower tier's entry: medium index (u16), cached (i64), usable (i64).
pub(crate) const TIER_FORMAT: &str = "<Hqq";
/// One source's row index (u32).
pub(crate) const INDEX_FORMAT: &str = "<I";
/// Bytes of one row.
const ROW_BYTES: usize = 8 + 8 + 8 + 1 + 1;
/// The value of a length that is None.
const NONE_LENGTH: i64 = -1;

/// The packed answers of one walk: names, media (lower tiers' names, indexed by tier entries),
/// distinct rows, tier entries and each source's row.
pub(crate) struct PackedAnswers<'py> {
    pub names: Vec<Bound<'py, PyString>>,
    pub media: Vec<String>,
    pub rows: Vec<u8>,
    pub tiers: Vec<u8>,
    pub index: Vec<u8>,
}

/// The state codes of a walk's rows: of a source holding part of the prompt (known), and of one
/// whose state is unknown.
#[derive(Clone, Copy)]
pub(crate) struct StateCodes {
    pub known: u8,
    pub unknown: u8,
}

fn length(value: Option<u64>) -> PyResult<i64> {
    match value {
        None => Ok(NONE_LENGTH),
        Some(tokens) => i64::try_from(tokens)
            .map_err(|_| PyValueError::new_err(format!("a length of {tokens} tokens"))),
    }
}

/// The (held, usable) lengths of an answer (both None when unknown).
pub(crate) fn held_usable(answer: Answer) -> (Option<u64>, Option<u64>) {
    match answer {
        Answer::Unknown => (None, None),
        Answer::Held { tokens, usable } => (Some(tokens), usable),
    }
}

/// The tokens a source's lower tier `at` holds after the GPU hit: its entry in `hit` (0 when
/// absent), None when the source's lengths are not known (`held` None).
pub(crate) fn lower_tier_tokens(held: Option<u64>, hit: Option<&[u64]>, at: usize) -> Option<u64> {
    held.map(|_| hit.and_then(|hit| hit.get(at).copied()).unwrap_or(0))
}

/// One answer of a walk, with what both reply forms (dicts and rows) read beside it.
pub(crate) struct Visit<'a, 'py> {
    pub id: u32,
    pub name: &'a Bound<'py, PyString>,
    pub answer: Answer,
    /// The source's lower tiers' tokens after the GPU hit (None: it has no lower tier hit).
    pub hit: Option<&'a [u64]>,
    /// Seconds since the source was last heard: `now` minus its time in `heard_at` (0 when
    /// absent).
    pub heard_s: f64,
}

/// Visit `answers` (source id order, as the walk gives them) with their lower tiers' hits;
/// `names` maps ids to names; sources in `leave_out` are skipped.
#[allow(clippy::too_many_arguments)]
pub(crate) fn visit_answers<'py>(
    py: Python<'py>,
    names: &[Py<PyString>],
    answers: Vec<(u32, Answer)>,
    hits: &TierHits,
    now: f64,
    heard_at: &Bound<'py, PyDict>,
    leave_out: &Bound<'py, PyAny>,
    mut visit: impl FnMut(Visit<'_, 'py>) -> PyResult<()>,
) -> PyResult<()> {
    let skip = leave_out.len()? > 0;
    let mut hit_at = 0;
    for (id, answer) in answers {
        let name = names[id as usize].bind(py);
        while hits.get(hit_at).is_some_and(|(hit, _)| *hit < id) {
            hit_at += 1;
        }
        if skip && leave_out.contains(name)? {
            continue;
        }
        let hit = hits
            .get(hit_at)
            .filter(|(hit, _)| *hit == id)
            .map(|(_, tokens)| &tokens[..]);
        let heard_s = match heard_at.get_item(name)? {
            Some(at) => now - at.extract::<f64>()?,
            None => 0.0,
        };
        visit(Visit {
            id,
            name,
            answer,
            hit,
            heard_s,
        })?;
    }
    Ok(())
}

/// Pack `answers` as `visit_answers` visits them.
#[allow(clippy::too_many_arguments)]
pub(crate) fn pack<'py>(
    py: Python<'py>,
    store: &ReplicaStore,
    names: &[Py<PyString>],
    answers: Vec<(u32, Answer)>,
    hits: &TierHits,
    now: f64,
    heard_at: &Bound<'py, PyDict>,
    states: StateCodes,
    leave_out: &Bound<'py, PyAny>,
) -> PyResult<PackedAnswers<'py>> {
    let mut packed = PackedAnswers {
        names: Vec::with_capacity(answers.len()),
        media: Vec::new(),
        rows: Vec::new(),
        tiers: Vec::new(),
        index: Vec::with_capacity(answers.len() * 4),
    };
    // The distinct rows without lower tiers seen so far, searched in order: a fleet holds a
    // prompt to a few lengths, and only the first few are remembered, which bounds the search.
    const SHARED: usize = 16;
    let mut shared: Vec<([u8; ROW_BYTES], u32)> = Vec::new();
    visit_answers(
        py,
        names,
        answers,
        hits,
        now,
        heard_at,
        leave_out,
        |visit| {
            let (held, usable) = held_usable(visit.answer);
            let tiers = store.by_id(visit.id).tiers.tiers();
            let tier_count = u8::try_from(tiers.len())
                .map_err(|_| PyValueError::new_err("a source with more than 255 lower tiers"))?;
            let mut row = [0u8; ROW_BYTES];
            row[0..8].copy_from_slice(&length(held)?.to_le_bytes());
            row[8..16].copy_from_slice(&length(usable)?.to_le_bytes());
            row[16..24].copy_from_slice(&visit.heard_s.to_le_bytes());
            row[24] = if held.is_some() {
                states.known
            } else {
                states.unknown
            };
            row[25] = tier_count;
            let next = u32::try_from(packed.rows.len() / ROW_BYTES)
                .map_err(|_| PyValueError::new_err("more than 2**32 rows in one answer"))?;
            let seen = shared.iter().find(|(kept, _)| *kept == row);
            let row_at = match seen {
                Some(&(_, at)) if tiers.is_empty() => at,
                _ => {
                    packed.rows.extend_from_slice(&row);
                    if tiers.is_empty() && shared.len() < SHARED {
                        shared.push((row, next));
                    }
                    next
                }
            };
            packed.index.extend_from_slice(&row_at.to_le_bytes());
            for (at, tier) in tiers.iter().enumerate() {
                let medium: &str = &tier.medium;
                let index = match packed.media.iter().position(|seen| seen == medium) {
                    Some(index) => index,
                    None => {
                        packed.media.push(medium.to_owned());
                        packed.media.len() - 1
                    }
                };
                let index = u16::try_from(index)
                    .map_err(|_| PyValueError::new_err("more than 65535 media in one answer"))?;
                let tokens = lower_tier_tokens(held, visit.hit, at);
                packed.tiers.extend_from_slice(&index.to_le_bytes());
                packed
                    .tiers
                    .extend_from_slice(&length(tokens)?.to_le_bytes());
                packed.tiers.extend_from_slice(&NONE_LENGTH.to_le_bytes());
            }
            packed.names.push(visit.name.clone());
            Ok(())
        },
    )?;
    Ok(packed)
}
