//! The decoder's fast path for events: an event object laid out exactly as the encoder writes
//! it, read straight through without slots (`super::record` has the whole record's).
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

use super::decode_parts::{EventType, Scratch};
use super::scan::{Scanner, MAX_DEPTH};
use smallvec::SmallVec;

use crate::events::{Event, Hashes, Medium, RemovalReason, Stored, Tokens};

/// The event at the cursor (on its `{`) if it has the encoder's layout; None, cursor unmoved,
/// otherwise.
#[inline]
pub(super) fn canonical_event(scanner: &mut Scanner<'_>, scratch: &mut Scratch) -> Option<Event> {
    let start = scanner.offset();
    let event = read_event(scanner, scratch);
    if event.is_none() {
        scanner.rewind(start);
    }
    event
}

/// The events from the cursor (just inside the events array) on, one after another, while they
/// have the encoder's layout, pushed to `events`; how many. The cursor is left after the last
/// one taken (or where it was when none is).
pub(super) fn canonical_events(
    scanner: &mut Scanner<'_>,
    events: &mut Vec<Event>,
    scratch: &mut Scratch,
) -> usize {
    let mut count = 0;
    loop {
        let start = scanner.offset();
        let event = match count {
            0 => read_event(scanner, scratch),
            _ => scanner
                .eat(b",")
                .then(|| read_event(scanner, scratch))
                .flatten(),
        };
        match event {
            Some(event) => events.push(event),
            None => {
                scanner.rewind(start);
                return count;
            }
        }
        count += 1;
    }
}

fn read_event(scanner: &mut Scanner<'_>, scratch: &mut Scratch) -> Option<Event> {
    // The event object and one list inside it: two levels the general path would count.
    if scanner.depth() + 2 > MAX_DEPTH {
        return None;
    }
    let kind = event_head(scanner)?;
    if kind == EventType::Cleared {
        return Some(Event::Cleared);
    }
    let hashes = hash_list(scanner, &mut scratch.hashes)?;
    match kind {
        EventType::Stored => read_stored_rest(scanner, hashes, scratch).map(Event::Stored),
        EventType::Removed => {
            let medium = match scanner.eat(b",\"medium\":\"GPU\"") {
                true => Some(Medium::GPU),
                false => medium_value(scanner)?,
            };
            let reason = removal_reason(scanner)?;
            Some(Event::Removed {
                hashes,
                medium,
                reason,
            })
        }
        EventType::SwaEvicted => scanner.eat(b"}").then_some(Event::SwaEvicted { hashes }),
        EventType::SwaRestored => scanner.eat(b"}").then_some(Event::SwaRestored { hashes }),
        EventType::Cleared => unreachable!("handled above"),
    }
}

/// An event's start up to the `[` of its hashes (a whole `AllBlocksCleared`): its type, when
/// named exactly (without escapes). The commonest first.
#[inline]
fn event_head(scanner: &mut Scanner<'_>) -> Option<EventType> {
    Some(
        if scanner.eat(b"{\"type\":\"BlockStored\",\"block_hashes\":[") {
            EventType::Stored
        } else if scanner.eat(b"{\"type\":\"BlockSWAEvicted\",\"block_hashes\":[") {
            EventType::SwaEvicted
        } else if scanner.eat(b"{\"type\":\"BlockRemoved\",\"block_hashes\":[") {
            EventType::Removed
        } else if scanner.eat(b"{\"type\":\"BlockSWARestored\",\"block_hashes\":[") {
            EventType::SwaRestored
        } else if scanner.eat(b"{\"type\":\"AllBlocksCleared\"}") {
            EventType::Cleared
        } else {
            return None;
        },
    )
}

/// A `BlockStored` after its `hashes`, up to its closing brace.
fn read_stored_rest(
    scanner: &mut Scanner<'_>,
    hashes: Hashes,
    scratch: &mut Scratch,
) -> Option<Stored> {
    if !scanner.eat(b",\"parent_block_hash\":") {
        return None;
    }
    let parent = optional_i64(scanner)?;
    if !scanner.eat(b",\"token_ids\":[") {
        return None;
    }
    let tokens = token_list(scanner, &mut scratch.tokens)?;
    if !scanner.eat(b",\"block_size\":") {
        return None;
    }
    let block_size = scanner.plain_u32().filter(|&n| n > 0)?;
    // Both sides are below 2^64: no overflow in u128.
    let expected = u128::from(block_size) * hashes.len() as u128;
    if tokens.len() as u128 != expected {
        return None;
    }
    // Nearly every store ends the same way.
    let (lora_id, medium) = match scanner.eat(b",\"lora_id\":null,\"medium\":\"GPU\"}") {
        true => (None, Some(Medium::GPU)),
        false => {
            if !scanner.eat(b",\"lora_id\":") {
                return None;
            }
            (optional_i64(scanner)?, last_medium(scanner)?)
        }
    };
    Some(Stored {
        hashes,
        parent,
        tokens,
        block_size,
        lora_id,
        medium,
    })
}

