//! The record parser, the segment scanner and the checkpoint decoder on arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    railstore_device::fuzzing::parse_everything(data);
});
