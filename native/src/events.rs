//! The event model of the native core: what a batch holds once decoded, and what the encoder
//! writes. It mirrors `cache.events.types` (docs/design.md §4).
//!
//! The `Event` enum and what every event says of itself (`event_type`, `block_hashes`,
//! `shape`, `said_after`) are derived from the table of event types (`crate::event_types`),
//! through each field kind's Rust form (`FieldKind`).
//!
//! A `Stored` may hold several pages (the v2 wire's chain compaction, or vLLM's multi-block
//! form): `hashes[i]` is page i, its parent is `hashes[i - 1]` (the first page's is `parent`),
//! and its tokens are `tokens[i * block_size..(i + 1) * block_size]`, unless the writer withheld
//! every token id (`tokens` empty: pages of `block_size` tokens whose ids are not said, a
//! token-free source, docs/security.md). `Stored::page_tokens` is the one per-page split.

use std::borrow::Cow;
use std::ops::Deref;

use smallvec::SmallVec;

use crate::event_types::{kind, with_event_types, EventType, Field};

/// The block hashes of an event: up to two inline (most events name one or two pages), more on
/// the heap. The same 24 bytes as a `Vec`.
pub type Hashes = SmallVec<[i64; 2]>;

/// The token ids of a `Stored`: up to four inline (one or two pages of size 1 or 2), more on
/// the heap. The same 24 bytes as a `Vec`.
pub type Tokens = SmallVec<[u32; 4]>;

/// Where a block's KV lives (`"GPU"`, `"CPU"`, ...), as the wire names it. The usual names are
/// static strings, so decoding one costs no allocation (a batch holds one per store); any other
/// text is kept as it came.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Medium(Cow<'static, str>);

impl Medium {
    /// `"GPU"`, the medium of nearly every event.
    pub const GPU: Medium = Medium(Cow::Borrowed("GPU"));
    /// `"CPU"`.
    pub const CPU: Medium = Medium(Cow::Borrowed("CPU"));

    /// The medium named `text` (the usual names without allocating).
    pub fn new(text: &str) -> Self {
        Self::usual(text).unwrap_or_else(|| Medium(Cow::Owned(text.to_owned())))
    }

    /// The static medium named `text`, if it is one of the usual names.
    fn usual(text: &str) -> Option<Self> {
        match text {
            "GPU" => Some(Self::GPU),
            "CPU" => Some(Self::CPU),
            _ => None,
        }
    }
}

impl Deref for Medium {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Medium {
    fn from(text: &str) -> Self {
        Medium::new(text)
    }
}

impl From<String> for Medium {
    fn from(text: String) -> Self {
        Self::usual(&text).unwrap_or(Medium(Cow::Owned(text)))
    }
}

/// Why a block left a tier (`BlockRemoved.reason`, wire version 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemovalReason {
    /// The block left the cache.
    Evicted,
    /// The block left this tier and is still held on a lower one.
    Demoted,
}

impl RemovalReason {
    /// Every reason, in the order the wire names them.
    pub const ALL: [RemovalReason; 2] = [RemovalReason::Evicted, RemovalReason::Demoted];

    /// The reason's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            RemovalReason::Evicted => "evicted",
            RemovalReason::Demoted => "demoted",
        }
    }

    /// The reason named `text`, if any.
    pub fn from_name(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|reason| reason.name() == text)
    }
}

/// A field kind's Rust form (`crate::event_types::kind::*`): its value's type, and what a value
/// says of its event.
pub trait FieldKind {
    type Value;

    /// The value as block hashes, if the kind is `HashList`.
    #[inline(always)]
    fn hashes(_: &Self::Value) -> Option<&Hashes> {
        None
    }

    /// Whether the value says something (an optional field is written only then, and only a
    /// said field needs its wire version).
    #[inline(always)]
    fn said(_: &Self::Value) -> bool {
        true
    }

    /// Note what the value says of the event's pages in `shape`.
    #[inline(always)]
    fn shape(_: &Self::Value, _: &mut Shape) {}
}

macro_rules! field_kinds {
    ($($name:ident => $value:ty $({ $($body:tt)* })?;)*) => {$(
        impl FieldKind for kind::$name {
            type Value = $value;
            $($($body)*)?
        }
    )*};
}

