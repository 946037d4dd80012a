//! The node crate's integration tests, one test binary (a module per concern).

mod common;
mod conformance;
mod errors;
mod fencing;
mod loopback;
mod protocol;
mod queue_depth;
mod restart;
