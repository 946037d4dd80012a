//! Opening a single-file device image holding arbitrary bytes (seed the corpus with
//! `tests/fixtures/single-file/device.img`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    railstore_device::fuzzing::open_arbitrary_image(data);
});