field_kinds! {
    BlockSize => u32 {
        fn shape(value: &u32, shape: &mut Shape) {
            shape.block_size = Some(*value);
        }
    };
    TokenList => Tokens {
        fn shape(value: &Tokens, shape: &mut Shape) {
            shape.tokens = Some(value.len());
        }
    };
    HashList => Hashes {
        fn hashes(value: &Hashes) -> Option<&Hashes> {
            Some(value)
        }
        fn shape(value: &Hashes, shape: &mut Shape) {
            shape.pages = Some(value.len());
        }
    };
    OptionalInt => Option<i64> {
        fn said(value: &Option<i64>) -> bool {
            value.is_some()
        }
    };
    OptionalMedium => Option<Medium> {
        fn said(value: &Option<Medium>) -> bool {
            value.is_some()
        }
    };
    OptionalReason => Option<RemovalReason> {
        fn said(value: &Option<RemovalReason>) -> bool {
            value.is_some()
        }
    };
}

/// What an event's fields say of its pages: how many (its hashes), its tokens and its block
/// size, for the kinds it has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    pub pages: Option<usize>,
    pub tokens: Option<usize>,
    pub block_size: Option<u32>,
}

impl Shape {
    /// The (tokens, pages, block size) of an event whose token count is neither its block size
    /// times its pages nor 0 (withheld; `tokens_fit`).
    pub fn wrong_token_count(&self) -> Option<(usize, usize, u32)> {
        let (Some(tokens), Some(block_size)) = (self.tokens, self.block_size) else {
            return None;
        };
        let pages = self.pages.unwrap_or(1);
        (!tokens_fit(tokens, pages, u128::from(block_size))).then_some((tokens, pages, block_size))
    }
}

/// Whether `tokens` token ids fit a store of `pages` pages of `block_size` tokens: exactly
/// `block_size` a page, or none at all (the writer withheld them). The one rule of a store's
/// token count, for the codec and the replica alike.
pub fn tokens_fit(tokens: usize, pages: usize, block_size: u128) -> bool {
    tokens == 0 || tokens as u128 == block_size * pages as u128
}

/// The token ids of each of `pages` pages of `block_size` tokens held in `tokens`: a slice of
/// `block_size` per page, or an empty slice per page when `tokens` is empty (withheld). Always
/// `pages` items, so nothing zipped with it loses a page. `tokens` must fit (`tokens_fit`).
pub fn page_tokens(
    tokens: &[u32],
    block_size: u32,
    pages: usize,
) -> impl ExactSizeIterator<Item = &[u32]> + '_ {
    debug_assert!(tokens_fit(tokens.len(), pages, u128::from(block_size)));
    let size = if tokens.is_empty() {
        0
    } else {
        block_size as usize
    };
    (0..pages).map(move |page| &tokens[page * size..(page + 1) * size])
}

impl Stored {
    /// Whether the writer withheld the token ids of its pages (it has none: a token-free
    /// source's store).
    pub fn withholds_tokens(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Whether its token ids fit its pages (`tokens_fit`).
    pub fn tokens_fit(&self) -> bool {
        tokens_fit(
            self.tokens.len(),
            self.hashes.len(),
            u128::from(self.block_size),
        )
    }

    /// The token ids of each page, one item per block hash (`page_tokens`: empty slices when
    /// withheld). Its tokens must fit (`tokens_fit`).
    pub fn page_tokens(&self) -> impl ExactSizeIterator<Item = &[u32]> + '_ {
        page_tokens(&self.tokens, self.block_size, self.hashes.len())
    }
}

/// The `Event` pattern (or value, with the fields by shorthand) of one row of the table of
/// event types: `event_of!(Variant [Wrap] { fields })`, `[]` for a variant that wraps no struct.
macro_rules! event_of {
    ($variant:ident [] { $($field:ident),* }) => {
        $crate::events::Event::$variant { $($field),* }
    };
    ($variant:ident [$wrap:ident] { $($field:ident),* }) => {
        $crate::events::Event::$variant($crate::events::$wrap { $($field),* })
    };
}
pub(crate) use event_of;

