//! The decoder's fast paths: a record, or an event object, laid out exactly as the encoder
//! writes it, read straight through without slots.
//!
//! The encoder writes the batch's keys and each event type's keys in one fixed order, without
//! whitespace, with plain integers and (in practice) ASCII strings. `canonical_batch` and
//! `canonical_event` read only that layout, and only when every value is one the strict decoder
//! accepts; at the first byte that differs they give up (the event rewinds to its start) and the
//! caller runs the general scanner, which then also finds any error. So they accept a subset of
//! what the general path accepts and yield the same result for it: no duplicate or unknown keys
//! are possible (the layout names each key once), integers are read by the scanner's `plain_*`
//! readers, which take only plain literals in the field's range (the general path's check), and
//! strings are taken only when they are printable ASCII without escapes (their bytes are their
//! text).

use super::decode::{events_capacity, scan_events, EventType, Scratch};
use super::scan::{Number, Scanner, MAX_DEPTH};
use super::SUPPORTED_VERSIONS;
use smallvec::SmallVec;

use crate::events::{Batch, Event, Hashes, Header, Medium, Stored, Tokens};

/// The whole record if it has the encoder's layout, no `meta` (every batch but an epoch's
/// first) and every event decodes; None otherwise, for the general path to decode it from the
/// start. Events in another layout still go through the slots, as in the general path.
pub(super) fn canonical_batch(data: &[u8]) -> Option<Batch> {
    if !data.starts_with(b"{\"v\":") {
        return None;
    }
    let mut scanner = Scanner::new(data);
    scanner.open_object().ok()?;
    scanner.eat(b"\"v\":");
    let version = u8::try_from(scanner.plain_int()?)
        .ok()
        .filter(|version| SUPPORTED_VERSIONS.contains(version))?;
    if !scanner.eat(b",\"source\":") {
        return None;
    }
    let source = scanner.plain_ascii_string()?.to_string();
    if !scanner.eat(b",\"epoch\":") {
        return None;
    }
    let epoch = scanner.plain_ascii_string()?.to_string();
    if !scanner.eat(b",\"seq\":") {
        return None;
    }
    let seq = u64::try_from(scanner.plain_int()?).ok()?;
    if !scanner.eat(b",\"ts\":") {
        return None;
    }
    let ts = match scanner.number().ok()? {
        Number::Int(number) => number as f64,
        Number::Float(number) => number,
    };
    if !scanner.eat(b",\"events\":[") {
        return None;
    }
    scanner.rewind(scanner.offset() - 1); // scan_events opens the array itself
    let mut events = Vec::with_capacity(events_capacity(data));
    if scan_events(&mut scanner, &mut events, &mut Scratch::default())
        .ok()?
        .is_some()
    {
        return None;
    }
    if !scanner.eat(b",\"digest\":") {
        return None;
    }
    let digest = match scanner.eat(b"null") {
        true => None,
        false => Some(scanner.plain_ascii_string()?.to_string()),
    };
    if !scanner.eat(b",\"meta\":null}") || scanner.finish().is_err() {
        return None;
    }
    let header = Header {
        version,
        source,
        epoch,
        seq,
        ts,
        digest,
        meta_json: None,
    };
    Some(Batch { header, events })
}

/// The event at the cursor (on its `{`) if it has the encoder's layout; None, cursor unmoved,
/// otherwise.
#[inline]
pub(super) fn canonical_event(scanner: &mut Scanner<'_>) -> Option<Event> {
    let start = scanner.offset();
    let event = read_event(scanner);
    if event.is_none() {
        scanner.rewind(start);
    }
    event
}

