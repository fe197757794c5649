//! The replica's errors, each worded once (in `Display`), as the pure-Python reference words
//! them: `ConsistencyError` (an event that does not fit a source's replica: the source and an
//! `Inconsistency`) and `SnapshotError` (bytes that are not a snapshot this build loads).

use std::fmt;

use crate::events::Medium;

/// An event that does not fit a replica (unknown parent or block, a block stored twice, removing
/// a block that still has children, a block size that differs from the meta's). The replica is
/// unchanged by the failing event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsistencyError {
    pub source: String,
    pub reason: Inconsistency,
}

/// Why an event does not fit. `medium` is the lower tier an event names (`None`: the GPU).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inconsistency {
    /// A store of pages of size 0.
    ZeroBlockSize,
    /// A store that names no block.
    NoBlock,
    /// A store whose token ids are not `pages` whole blocks of `block_size`.
    TokenCount {
        tokens: usize,
        pages: usize,
        block_size: u32,
    },
    /// A store without token ids (the writer withheld them) given to a replica that keeps
    /// token ids (the stream out's, which would have none to send); `block` is its first page.
    TokenIdsWithheld { block: i64 },
    /// A page size other than the meta's.
    DiffersFromMeta {
        block_size: u32,
        medium: Option<Medium>,
        page_size: u32,
    },
    /// A page size other than the blocks' held before.
    DiffersFromEarlier {
        block_size: u32,
        medium: Option<Medium>,
        earlier: u32,
    },
    /// A store under a parent not held.
    UnknownParent(i64),
    /// A store of a block already held.
    AlreadyHeld { block: i64, medium: Option<Medium> },
    /// A store that names one block twice.
    Duplicate,
    /// A store beyond the `limit` of blocks a replica holds.
    Full { limit: usize },
    /// An `event` (its wire name) that names a block not held.
    UnknownBlock {
        event: &'static str,
        block: i64,
        medium: Option<Medium>,
    },
    /// A removal of a block whose children stay.
    HasChildren(i64),
    /// A meta size (`field`: `page_size` or `sliding_window_size`) of 0 or beyond u32.
    MetaSize { field: &'static str, value: u64 },
}

/// The replica's results for an event.
pub type Result<T> = std::result::Result<T, ConsistencyError>;

/// ` on {medium}` after a lower tier's wording; nothing for the GPU.
struct On<'a>(&'a Option<Medium>);

impl fmt::Display for On<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(medium) => write!(f, " on {}", &**medium),
            None => Ok(()),
        }
    }
}

impl fmt::Display for Inconsistency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Inconsistency::ZeroBlockSize => f.write_str("BlockStored has block_size 0"),
            Inconsistency::NoBlock => f.write_str("BlockStored names no block"),
            Inconsistency::TokenCount {
                tokens,
                pages,
                block_size,
            } => write!(
                f,
                "BlockStored has {tokens} token ids for {pages} block(s) of size {block_size}"
            ),
            Inconsistency::TokenIdsWithheld { block } => write!(
                f,
                "BlockStored for block {block} has no token ids (withheld by the writer: a \
                 token-free source), and this replica keeps token ids"
            ),
            Inconsistency::DiffersFromMeta {
                block_size,
                medium,
                page_size,
            } => write!(
                f,
                "block_size {block_size}{} differs from meta.page_size {page_size}",
                On(medium)
            ),
            Inconsistency::DiffersFromEarlier {
                block_size,
                medium,
                earlier,
            } => write!(
                f,
                "block_size {block_size}{} differs from earlier {earlier}",
                On(medium)
            ),
            Inconsistency::UnknownParent(parent) => {
                write!(f, "BlockStored names unknown parent block {parent}")
            }
            Inconsistency::AlreadyHeld { block, medium } => write!(
                f,
                "BlockStored for block {block}, which is already held{}",
                On(medium)
            ),
            Inconsistency::Duplicate => f.write_str("BlockStored names one block twice"),
            Inconsistency::Full { limit } => write!(f, "a replica holds at most {limit} blocks"),
            Inconsistency::UnknownBlock {
                event,
                block,
                medium,
            } => write!(f, "{event} names unknown block {block}{}", On(medium)),
            Inconsistency::HasChildren(block) => {
                write!(
                    f,
                    "BlockRemoved for block {block}, which still has children"
                )
            }
            Inconsistency::MetaSize { field, value } => write!(
                f,
                "meta.{field}: expected a positive int below 2**32, got {value}"
            ),
        }
    }
}

impl fmt::Display for ConsistencyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "source {:?}: {}", self.source, self.reason)
    }
}

impl std::error::Error for ConsistencyError {}

