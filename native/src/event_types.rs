//! The event types, declared once (docs/design.md §4 "Adding an event type").
//!
//! `with_event_types!(callback)` hands the one table below to `callback!`: each event type's
//! Rust variant (and, for `Stored`, the struct it wraps), its name on the wire and in Python,
//! and its fields in wire order, each with its Rust name, its kind, its wire (and Python) name,
//! whether it must be present and the wire version that brought it. Everything that lists the
//! types or their fields is derived from it: the `Event` enum (`crate::events`), `EventType`
//! and its field tables (here), the codec's masks, layouts and writing (`crate::codec`), the
//! Python class binding and conversions (`py`), and the churn counts (`crate::replica::churn`).
//!
//! A field's kind (`kind::*`) says what its value is; each layer says once per kind how it
//! holds it: its Rust type (`crate::events::FieldKind`), its wire form (`crate::codec`'s
//! `fields.rs` and fast path) and its Python form (`py/event_fields.rs`). A new type made of
//! existing kinds needs only its row here (and what it does to a replica,
//! `crate::replica::source`). This module depends on no other.
//!
//! Callbacks match each row as
//! `$(#[$doc:meta])* $variant:ident $(($wrap:ident))? = $name:literal { $($(#[$fdoc:meta])*
//! $field:ident: $kind:ident = $wire:literal, $presence:ident since $since:literal;)* }`.

pub use kind::Kind;

/// Call `$callback!` with the table of event types (see the module's doc for a row's form).
macro_rules! with_event_types {
    ($callback:ident) => {
        $callback! {
            /// One or more chained pages entered the tree.
            Stored(Stored) = "BlockStored" {
                hashes: HashList = "block_hashes", Required since 1;
                parent: OptionalInt = "parent_block_hash", Required since 1;
                tokens: TokenList = "token_ids", Required since 1;
                block_size: BlockSize = "block_size", Required since 1;
                lora_id: OptionalInt = "lora_id", Required since 1;
                medium: OptionalMedium = "medium", Required since 1;
            }
            /// The pages of one node left the tree.
            Removed = "BlockRemoved" {
                hashes: HashList = "block_hashes", Required since 1;
                medium: OptionalMedium = "medium", Required since 1;
                /// Why they left (None: not said; always None below wire version 3).
                reason: OptionalReason = "reason", Optional since 3;
            }
            /// The pages of one node were tombstoned (SWA KV freed, full KV kept).
            SwaEvicted = "BlockSWAEvicted" {
                hashes: HashList = "block_hashes", Required since 1;
            }
            /// The pages of one tombstoned node got SWA KV again.
            SwaRestored = "BlockSWARestored" {
                hashes: HashList = "block_hashes", Required since 1;
            }
            /// Every block of the source was dropped.
            Cleared = "AllBlocksCleared" {}
        }
    };
}
pub(crate) use with_event_types;

/// The kinds of field an event can have, listed in the order the decoder judges an event's
/// fields (the reference's order; the token count right after the hashes).
pub mod kind {
    macro_rules! kinds {
        ($($(#[$doc:meta])* $name:ident;)*) => {
            $(
                $(#[$doc])*
                pub struct $name;
            )*

            /// The kinds as the field tables name them (`kind::*` are the same, as types).
            #[derive(Clone, Copy, Debug, PartialEq, Eq)]
            pub enum Kind {
                $($name,)*
            }

            impl Kind {
                /// Every kind, in judging order.
                pub const ALL: [Kind; [$(Kind::$name),*].len()] = [$(Kind::$name),*];
            }
        };
    }

    kinds! {
        /// A positive block size.
        BlockSize;
        /// Token ids (in [0, 2**32)), `block_size` of them per block hash.
        TokenList;
        /// Block hashes (int64s), at least one.
        HashList;
        /// An int64 (a block hash, an adapter id) or null.
        OptionalInt;
        /// A medium's name or null.
        OptionalMedium;
        /// A removal reason's name or null.
        OptionalReason;
    }
}

/// Whether a field must be present on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    /// Present in every event of its type (null where its kind allows).
    Required,
    /// May be absent (absent means null), and is written only when it says something.
    Optional,
}

/// One field of an event type, as the table declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// Its name on the wire and in Python.
    pub name: &'static str,
    pub kind: Kind,
    pub presence: Presence,
    /// The first wire version that has it.
    pub since: u8,
}

macro_rules! declare_event_types {
    ($(
        $(#[$doc:meta])*
        $variant:ident $(($wrap:ident))? = $name:literal {
            $($(#[$fdoc:meta])* $field:ident: $kind:ident = $wire:literal, $presence:ident since $since:literal;)*
        }
    )*) => {
        /// An event's type (the `type` of its wire object; its Python class).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum EventType {
            $($variant,)*
        }

        /// How many event types there are.
        pub const TYPE_COUNT: usize = [$(EventType::$variant),*].len();

        impl EventType {
            /// Every type, in the table's order (`index` is the position here).
            pub const ALL: [EventType; TYPE_COUNT] = [$(EventType::$variant),*];

            /// The type's name on the wire (its Python class's name).
            pub const fn name(self) -> &'static str {
                match self {
                    $(EventType::$variant => $name,)*
                }
            }

            /// The type named `name`, if any.
            pub fn from_name(name: &str) -> Option<Self> {
                match name {
                    $($name => Some(EventType::$variant),)*
                    _ => None,
                }
            }

            /// The type's fields, in wire order.
            pub const fn fields(self) -> &'static [Field] {
                match self {
                    $(EventType::$variant => &[$(Field {
                        name: $wire,
                        kind: Kind::$kind,
                        presence: Presence::$presence,
                        since: $since,
                    }),*],)*
                }
            }

            /// The type's position in `ALL`.
            pub const fn index(self) -> usize {
                self as usize
            }
        }
    };
}
with_event_types!(declare_event_types);

/// Whether `a` and `b` are the same text (in a constant).
pub(crate) const fn str_eq(a: &str, b: &str) -> bool {
    !str_less(a, b) && !str_less(b, a)
}

/// Whether `a` sorts before `b` (byte-wise, as Python and `str::cmp` sort), in a constant.
pub(crate) const fn str_less(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut at = 0;
    while at < a.len() && at < b.len() {
        if a[at] != b[at] {
            return a[at] < b[at];
        }
        at += 1;
    }
    a.len() < b.len()
}

impl EventType {
    /// The field of this type named `name` on the wire, if any.
    pub fn field(self, name: &str) -> Option<&'static Field> {
        self.fields().iter().find(|field| field.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found_again() {
        for (index, kind) in EventType::ALL.into_iter().enumerate() {
            assert_eq!(kind.index(), index);
            assert_eq!(EventType::from_name(kind.name()), Some(kind));
            let fields = kind.fields();
            for (at, field) in fields.iter().enumerate() {
                assert!(fields[..at].iter().all(|other| other.name != field.name));
                assert!(field.name != "type", "{}: `type` is the tag", kind.name());
            }
        }
        assert_eq!(EventType::from_name("blockstored"), None);
    }

    #[test]
    fn a_wire_name_has_one_kind_across_types() {
        let all: Vec<&Field> = EventType::ALL
            .iter()
            .flat_map(|kind| kind.fields())
            .collect();
        for field in &all {
            for other in &all {
                if field.name == other.name {
                    assert_eq!(field.kind, other.kind, "{}", field.name);
                }
            }
        }
    }
}
