//! Arbitrary bytes choose a code, an engine, data and an erasure pattern (including patterns
//! beyond the code's tolerance); the round trip must be exact or fail cleanly.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    railstore_ec::check::reconstruct_roundtrip(data);
});
