//! Reads through io_uring: tasks submit O_DIRECT reads straight from the async executor and one
//! reaper thread per device completes them. Compared with a blocking worker pool this saves the
//! hand-off to a worker thread for every read (two context switches), which is what bounds
//! small random reads on a few cores.

use crate::aligned::AlignedBuf;
use io_uring::{opcode, types, IoUring};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use tokio::sync::oneshot;

/// user_data of the no-op that wakes the reaper to stop.
const STOP: u64 = u64::MAX;

type Done = oneshot::Sender<(AlignedBuf, io::Result<usize>)>;

struct Pending {
    /// Owns the memory the kernel writes into until the completion arrives, even if the
    /// waiting task is cancelled.
    buf: AlignedBuf,
    /// Keeps the descriptor open until the completion arrives.
    _file: Arc<File>,
    done: Done,
}

struct Slots {
    pending: Vec<Option<Pending>>,
    free: Vec<usize>,
}

/// One io_uring with its reaper thread.
pub(crate) struct ReadRing {
    ring: Arc<IoUring>,
    /// Serialises access to the submission queue.
    sq: Mutex<()>,
    slots: Arc<Mutex<Slots>>,
    stopping: Arc<AtomicBool>,
    reaper: Mutex<Option<JoinHandle<()>>>,
}

impl ReadRing {
    /// A ring for up to `depth` reads in flight; `None` where io_uring is unavailable (old
    /// kernels, seccomp in containers).
    pub(crate) fn new(depth: usize) -> Option<ReadRing> {
        let entries = depth.next_power_of_two().clamp(8, 4096) as u32;
        let ring = Arc::new(IoUring::new(entries).ok()?);
        let slots = Arc::new(Mutex::new(Slots {
            pending: Vec::new(),
            free: Vec::new(),
        }));
        let stopping = Arc::new(AtomicBool::new(false));
        let (r, s, st) = (ring.clone(), slots.clone(), stopping.clone());
        let reaper = std::thread::Builder::new()
            .name("rs-dev-uring".into())
            .spawn(move || reap(&r, &s, &st))
            .ok()?;
        Some(ReadRing {
            ring,
            sq: Mutex::new(()),
            slots,
            stopping,
            reaper: Mutex::new(Some(reaper)),
        })
    }

    /// Reads `len` bytes at aligned `offset` into a fresh aligned buffer; returns it and the
    /// byte count the kernel reported.
    pub(crate) async fn read(
        &self,
        file: &Arc<File>,
        offset: u64,
        len: usize,
    ) -> io::Result<(AlignedBuf, usize)> {
        let mut buf = AlignedBuf::new(len);
        let ptr = buf.as_mut_ptr();
        let (tx, rx) = oneshot::channel();
        let slot = {
            let mut s = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            let p = Pending {
                buf,
                _file: file.clone(),
                done: tx,
            };
            match s.free.pop() {
                Some(i) => {
                    s.pending[i] = Some(p);
                    i
                }
                None => {
                    s.pending.push(Some(p));
                    s.pending.len() - 1
                }
            }
        };
        let entry = opcode::Read::new(types::Fd(file.as_raw_fd()), ptr, len as u32)
            .offset(offset)
            .build()
            .user_data(slot as u64);
        self.push(&entry)?;
        let (buf, r) = rx
            .await
            .map_err(|_| io::Error::other("io_uring reaper stopped"))?;
        r.map(|n| (buf, n))
    }

    fn push(&self, entry: &io_uring::squeue::Entry) -> io::Result<()> {
        let _sq = self.sq.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            // SAFETY: submission-queue access is serialised by `self.sq`; the entry's buffer is
            // owned by its `Pending` slot (or is none, for the stop no-op) until the reaper sees
            // the completion, and its file is kept open there too.
            let pushed = unsafe { self.ring.submission_shared().push(entry) };
            if pushed.is_ok() {
                break;
            }
            // Queue full: hand what is queued to the kernel and retry.
            self.ring.submit()?;
        }
        self.ring.submit()?;
        Ok(())
    }
}

fn reap(ring: &IoUring, slots: &Mutex<Slots>, stopping: &AtomicBool) {
    loop {
        if let Err(e) = ring.submit_and_wait(1) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            tracing::error!(error = %e, "io_uring wait failed; reads stop");
            break;
        }
        // SAFETY: this thread is the only consumer of the completion queue.
        let cq = unsafe { ring.completion_shared() };
        let mut stop = false;
        for cqe in cq {
            if cqe.user_data() == STOP {
                stop = true;
                continue;
            }
            let slot = cqe.user_data() as usize;
            let mut s = slots.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(p) = s.pending.get_mut(slot).and_then(Option::take) {
                s.free.push(slot);
                drop(s);
                let r = if cqe.result() < 0 {
                    Err(io::Error::from_raw_os_error(-cqe.result()))
                } else {
                    Ok(cqe.result() as usize)
                };
                // The reader may have been cancelled; the buffer is freed here then.
                let _ = p.done.send((p.buf, r));
            }
        }
        if stop && stopping.load(Ordering::SeqCst) {
            break;
        }
    }
}

impl Drop for ReadRing {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        let nop = opcode::Nop::new().build().user_data(STOP);
        if self.push(&nop).is_ok() {
            if let Some(t) = self.reaper.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = t.join();
            }
        }
    }
}
