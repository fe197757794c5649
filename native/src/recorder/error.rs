//! The recorder's one error type: the ops name a node state the table does not hold (the tree
//! and the recorder disagree), or a cut step does not encode. Worded once, in `Display`.

use std::fmt;

use super::ops::NodeId;
use crate::codec;

/// Recording failed or the table could not follow the ops; the recorder is unusable after.
#[derive(Clone, Debug, PartialEq)]
pub enum Error {
    /// An op names a node the table does not hold.
    UnknownNode(NodeId),
    /// A page op names a namespace root.
    NamespaceRoot(NodeId),
    /// A node is added under an id the table already holds.
    NodeExists(NodeId),
    /// A store of `tokens` token ids that are not whole `page_size`-token pages (or none).
    NotWholePages {
        node: NodeId,
        tokens: usize,
        page_size: usize,
    },
    /// A node removed while `children` nodes hang below it.
    HasChildren { node: NodeId, children: usize },
    /// A tombstone (`resident: false`) or restore (`resident: true`) of a node already so.
    AlreadyResident { node: NodeId, resident: bool },
    /// A split that would leave either part of a node of `pages` pages empty.
    CannotSplit {
        node: NodeId,
        pages: usize,
        prefix_pages: usize,
    },
    /// A cut step's batch did not encode.
    Encode(codec::Error),
}

/// The recorder's results.
pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Error::Encode(error) = self {
            return write!(f, "encoding a cut step failed: {error}");
        }
        f.write_str("event recorder: ")?;
        match self {
            Error::UnknownNode(node) => write!(f, "node {node} is not in the table"),
            Error::NamespaceRoot(node) => {
                write!(f, "node {node} is a namespace root, which has no pages")
            }
            Error::NodeExists(node) => write!(f, "node {node} is already in the table"),
            Error::NotWholePages {
                node,
                tokens,
                page_size,
            } => write!(
                f,
                "node {node} stores {tokens} tokens, not a positive whole number of \
                 {page_size}-token pages"
            ),
            Error::HasChildren { node, children } => {
                write!(
                    f,
                    "node {node} is removed while {children} node(s) hang below it"
                )
            }
            Error::AlreadyResident { node, resident } => {
                let state = if *resident { "resident" } else { "tombstoned" };
                write!(f, "node {node} is already {state}")
            }
            Error::CannotSplit {
                node,
                pages,
                prefix_pages,
            } => write!(
                f,
                "node {node} of {pages} page(s) cannot give {prefix_pages} page(s) to a prefix"
            ),
            Error::Encode(_) => unreachable!("worded above"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Encode(error) => Some(error),
            _ => None,
        }
    }
}

impl From<codec::Error> for Error {
    fn from(error: codec::Error) -> Self {
        Error::Encode(error)
    }
}
