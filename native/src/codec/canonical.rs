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
//! text). Each type's layout comes from the table of event types: `{"type":"Name"`, then each
//! field's key and value in wire order (an optional one may be absent), then `}`.

use super::decode_parts::Scratch;
use super::scan::{Scanner, MAX_DEPTH};
use smallvec::SmallVec;

use crate::event_types::{kind, with_event_types, Presence};
use crate::events::{event_of, Event, FieldKind, Hashes, Medium, RemovalReason, Tokens};

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

/// The fast path's reading of each field kind: its value as the encoder writes it (after its
/// key), when it is one the strict decoder accepts; None otherwise.
trait CanonicalField: FieldKind {
    fn read(scanner: &mut Scanner<'_>, scratch: &mut Scratch) -> Option<Self::Value>;
}

impl CanonicalField for kind::HashList {
    #[inline(always)]
    fn read(scanner: &mut Scanner<'_>, scratch: &mut Scratch) -> Option<Hashes> {
        if !scanner.eat(b"[") {
            return None;
        }
        hash_list(scanner, &mut scratch.hashes)
    }
}

impl CanonicalField for kind::TokenList {
    #[inline(always)]
    fn read(scanner: &mut Scanner<'_>, scratch: &mut Scratch) -> Option<Tokens> {
        if !scanner.eat(b"[") {
            return None;
        }
        token_list(scanner, &mut scratch.tokens)
    }
}

impl CanonicalField for kind::BlockSize {
    #[inline(always)]
    fn read(scanner: &mut Scanner<'_>, _: &mut Scratch) -> Option<u32> {
        scanner.plain_u32().filter(|&n| n > 0)
    }
}

impl CanonicalField for kind::OptionalInt {
    #[inline(always)]
    fn read(scanner: &mut Scanner<'_>, _: &mut Scratch) -> Option<Option<i64>> {
        optional_i64(scanner)
    }
}

impl CanonicalField for kind::OptionalMedium {
    /// `null` or a medium named by a plain ASCII string (the commonest without a copy).
    #[inline(always)]
    fn read(scanner: &mut Scanner<'_>, _: &mut Scratch) -> Option<Option<Medium>> {
        if scanner.eat(b"\"GPU\"") {
            return Some(Some(Medium::GPU));
        }
        match scanner.eat(b"null") {
            true => Some(None),
            false => Some(Some(Medium::new(scanner.plain_ascii_string()?))),
        }
    }
}

impl CanonicalField for kind::OptionalReason {
    /// A reason's name (the encoder writes no null reason).
    #[inline(always)]
    fn read(scanner: &mut Scanner<'_>, _: &mut Scratch) -> Option<Option<RemovalReason>> {
        RemovalReason::from_name(scanner.plain_ascii_string()?).map(Some)
    }
}

/// `text` as a byte array, for `Scanner::eat`.
const fn byte_array<const N: usize>(text: &str) -> [u8; N] {
    let bytes = text.as_bytes();
    assert!(bytes.len() == N);
    let mut out = [0u8; N];
    let mut at = 0;
    while at < N {
        out[at] = bytes[at];
        at += 1;
    }
    out
}

/// The bytes of a constant string (`concat!` of the table's names), as `Scanner::eat` takes
/// them.
macro_rules! literal {
    ($text:expr) => {{
        const TEXT: &str = $text;
        const BYTES: [u8; TEXT.len()] = byte_array(TEXT);
        &BYTES
    }};
}

/// `read_event` from the table of event types: the type by its head (`{"type":"Name"`, the
/// name exact, without escapes), then each field's key and value in wire order (an optional
/// field may be absent), then `}`; the token count must be right.
macro_rules! read_event {
    ($(
        $(#[$doc:meta])*
        $variant:ident $(($wrap:ident))? = $name:literal {
            $($(#[$fdoc:meta])* $field:ident: $kind:ident = $wire:literal, $presence:ident since $since:literal;)*
        }
    )*) => {
        fn read_event(scanner: &mut Scanner<'_>, scratch: &mut Scratch) -> Option<Event> {
            // The event object and one list inside it: two levels the general path would count.
            if scanner.depth() + 2 > MAX_DEPTH {
                return None;
            }
            $(if scanner.eat(literal!(concat!("{\"type\":\"", $name, "\""))) {
                $(let $field = read_field::<kind::$kind, _>(
                    scanner,
                    scratch,
                    literal!(concat!(",\"", $wire, "\":")),
                    Presence::$presence,
                )?;)*
                if !scanner.eat(b"}") {
                    return None;
                }
                let event = event_of!($variant [$($wrap)?] { $($field),* });
                return event.shape().wrong_token_count().is_none().then_some(event);
            })*
            None
        }
    };
}
with_event_types!(read_event);

/// A field's key and value; an optional field's key may be absent (its value then the default,
/// null).
#[inline(always)]
fn read_field<K: CanonicalField, const N: usize>(
    scanner: &mut Scanner<'_>,
    scratch: &mut Scratch,
    key: &[u8; N],
    presence: Presence,
) -> Option<K::Value>
where
    K::Value: Default,
{
    if scanner.eat(key) {
        return K::read(scanner, scratch);
    }
    match presence {
        Presence::Optional => Some(K::Value::default()),
        Presence::Required => None,
    }
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
