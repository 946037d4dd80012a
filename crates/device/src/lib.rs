//! Key-value devices (DESIGN §3.2).
