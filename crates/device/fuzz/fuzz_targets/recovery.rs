//! Opening a device directory whose segment and checkpoint files hold arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    railstore_device::fuzzing::open_arbitrary(data);
});
