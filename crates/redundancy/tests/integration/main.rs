//! The crate's integration tests, one module per file, built and linked as one binary.

mod concurrent;
mod crash;
mod faults;
mod fixtures;
mod locality;
mod model;
mod part;
mod relocate;
mod scan;
mod separation;
mod shaped;
