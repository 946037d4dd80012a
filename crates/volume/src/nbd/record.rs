//! Recording what an export receives: each read and write, at its arrival, as a line of the
//! FlashNet/Heimdall trace format (`timestamp_ms device offset_bytes size_bytes op`, op 1 a
//! read, 0 a write), the format `railstore bench volume-trace` replays. The device number is
//! the volume's, in the order volumes were first seen. Flushes, trims and write-zeroes have no
//! place in the format and are not recorded.

use super::{CMD_READ, CMD_WRITE};
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

/// Writes the requests of every connection to one trace file.
#[derive(Debug)]
pub struct Recorder {
    start: Instant,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    out: BufWriter<File>,
    devices: HashMap<String, usize>,
    failed: bool,
}

impl Recorder {
    /// Creates (or truncates) the trace file.
    pub fn create(path: &Path) -> io::Result<Recorder> {
        Ok(Recorder {
            start: Instant::now(),
            state: Mutex::new(State {
                out: BufWriter::new(File::create(path)?),
                devices: HashMap::new(),
                failed: false,
            }),
        })
    }

    /// Notes a request that just arrived (other than a read or a write: nothing).
    pub fn request(&self, volume: &str, kind: u16, offset: u64, len: u32) {
        let op = match kind {
            CMD_READ => 1,
            CMD_WRITE => 0,
            _ => return,
        };
        let ms = self.start.elapsed().as_secs_f64() * 1e3;
        let mut st = self.state.lock().unwrap();
        if st.failed {
            return;
        }
        let next = st.devices.len();
        let device = *st.devices.entry(volume.to_string()).or_insert(next);
        if let Err(e) = writeln!(st.out, "{ms:.3} {device} {offset} {len} {op}") {
            // A full disk ends the recording, not the service.
            tracing::warn!(error = %e, "NBD request trace: writing failed; recording stops");
            st.failed = true;
        }
    }

    /// Pushes what is buffered to the file.
    pub fn flush(&self) {
        let mut st = self.state.lock().unwrap();
        if let Err(e) = st.out.flush() {
            tracing::warn!(error = %e, "NBD request trace: flushing failed");
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.flush();
    }
}
