//! Writing a `Batch` as one record.
//!
//! Version 2 compacts: a run of consecutive `Stored` events in which each one's parent is the
//! previous one's last page, with the same `block_size`, `lora_id` and `medium`, is written as
//! one `BlockStored` listing every page's hash and tokens, whose parent is the first page's
//! parent. Version 1 writes every event as it is. The bytes are exactly `orjson.dumps` of the
//! reference codec's JSON object (keys in the same order, doubles and strings written alike).

use super::error::{Error as EncodeError, Reason};
use super::meta::Meta;
use super::scan::Got;
use super::text::{write_f64, write_i64, write_str, write_u64};
use super::{REASON_VERSION, SUPPORTED_VERSIONS};
use crate::events::{Batch, Event, Stored};

/// A field of a batch that would not decode again, named as a decode error would name it.
fn refuse(field: impl Into<String>, reason: Reason) -> EncodeError {
    EncodeError::new(field, reason)
}

/// The record of `batch`, written as its header's version says.
pub fn encode(batch: &Batch) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::new();
    encode_into(batch, &mut out)?;
    Ok(out)
}

/// Append the record of `batch` to `out` (which is left as it was on error).
pub fn encode_into(batch: &Batch, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    check(batch)?;
    let header = &batch.header;
    out.reserve(size_hint(batch));
    out.extend_from_slice(b"{\"v\":");
    write_u64(out, u64::from(header.version));
    out.extend_from_slice(b",\"source\":");
    write_str(out, &header.source);
    out.extend_from_slice(b",\"epoch\":");
    write_str(out, &header.epoch);
    out.extend_from_slice(b",\"seq\":");
    write_u64(out, header.seq);
    out.extend_from_slice(b",\"ts\":");
    write_f64(out, header.ts);
    out.extend_from_slice(b",\"events\":[");
    let events = &batch.events;
    let mut at = 0;
    while at < events.len() {
        if at > 0 {
            out.push(b',');
        }
        let run = if header.version >= 2 {
            chain_length(&events[at..])
        } else {
            1
        };
        if run == 1 {
            write_event(out, &events[at]);
        } else {
            write_stored(out, &events[at..at + run]);
        }
        at += run;
    }
    out.extend_from_slice(b"],\"digest\":");
    match &header.digest {
        Some(digest) => write_str(out, digest),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"meta\":");
    match &header.meta_json {
        Some(meta) => out.extend_from_slice(meta.as_bytes()),
        None => out.extend_from_slice(b"null"),
    }
    out.push(b'}');
    Ok(())
}

/// The refusals: what would not decode (or not decode to the same batch).
fn check(batch: &Batch) -> Result<(), EncodeError> {
    let header = &batch.header;
    if !SUPPORTED_VERSIONS.contains(&header.version) {
        return Err(refuse(
            "v",
            Reason::UnsupportedVersion(i128::from(header.version)),
        ));
    }
    if !header.ts.is_finite() {
        return Err(refuse("ts", Reason::NotFinite(header.ts)));
    }
    if let Some(meta) = &header.meta_json {
        Meta::from_json(meta)?;
    }
    for (index, event) in batch.events.iter().enumerate() {
        let hashes = match event {
            Event::Stored(stored) => {
                if stored.block_size == 0 {
                    return Err(refuse(
                        format!("events[{index}].block_size"),
                        Reason::Expected {
                            expected: "a positive int",
                            got: Got::Int(0),
                        },
                    ));
                }
                let expected = stored.block_size as usize * stored.hashes.len();
                if stored.tokens.len() != expected {
                    return Err(refuse(
                        format!("events[{index}].token_ids"),
                        Reason::TokenCount {
                            tokens: stored.tokens.len(),
                            pages: stored.hashes.len(),
                            block_size: i128::from(stored.block_size),
                        },
                    ));
                }
                &stored.hashes
            }
            Event::Removed { reason, .. }
                if reason.is_some() && header.version < REASON_VERSION =>
            {
                return Err(refuse(
                    format!("events[{index}].reason"),
                    Reason::ReasonNeedsVersion {
                        version: header.version,
                    },
                ));
            }
            Event::Removed { hashes, .. }
            | Event::SwaEvicted { hashes }
            | Event::SwaRestored { hashes } => hashes,
            Event::Cleared => continue,
        };
        if hashes.is_empty() {
            return Err(refuse(
                format!("events[{index}].block_hashes"),
                Reason::NoBlockHashes,
            ));
        }
    }
    Ok(())
}