/// Why bytes are not a snapshot this build can load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnapshotError {
    /// Fewer bytes than the smallest snapshot.
    TooShort(usize),
    /// Another file's first bytes.
    NotSnapshot { magic: [u8; 8] },
    /// A layout version other than those this build `reads`.
    UnsupportedVersion { version: u32, reads: &'static [u32] },
    /// The checksum does not match the bytes.
    ChecksumMismatch,
    /// The bytes end inside `what`, which starts at byte `at`.
    Truncated { what: &'static str, at: usize },
    /// A flag byte other than 0 or 1.
    BadFlag { what: &'static str, value: u8 },
    /// A string that is not UTF-8.
    NotUtf8 { what: &'static str },
    /// Bytes after the last part.
    TrailingBytes(usize),
    /// A meta whose page or window size is 0.
    ZeroMetaSize,
    /// Two replicas under one name.
    SharedSourceName,
    /// The arrays of the replica of `source` do not fit together.
    Replica { source: String, fault: TableFault },
    /// Holder sets whose mask array has `words` words, not a whole number of sets.
    HolderSetWords(usize),
    /// The holder index's table is malformed.
    MalformedHolderIndex,
    /// A holder set that names no source, or one beyond the sources.
    HolderSetOutOfRange(usize),
    /// The holder index's counts differ from the replicas' tables.
    HolderIndexMismatch,
    /// One holder set stored twice.
    HolderSetTwice,
    /// A snapshot that holds no token ids, loaded into a store that keeps them.
    NoTokenIds,
}

/// How one replica's arrays in a snapshot do not fit together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableFault {
    /// More slots than a replica holds, or blocks of size 0.
    Slots { slots: usize, block_size: u32 },
    /// A block whose parent slot holds no block.
    ParentNotBlock(u32),
    /// A child count beyond the counter's range.
    ChildCount,
    /// The tombstones counted differ from the count stored.
    TombstoneCount,
    /// The free slots are not exactly the slots marked free.
    FreeSlots,
    /// The index is malformed or names a slot that holds no block.
    MalformedIndex,
    /// The index does not hold every block.
    IndexMismatch,
    /// A tier whose blocks are not in ascending order.
    UnorderedTier { medium: String },
    /// Tiers that hold blocks of size 0.
    ZeroTierBlockSize,
    /// A tier named twice, or the GPU named as a tier.
    TierNamedTwice,
}

impl fmt::Display for TableFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TableFault::Slots { slots, block_size } => {
                write!(f, "{slots} slots of block size {block_size}")
            }
            TableFault::ParentNotBlock(parent) => write!(f, "parent slot {parent} is not a block"),
            TableFault::ChildCount => f.write_str("a child count is out of range"),
            TableFault::TombstoneCount => f.write_str("tombstone count does not match the blocks"),
            TableFault::FreeSlots => f.write_str("free slots do not match the blocks"),
            TableFault::MalformedIndex => {
                f.write_str("malformed index, or one that names a slot that is not a block")
            }
            TableFault::IndexMismatch => f.write_str("index does not match the blocks"),
            TableFault::UnorderedTier { medium } => {
                write!(
                    f,
                    "the blocks of tier {medium:?} are not in ascending order"
                )
            }
            TableFault::ZeroTierBlockSize => f.write_str("tiers hold blocks of block_size 0"),
            TableFault::TierNamedTwice => f.write_str("a tier is named twice or is the GPU"),
        }
    }
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotError::TooShort(bytes) => {
                write!(f, "{bytes} bytes is too short for a replica snapshot")
            }
            SnapshotError::NotSnapshot { magic } => write!(
                f,
                "not a replica snapshot (magic {:?})",
                String::from_utf8_lossy(magic)
            ),
            SnapshotError::UnsupportedVersion { version, reads } => {
                write!(f, "replica snapshot version {version}, this build reads ")?;
                for (at, read) in reads.iter().enumerate() {
                    let before = match at {
                        0 => "",
                        _ if at + 1 == reads.len() => " and ",
                        _ => ", ",
                    };
                    write!(f, "{before}{read}")?;
                }
                Ok(())
            }
            SnapshotError::ChecksumMismatch => f.write_str("checksum mismatch"),
            SnapshotError::Truncated { what, at } => write!(f, "truncated in {what} at byte {at}"),
            SnapshotError::BadFlag { what, value } => write!(f, "{what} flag is {value}"),
            SnapshotError::NotUtf8 { what } => write!(f, "{what} is not UTF-8"),
            SnapshotError::TrailingBytes(count) => write!(f, "{count} trailing bytes"),
            SnapshotError::ZeroMetaSize => f.write_str("meta with a zero page or window size"),
            SnapshotError::SharedSourceName => f.write_str("two replicas share a source name"),
            SnapshotError::Replica { source, fault } => write!(f, "{source:?}: {fault}"),
            SnapshotError::HolderSetWords(words) => write!(f, "holder sets of {words} words"),
            SnapshotError::MalformedHolderIndex => {
                f.write_str("malformed holder index, or a bucket that names no set")
            }
            SnapshotError::HolderSetOutOfRange(set) => {
                write!(f, "holder set {set} names no source or one out of range")
            }
            SnapshotError::HolderIndexMismatch => {
                f.write_str("the holder index does not match the blocks")
            }
            SnapshotError::HolderSetTwice => f.write_str("a holder set is stored twice"),
            SnapshotError::NoTokenIds => f.write_str(
                "the snapshot holds no token ids (its store kept none) and this store keeps them \
                 (for the stream out): load it into a store that keeps none, or rebuild from \
                 the log",
            ),
        }
    }
}

impl std::error::Error for SnapshotError {}
