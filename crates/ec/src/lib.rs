//! Erasure coding.
