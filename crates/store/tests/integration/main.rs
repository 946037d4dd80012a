//! The crate's integration tests, one module per file, built and linked as one binary.

mod crash;
mod grow;
mod identity;
mod multipart_races;
mod online;
mod open_faults;
mod recovery;
mod store;
mod versions;
mod warmup;
