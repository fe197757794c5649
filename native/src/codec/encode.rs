//! Writing a `Batch` as one record.
//!
//! Version 2 compacts: a run of consecutive `Stored` events in which each one's parent is the
//! previous one's last page, with the same `block_size`, `lora_id` and `medium`, and all with
//! token ids or all without (withheld), is written as one `BlockStored` listing every page's
//! hash and tokens, whose parent is the first page's parent. Version 1 writes every event as it is. The bytes are exactly `orjson.dumps` of the
//! reference codec's JSON object (keys in the same order, doubles and strings written alike).
//!
//! An event as it is, its size guess and the refusals are derived from the table of event
//! types (each field by its kind, `super::fields`); joining a chain of stores is `Stored`'s own.

use super::error::{Error as EncodeError, Reason};
use super::fields::{
    write_hashes, write_optional_i64, write_optional_str, write_tokens, WireField,
};
use super::meta::Meta;
use super::scan::Got;
use super::text::{write_f64, write_str, write_u64};
use super::SUPPORTED_VERSIONS;
use crate::event_types::{kind, with_event_types, Presence};
use crate::events::{event_of, Batch, Event, FieldKind, Stored};

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
        let shape = event.shape();
        if shape.block_size == Some(0) {
            return Err(refuse(
                format!("events[{index}].block_size"),
                Reason::Expected {
                    expected: "a positive int",
                    got: Got::Int(0),
                },
            ));
        }
        if let Some((tokens, pages, block_size)) = shape.wrong_token_count() {
            return Err(refuse(
                format!("events[{index}].token_ids"),
                Reason::TokenCount {
                    tokens,
                    pages,
                    block_size: i128::from(block_size),
                },
            ));
        }
        if let Some(field) = event.said_after(header.version) {
            return Err(refuse(
                format!("events[{index}].{}", field.name),
                Reason::NeedsVersion {
                    field,
                    version: header.version,
                },
            ));
        }
        if shape.pages == Some(0) {
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
            && next.medium == head.medium
            && next.withholds_tokens() == head.withholds_tokens();
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
        write_tokens(out, &stored.tokens, &mut first);
    }
    out.extend_from_slice(b"],\"block_size\":");
    write_u64(out, u64::from(head.block_size));
    out.extend_from_slice(b",\"lora_id\":");
    write_optional_i64(out, head.lora_id);
    out.extend_from_slice(b",\"medium\":");
    write_optional_str(out, head.medium.as_deref());
    out.push(b'}');
}

/// One event as it is, and a generous guess of its written size (both from the table of event
/// types: its name, then each field by its kind; an optional field only when it says something).
macro_rules! write_event {
    ($(
        $(#[$doc:meta])*
        $variant:ident $(($wrap:ident))? = $name:literal {
            $($(#[$fdoc:meta])* $field:ident: $kind:ident = $wire:literal, $presence:ident since $since:literal;)*
        }
    )*) => {
        fn write_event(out: &mut Vec<u8>, event: &Event) {
            match event {
                $(event_of!($variant [$($wrap)?] { $($field),* }) => {
                    out.extend_from_slice(concat!("{\"type\":\"", $name, "\"").as_bytes());
                    $(if Presence::$presence == Presence::Required
                        || <kind::$kind as FieldKind>::said($field)
                    {
                        out.extend_from_slice(concat!(",\"", $wire, "\":").as_bytes());
                        <kind::$kind as WireField>::write(out, $field);
                    })*
                    out.push(b'}');
                })*
            }
        }

        fn event_size_guess(event: &Event) -> usize {
            match event {
                $(event_of!($variant [$($wrap)?] { $($field),* }) => {
                    16 + $name.len()
                        $(+ 4 + $wire.len() + <kind::$kind as WireField>::size_guess($field))*
                })*
            }
        }
    };
}
with_event_types!(write_event);

/// A generous guess of the record's size, so the buffer grows at most once or twice.
fn size_hint(batch: &Batch) -> usize {
    let header = &batch.header;
    let fixed = 160 + header.source.len() + header.epoch.len();
    let meta = header.meta_json.as_ref().map_or(0, String::len);
    let events: usize = batch.events.iter().map(event_size_guess).sum();
    fixed + meta + events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Medium;

    /// The chain writer names `Stored`'s fields itself: a chain of one must be the store as the
    /// table of event types writes it.
    #[test]
    fn a_chain_of_one_store_is_written_as_declared() {
        for (parent, lora_id, medium) in [
            (None, None, Some(Medium::GPU)),
            (Some(-3), Some(9), None),
            (Some(4), None, Some(Medium::new("disk \"x\""))),
        ] {
            let store = Event::Stored(Stored {
                hashes: [1, 2].into_iter().collect(),
                parent,
                tokens: [5, 6, 7, 8].into_iter().collect(),
                block_size: 2,
                lora_id,
                medium,
            });
            let (mut chain, mut declared) = (Vec::new(), Vec::new());
            write_stored(&mut chain, std::slice::from_ref(&store));
            write_event(&mut declared, &store);
            assert_eq!(String::from_utf8(chain), String::from_utf8(declared));
        }
    }
}
