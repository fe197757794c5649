//! The keys an event object can have, derived from the table of event types: every field's wire
//! name and `type`, sorted (the reference names the first missing or unknown key in that
//! order), each key's bit in a `Mask`, its kind, and each type's required and optional keys.

use crate::event_types::{str_eq, str_less, EventType, Kind, Presence, TYPE_COUNT};

/// A set of keys: bit i is `EVENT_KEYS[i]`.
pub(super) type Mask = u32;

/// The key that names an event's type.
pub(super) const TYPE_KEY: &str = "type";

/// How many distinct keys there are.
pub(super) const EVENT_KEY_COUNT: usize = count_keys();

/// Every key an event can have, sorted.
pub(super) const EVENT_KEYS: [&str; EVENT_KEY_COUNT] = sorted_keys();

/// The bit of `type`.
pub(super) const TYPE: Mask = 1 << key_index(TYPE_KEY);

/// The kind of each key's value (`None` for `type`).
pub(super) const KEY_KINDS: [Option<Kind>; EVENT_KEY_COUNT] = key_kinds();

/// Each type's keys that must be present (`type` among them), by `EventType::index`.
pub(super) const REQUIRED: [Mask; TYPE_COUNT] = masks(Presence::Required);

/// Each type's keys that may be absent.
pub(super) const OPTIONAL: [Mask; TYPE_COUNT] = masks(Presence::Optional);

const _: () = assert!(EVENT_KEY_COUNT <= Mask::BITS as usize, "widen Mask");

/// The index in `EVENT_KEYS` of `key` (a binary search: the keys are sorted).
#[inline]
pub(super) fn event_key(key: &str) -> Option<usize> {
    EVENT_KEYS.binary_search(&key).ok()
}

/// The index in `EVENT_KEYS` of a key that is one.
pub(super) const fn key_index(key: &str) -> usize {
    let mut index = 0;
    while index < EVENT_KEY_COUNT {
        if str_eq(EVENT_KEYS[index], key) {
            return index;
        }
        index += 1;
    }
    panic!("not an event key")
}

/// `best`, or `name` when it comes after `after` (from the start when None) and before `best`.
const fn better(
    name: &'static str,
    after: Option<&'static str>,
    best: Option<&'static str>,
) -> Option<&'static str> {
    let later = match after {
        Some(after) => str_less(after, name),
        None => true,
    };
    match best {
        Some(best) if !later || !str_less(name, best) => Some(best),
        _ if later => Some(name),
        _ => best,
    }
}

/// The least key after `after` (from the start when None), if any.
const fn next_key(after: Option<&'static str>) -> Option<&'static str> {
    let mut best = better(TYPE_KEY, after, None);
    let mut kind = 0;
    while kind < TYPE_COUNT {
        let fields = EventType::ALL[kind].fields();
        let mut at = 0;
        while at < fields.len() {
            best = better(fields[at].name, after, best);
            at += 1;
        }
        kind += 1;
    }
    best
}

const fn count_keys() -> usize {
    let mut count = 0;
    let mut last = next_key(None);
    while let Some(key) = last {
        count += 1;
        last = next_key(Some(key));
    }
    count
}

const fn sorted_keys() -> [&'static str; EVENT_KEY_COUNT] {
    let mut keys = [""; EVENT_KEY_COUNT];
    let mut last = None;
    let mut index = 0;
    while index < EVENT_KEY_COUNT {
        last = next_key(last);
        keys[index] = match last {
            Some(key) => key,
            None => panic!("counted"),
        };
        index += 1;
    }
    keys
}

const fn key_kinds() -> [Option<Kind>; EVENT_KEY_COUNT] {
    let mut kinds = [None; EVENT_KEY_COUNT];
    let mut kind = 0;
    while kind < TYPE_COUNT {
        let fields = EventType::ALL[kind].fields();
        let mut at = 0;
        while at < fields.len() {
            kinds[key_index(fields[at].name)] = Some(fields[at].kind);
            at += 1;
        }
        kind += 1;
    }
    kinds
}

/// Each type's keys of `presence` (with `type` for `Required`).
const fn masks(presence: Presence) -> [Mask; TYPE_COUNT] {
    let required = matches!(presence, Presence::Required);
    let mut masks = [0; TYPE_COUNT];
    let mut kind = 0;
    while kind < TYPE_COUNT {
        let fields = EventType::ALL[kind].fields();
        let mut mask = if required { TYPE } else { 0 };
        let mut at = 0;
        while at < fields.len() {
            let field_required = matches!(fields[at].presence, Presence::Required);
            if field_required == required {
                mask |= 1 << key_index(fields[at].name);
            }
            at += 1;
        }
        masks[kind] = mask;
        kind += 1;
    }
    masks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keys_are_every_field_and_type_sorted_once() {
        let mut expected: Vec<&str> = EventType::ALL
            .iter()
            .flat_map(|kind| kind.fields().iter().map(|field| field.name))
            .chain([TYPE_KEY])
            .collect();
        expected.sort_unstable();
        expected.dedup();
        assert_eq!(EVENT_KEYS.to_vec(), expected);
        for (index, key) in EVENT_KEYS.iter().enumerate() {
            assert_eq!(event_key(key), Some(index));
            assert_eq!(key_index(key), index);
        }
        for other in ["", "V", "block_hash", "types", "medium "] {
            assert_eq!(event_key(other), None, "{other}");
        }
    }

    #[test]
    fn masks_hold_each_types_fields() {
        for kind in EventType::ALL {
            let (required, optional) = (REQUIRED[kind.index()], OPTIONAL[kind.index()]);
            assert_eq!(required & optional, 0);
            assert_ne!(required & TYPE, 0);
            for field in kind.fields() {
                let bit = 1 << key_index(field.name);
                let mask = match field.presence {
                    Presence::Required => required,
                    Presence::Optional => optional,
                };
                assert_ne!(mask & bit, 0, "{}", field.name);
                assert_eq!(KEY_KINDS[key_index(field.name)], Some(field.kind));
            }
            let count = kind.fields().len() + 1;
            assert_eq!((required | optional).count_ones() as usize, count);
        }
    }
}