/// The rest of a non-empty `[int,...]` of block hashes without whitespace (the cursor after its
/// `[`). One or two (nearly every event) are put in place; a longer list is read into `spill`
/// (reused) and copied once, with one allocation.
#[inline(always)]
fn hash_list(scanner: &mut Scanner<'_>, spill: &mut Vec<i64>) -> Option<Hashes> {
    let first = scanner.plain_i64()?;
    if scanner.eat(b"]") {
        return Some(Hashes::from_buf_and_len([first, 0], 1));
    }
    scanner.eat(b",");
    let second = scanner.plain_i64()?;
    if scanner.eat(b"]") {
        return Some(Hashes::from_buf([first, second]));
    }
    scanner.eat(b",");
    spilled_list(scanner, spill, [first, second], Scanner::plain_i64)
}

/// `hash_list` for the token ids of a store.
#[inline(always)]
fn token_list(scanner: &mut Scanner<'_>, spill: &mut Vec<u32>) -> Option<Tokens> {
    let first = scanner.plain_u32()?;
    if scanner.eat(b"]") {
        return Some(Tokens::from_buf_and_len([first, 0, 0, 0], 1));
    }
    scanner.eat(b",");
    let second = scanner.plain_u32()?;
    if scanner.eat(b"]") {
        return Some(Tokens::from_buf_and_len([first, second, 0, 0], 2));
    }
    scanner.eat(b",");
    spilled_list(scanner, spill, [first, second], Scanner::plain_u32)
}

/// A list's `head` and its items from the cursor (on one) to its `]`, through `spill`.
fn spilled_list<'a, A>(
    scanner: &mut Scanner<'a>,
    spill: &mut Vec<A::Item>,
    head: [A::Item; 2],
    read: impl Fn(&mut Scanner<'a>) -> Option<A::Item>,
) -> Option<SmallVec<A>>
where
    A: smallvec::Array,
    A::Item: Copy,
{
    spill.clear();
    spill.extend_from_slice(&head);
    more_ints(scanner, spill, read)?;
    Some(SmallVec::from_slice(spill))
}

/// The items of an int list from the cursor (on one) to its `]`, pushed to `out`.
#[inline(always)]
fn more_ints<'a, T>(
    scanner: &mut Scanner<'a>,
    out: &mut Vec<T>,
    read: impl Fn(&mut Scanner<'a>) -> Option<T>,
) -> Option<()> {
    loop {
        out.push(read(scanner)?);
        // `read` left the cursor on a `,` or a `]`.
        if scanner.eat(b"]") {
            return Some(());
        }
        scanner.eat(b",");
    }
}

/// `null`, or an int in int64 followed by `,` or `]` (as every one in the layout is).
#[inline(always)]
fn optional_i64(scanner: &mut Scanner<'_>) -> Option<Option<i64>> {
    if scanner.eat(b"null") {
        return Some(None);
    }
    scanner.plain_i64().map(Some)
}

/// `,"medium":` then `null` or a medium named by a plain ASCII string, and the event's `}`.
fn last_medium(scanner: &mut Scanner<'_>) -> Option<Option<Medium>> {
    let medium = medium_value(scanner)?;
    scanner.eat(b"}").then_some(medium)
}

/// `,"medium":` then `null` or a medium named by a plain ASCII string.
fn medium_value(scanner: &mut Scanner<'_>) -> Option<Option<Medium>> {
    if !scanner.eat(b",\"medium\":") {
        return None;
    }
    match scanner.eat(b"null") {
        true => Some(None),
        false => Some(Some(Medium::new(scanner.plain_ascii_string()?))),
    }
}

/// A removal's end: `}`, or `,"reason":` and a reason's name, then `}`.
fn removal_reason(scanner: &mut Scanner<'_>) -> Option<Option<RemovalReason>> {
    if scanner.eat(b"}") {
        return Some(None);
    }
    if !scanner.eat(b",\"reason\":") {
        return None;
    }
    let reason = RemovalReason::from_name(scanner.plain_ascii_string()?)?;
    scanner.eat(b"}").then_some(Some(reason))
}
