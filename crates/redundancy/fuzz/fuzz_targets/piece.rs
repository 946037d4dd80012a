//! The piece header, set descriptor and device-key parsers on arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use railstore_redundancy::format::{
    parse_device_key, PieceHeader, SetDescriptor, PIECE_VERSION_UNITS,
};

fuzz_target!(|data: &[u8]| {
    if let Ok((h, payload)) = PieceHeader::decode(data) {
        // Whatever decodes re-encodes to the same bytes, in its own format version.
        let again = if data[4] == PIECE_VERSION_UNITS {
            h.encode_units(payload)
        } else {
            h.encode(payload)
        };
        assert_eq!(again, data);
    }
    if let Some(d) = SetDescriptor::decode(data) {
        assert_eq!(d.encode(), data);
    }
    let _ = parse_device_key(data);
});