/// How many events from the start of `events` one wire event carries: the chain of `Stored`
/// events that compaction joins (1 for any other event).
fn chain_length(events: &[Event]) -> usize {
    let Some(Event::Stored(head)) = events.first() else {
        return 1;
    };
    let mut last = head.hashes.last().copied();
    let mut length = 1;
    for event in &events[1..] {
        let Event::Stored(next) = event else { break };
        let joins = last.is_some()
            && next.parent == last
            && next.block_size == head.block_size
            && next.lora_id == head.lora_id
            && next.medium == head.medium;
        if !joins {
            break;
        }
        last = next.hashes.last().copied();
        length += 1;
    }
    length
}

fn stored_of(event: &Event) -> Option<&Stored> {
    match event {
        Event::Stored(stored) => Some(stored),
        _ => None,
    }
}

fn write_hashes(out: &mut Vec<u8>, hashes: &[i64], first: &mut bool) {
    for &hash in hashes {
        if !std::mem::take(first) {
            out.push(b',');
        }
        write_i64(out, hash);
    }
}

/// One `BlockStored` for a chain of `Stored` events (as `chain_length` found it).
fn write_stored(out: &mut Vec<u8>, chain: &[Event]) {
    let Some(head) = chain.first().and_then(stored_of) else {
        return;
    };
    out.extend_from_slice(b"{\"type\":\"BlockStored\",\"block_hashes\":[");
    let mut first = true;
    for stored in chain.iter().filter_map(stored_of) {
        write_hashes(out, &stored.hashes, &mut first);
    }
    out.extend_from_slice(b"],\"parent_block_hash\":");
    write_optional_i64(out, head.parent);
    out.extend_from_slice(b",\"token_ids\":[");
    let mut first = true;
    for stored in chain.iter().filter_map(stored_of) {
        for &token in &stored.tokens {
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
            write_u64(out, u64::from(token));
        }
    }
    out.extend_from_slice(b"],\"block_size\":");
    write_u64(out, u64::from(head.block_size));
    out.extend_from_slice(b",\"lora_id\":");
    write_optional_i64(out, head.lora_id);
    out.extend_from_slice(b",\"medium\":");
    write_optional_str(out, head.medium.as_deref());
    out.push(b'}');
}

fn write_optional_i64(out: &mut Vec<u8>, value: Option<i64>) {
    match value {
        Some(value) => write_i64(out, value),
        None => out.extend_from_slice(b"null"),
    }
}

fn write_optional_str(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        Some(text) => write_str(out, text),
        None => out.extend_from_slice(b"null"),
    }
}

/// One event as it is.
fn write_event(out: &mut Vec<u8>, event: &Event) {
    let mut removal_reason = None;
    let (name, hashes, medium): (&[u8], &[i64], Option<Option<&str>>) = match event {
        Event::Removed {
            hashes,
            medium,
            reason,
        } => {
            removal_reason = *reason;
            (b"BlockRemoved", hashes, Some(medium.as_deref()))
        }
        Event::SwaEvicted { hashes } => (b"BlockSWAEvicted", hashes, None),
        Event::SwaRestored { hashes } => (b"BlockSWARestored", hashes, None),
        Event::Cleared => {
            out.extend_from_slice(b"{\"type\":\"AllBlocksCleared\"}");
            return;
        }
        Event::Stored(_) => {
            write_stored(out, std::slice::from_ref(event));
            return;
        }
    };
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(name);
    out.extend_from_slice(b"\",\"block_hashes\":[");
    write_hashes(out, hashes, &mut true);
    out.push(b']');
    if let Some(medium) = medium {
        out.extend_from_slice(b",\"medium\":");
        write_optional_str(out, medium);
    }
    if let Some(reason) = removal_reason {
        out.extend_from_slice(b",\"reason\":");
        write_str(out, reason.name());
    }
    out.push(b'}');
}

/// A generous guess of the record's size, so the buffer grows at most once or twice.
fn size_hint(batch: &Batch) -> usize {
    let header = &batch.header;
    let fixed = 160 + header.source.len() + header.epoch.len();
    let meta = header.meta_json.as_ref().map_or(0, String::len);
    let events: usize = batch
        .events
        .iter()
        .map(|event| match event {
            Event::Stored(stored) => 8 + 21 * stored.hashes.len() + 7 * stored.tokens.len(),
            Event::Removed { hashes, .. }
            | Event::SwaEvicted { hashes }
            | Event::SwaRestored { hashes } => 64 + 21 * hashes.len(),
            Event::Cleared => 32,
        })
        .sum();
    fixed + meta + events
}
