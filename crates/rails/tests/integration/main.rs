//! The crate's integration tests, one module per file, built and linked as one binary.

mod common;
mod journal;
mod journal_failures;
mod separated;
mod sizing;