fn read_event(scanner: &mut Scanner<'_>) -> Option<Event> {
    // The event object and one list inside it: two levels the general path would count.
    if scanner.depth() + 2 > MAX_DEPTH || !scanner.eat(b"{\"type\":") {
        return None;
    }
    let kind = event_type(scanner)?;
    if kind == EventType::Cleared {
        return scanner.eat(b"}").then_some(Event::Cleared);
    }
    if !scanner.eat(b",\"block_hashes\":") {
        return None;
    }
    let hashes: Hashes = int_list(scanner, Scanner::plain_i64)?;
    let event = match kind {
        EventType::Stored => Event::Stored(read_stored_rest(scanner, hashes)?),
        EventType::Removed => {
            if !scanner.eat(b",\"medium\":") {
                return None;
            }
            let medium = optional_medium(scanner)?;
            Event::Removed { hashes, medium }
        }
        EventType::SwaEvicted => Event::SwaEvicted { hashes },
        EventType::SwaRestored => Event::SwaRestored { hashes },
        EventType::Cleared => unreachable!("handled above"),
    };
    scanner.eat(b"}").then_some(event)
}

/// The event type named by the string at the cursor, when it is one of the names exactly
/// (without escapes), the commonest first.
#[inline]
fn event_type(scanner: &mut Scanner<'_>) -> Option<EventType> {
    Some(if scanner.eat(b"\"BlockStored\"") {
        EventType::Stored
    } else if scanner.eat(b"\"BlockSWAEvicted\"") {
        EventType::SwaEvicted
    } else if scanner.eat(b"\"BlockRemoved\"") {
        EventType::Removed
    } else if scanner.eat(b"\"BlockSWARestored\"") {
        EventType::SwaRestored
    } else if scanner.eat(b"\"AllBlocksCleared\"") {
        EventType::Cleared
    } else {
        return None;
    })
}

/// A `BlockStored` after its `hashes`, up to its closing brace.
fn read_stored_rest(scanner: &mut Scanner<'_>, hashes: Hashes) -> Option<Stored> {
    if !scanner.eat(b",\"parent_block_hash\":") {
        return None;
    }
    let parent = optional_i64(scanner)?;
    if !scanner.eat(b",\"token_ids\":") {
        return None;
    }
    let tokens: Tokens = int_list(scanner, Scanner::plain_u32)?;
    if !scanner.eat(b",\"block_size\":") {
        return None;
    }
    let block_size = scanner.plain_u32().filter(|&n| n > 0)?;
    // Both sides are below 2^64: no overflow in u128.
    let expected = u128::from(block_size) * hashes.len() as u128;
    if tokens.len() as u128 != expected || !scanner.eat(b",\"lora_id\":") {
        return None;
    }
    let lora_id = optional_i64(scanner)?;
    if !scanner.eat(b",\"medium\":") {
        return None;
    }
    let medium = optional_medium(scanner)?;
    Some(Stored {
        hashes,
        parent,
        tokens,
        block_size,
        lora_id,
        medium,
    })
}

/// A non-empty `[int,int,...]` without whitespace, every item read by `read`.
#[inline]
fn int_list<'a, A: smallvec::Array>(
    scanner: &mut Scanner<'a>,
    read: impl Fn(&mut Scanner<'a>) -> Option<A::Item>,
) -> Option<SmallVec<A>> {
    if !scanner.eat(b"[") {
        return None;
    }
    let mut out = SmallVec::new();
    loop {
        out.push(read(scanner)?);
        // `read` left the cursor on a `,` or a `]`.
        if scanner.eat(b"]") {
            return Some(out);
        }
        scanner.eat(b",");
    }
}

/// `null`, or an int in int64 followed by `,` or `]` (as every one in the layout is).
fn optional_i64(scanner: &mut Scanner<'_>) -> Option<Option<i64>> {
    if scanner.eat(b"null") {
        return Some(None);
    }
    scanner.plain_i64().map(Some)
}

/// `null`, or a medium named by a plain ASCII string.
fn optional_medium(scanner: &mut Scanner<'_>) -> Option<Option<Medium>> {
    if scanner.eat(b"\"GPU\"") {
        return Some(Some(Medium::GPU));
    }
    if scanner.eat(b"null") {
        return Some(None);
    }
    scanner
        .plain_ascii_string()
        .map(|text| Some(Medium::new(text)))
}