/// The `Event` enum (and the struct a variant wraps) of the table of event types.
macro_rules! declare_events {
    (@enum [$($variants:tt)*]) => {
        /// One state change of a source's tree (its types: `crate::event_types`).
        #[derive(Clone, Debug, PartialEq)]
        pub enum Event {
            $($variants)*
        }
    };
    (@enum [$($variants:tt)*]
        $(#[$doc:meta])* $variant:ident ($wrap:ident) = $name:literal {
            $($(#[$fdoc:meta])* $field:ident: $kind:ident = $wire:literal, $presence:ident since $since:literal;)*
        }
        $($rest:tt)*
    ) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $wrap {
            $($(#[$fdoc])* pub $field: <kind::$kind as FieldKind>::Value,)*
        }
        declare_events!(@enum [$($variants)* $(#[$doc])* $variant($wrap),] $($rest)*);
    };
    (@enum [$($variants:tt)*] $(#[$doc:meta])* $variant:ident = $name:literal {} $($rest:tt)*) => {
        declare_events!(@enum [$($variants)* $(#[$doc])* $variant,] $($rest)*);
    };
    (@enum [$($variants:tt)*]
        $(#[$doc:meta])* $variant:ident = $name:literal {
            $($(#[$fdoc:meta])* $field:ident: $kind:ident = $wire:literal, $presence:ident since $since:literal;)*
        }
        $($rest:tt)*
    ) => {
        declare_events!(@enum [$($variants)*
            $(#[$doc])* $variant {
                $($(#[$fdoc])* $field: <kind::$kind as FieldKind>::Value,)*
            },
        ] $($rest)*);
    };
    ($($rows:tt)*) => {
        declare_events!(@enum [] $($rows)*);
    };
}
with_event_types!(declare_events);

/// What every event can say of itself, derived from the table of event types.
macro_rules! event_methods {
    ($(
        $(#[$doc:meta])*
        $variant:ident $(($wrap:ident))? = $name:literal {
            $($(#[$fdoc:meta])* $field:ident: $kind:ident = $wire:literal, $presence:ident since $since:literal;)*
        }
    )*) => {
        impl Event {
            /// The event's type.
            pub fn event_type(&self) -> EventType {
                match self {
                    $(Event::$variant { .. } => EventType::$variant,)*
                }
            }

            /// The event's block hashes (its `HashList` field), if its type has them.
            pub fn block_hashes(&self) -> Option<&Hashes> {
                match self {
                    $(event_of!($variant [$($wrap)?] { $($field),* }) => {
                        let found: Option<&Hashes> = None;
                        $(let found = found.or(<kind::$kind as FieldKind>::hashes($field));)*
                        found
                    })*
                }
            }

            /// What the event's fields say of its pages.
            pub fn shape(&self) -> Shape {
                let mut shape = Shape::default();
                match self {
                    $(event_of!($variant [$($wrap)?] { $($field),* }) => {
                        $(<kind::$kind as FieldKind>::shape($field, &mut shape);)*
                    })*
                }
                shape
            }

            /// The first field that says something but came after wire version `version`, if
            /// any.
            pub fn said_after(&self, version: u8) -> Option<&'static Field> {
                match self {
                    $(event_of!($variant [$($wrap)?] { $($field),* }) => {
                        $(if $since > version && <kind::$kind as FieldKind>::said($field) {
                            return EventType::$variant.field($wire);
                        })*
                    })*
                }
                None
            }
        }
    };
}
with_event_types!(event_methods);

/// The envelope of one batch (one log record).
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    /// The wire version the batch was read from or will be written as (1, 2 or 3).
    pub version: u8,
    pub source: String,
    pub epoch: String,
    pub seq: u64,
    pub ts: f64,
    pub digest: Option<String>,
    /// The `meta` object as its JSON text (present on the first batch of an epoch).
    pub meta_json: Option<String>,
}

/// One decoded batch.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub header: Header,
    pub events: Vec<Event>,
}

impl Batch {
    /// Whether this batch can open an epoch: seq 0 and `AllBlocksCleared` first.
    pub fn starts_epoch(&self) -> bool {
        self.header.seq == 0 && matches!(self.events.first(), Some(Event::Cleared))
    }
}
