//! The two load generators of the study, on the same path (NBD over loopback TCP): fio's `nbd`
//! engine, and the project's own client for machines without fio.

use super::study::Pattern;
use crate::harness::Usage;
use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use railstore_volume::nbd::client;
use railstore_volume::nbd::{CMD_READ, CMD_WRITE};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What one run of a generator measured.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    pub ops: u64,
    pub bytes: u64,
    pub seconds: f64,
    /// Latency p50, p99, p99.9 in microseconds (completion latency).
    pub lat_us: [f64; 3],
    /// Mean completion latency in microseconds.
    pub lat_mean_us: f64,
    pub errors: u64,
    /// CPU the generator used inside this process (nothing for fio, another process).
    pub client: Usage,
}

/// Whether fio is on PATH with its `nbd` engine.
pub fn fio_has_nbd() -> bool {
    std::process::Command::new("fio")
        .arg("--enghelp=nbd")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// One fio job over `nbd://addr/volume`, time based.
pub async fn fio(
    addr: SocketAddr,
    volume: &str,
    pattern: Pattern,
    request: u64,
    iodepth: usize,
    runtime: Duration,
    volume_bytes: u64,
) -> Result<Measured> {
    let args = vec![
        "--name=study".to_string(),
        "--ioengine=nbd".into(),
        format!("--uri=nbd://{addr}/{volume}"),
        format!("--rw={}", pattern.name()),
        format!("--bs={request}"),
        format!("--iodepth={iodepth}"),
        format!("--size={}", volume_bytes / request * request),
        "--time_based".into(),
        format!("--runtime={}", runtime.as_secs().max(1)),
        "--percentile_list=50:99:99.9".into(),
        "--output-format=json".into(),
    ];
    let out =
        tokio::task::spawn_blocking(move || std::process::Command::new("fio").args(&args).output())
            .await?
            .context("running fio")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "fio failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    parse_fio(&stdout, pattern)
}

/// The measurement of fio's JSON output (fio's nbd engine may print a line before it).
fn parse_fio(stdout: &str, pattern: Pattern) -> Result<Measured> {
    let start = stdout.find('{').context("fio printed no JSON")?;
    let v: serde_json::Value =
        serde_json::from_str(&stdout[start..]).context("parsing fio's JSON")?;
    let job = &v["jobs"][0];
    let side = &job[if pattern.writes() { "write" } else { "read" }];
    let num = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0);
    let pct = &side["clat_ns"]["percentile"];
    Ok(Measured {
        ops: num(&side["total_ios"]) as u64,
        bytes: num(&side["io_bytes"]) as u64,
        seconds: num(&side["runtime"]) / 1e3,
        lat_us: [
            num(&pct["50.000000"]) / 1e3,
            num(&pct["99.000000"]) / 1e3,
            num(&pct["99.900000"]) / 1e3,
        ],
        lat_mean_us: num(&side["clat_ns"]["mean"]) / 1e3,
        errors: num(&job["error"]) as u64,
        client: Usage::default(),
    })
}

/// How long the own generator runs.
#[derive(Debug, Clone, Copy)]
pub enum Amount {
    Time(Duration),
    Ops(u64),
}

/// The own generator: one connection with `iodepth` requests in flight, on a thread and
/// runtime of its own so its CPU can be told from the server's.
#[allow(clippy::too_many_arguments)]
pub async fn own(
    addr: SocketAddr,
    volume: &str,
    pattern: Pattern,
    request: u64,
    iodepth: usize,
    amount: Amount,
    volume_bytes: u64,
    seed: u64,
) -> Result<Measured> {
    let volume = volume.to_string();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("nbd-load".into())
        .spawn(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the load generator's runtime")
                .and_then(|rt| {
                    let before = Usage::thread();
                    let mut m = rt.block_on(load(
                        addr,
                        &volume,
                        pattern,
                        request,
                        iodepth,
                        amount,
                        volume_bytes,
                        seed,
                    ))?;
                    m.client = Usage::thread().since(&before);
                    Ok(m)
                });
            let _ = tx.send(result);
        })
        .context("starting the load generator's thread")?;
    rx.await.context("the load generator stopped")?
}

/// One NBD connection with requests in flight: each request's latency counts from the
/// arrival it is given, and replies are taken by a task of their own in whatever order they
/// come.
pub struct Pipeline {
    pub export: client::Export,
    sender: client::RequestSender,
    slots: Arc<tokio::sync::Semaphore>,
    depth: usize,
    /// Arrival and whether it writes, of each request in flight, by handle.
    started: Arc<Mutex<HashMap<u64, (Instant, bool)>>>,
    receiver: tokio::task::JoinHandle<Latencies>,
    sent: u64,
}

/// Completion latencies in nanoseconds, reads and writes apart.
pub struct Latencies {
    pub reads: Histogram<u64>,
    pub writes: Histogram<u64>,
    pub errors: u64,
}

/// A histogram of nanoseconds up to an hour.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

impl Pipeline {
    /// Connects to `volume` with at most `depth` requests in flight.
    pub async fn connect(addr: SocketAddr, volume: &str, depth: usize) -> Result<Pipeline> {
        let (export, sender, mut receiver) = client::connect(addr, volume)
            .await
            .with_context(|| format!("connecting to nbd://{addr}/{volume}"))?;
        let slots = Arc::new(tokio::sync::Semaphore::new(depth));
        let started: Arc<Mutex<HashMap<u64, (Instant, bool)>>> = Arc::default();
        let receiver = {
            let (started, slots) = (started.clone(), slots.clone());
            tokio::spawn(async move {
                let mut lat = Latencies {
                    reads: latency_histogram(),
                    writes: latency_histogram(),
                    errors: 0,
                };
                let mut buf = Vec::new();
                while let Ok((handle, error)) = receiver.next().await {
                    let Some((t0, write)) = started.lock().unwrap().remove(&handle) else {
                        break;
                    };
                    if error == 0 && !write {
                        // The handle's low 32 bits carry the read's length.
                        buf.resize((handle & 0xffff_ffff) as usize, 0);
                        if receiver.read_data(&mut buf).await.is_err() {
                            break;
                        }
                    }
                    let h = if write {
                        &mut lat.writes
                    } else {
                        &mut lat.reads
                    };
                    h.saturating_record(t0.elapsed().as_nanos() as u64);
                    lat.errors += (error != 0) as u64;
                    slots.add_permits(1);
                }
                // The connection ended: nobody waits for a slot that will never come back.
                slots.close();
                lat
            })
        };
        Ok(Pipeline {
            export,
            sender,
            slots,
            depth,
            started,
            receiver,
            sent: 0,
        })
    }

    /// Sends a read (`data` None) or a write once a slot is free; its latency counts from
    /// `arrival`.
    pub async fn submit(
        &mut self,
        offset: u64,
        len: u32,
        data: Option<&[u8]>,
        arrival: Instant,
    ) -> Result<()> {
        self.slots
            .acquire()
            .await
            .map_err(|_| anyhow::anyhow!("the NBD connection ended"))?
            .forget();
        let handle = (self.sent << 32) | len as u64;
        let write = data.is_some();
        self.started
            .lock()
            .unwrap()
            .insert(handle, (arrival, write));
        let cmd = if write { CMD_WRITE } else { CMD_READ };
        self.sender.send(cmd, handle, offset, len, data).await?;
        self.sender.flush().await?;
        self.sent += 1;
        Ok(())
    }

    /// Requests sent so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Waits for every request in flight, disconnects and returns the latencies; an error
    /// when the connection ended with requests unanswered.
    pub async fn finish(self) -> Result<Latencies> {
        // Every slot back, or the connection ended (counted below).
        if let Ok(all) = self.slots.acquire_many(self.depth as u32).await {
            drop(all);
        }
        let _ = self.sender.disconnect().await;
        let lat = self.receiver.await?;
        let answered = lat.reads.len() + lat.writes.len();
        if answered < self.sent {
            bail!(
                "the connection ended with {answered} of {} requests answered",
                self.sent
            );
        }
        Ok(lat)
    }
}

#[allow(clippy::too_many_arguments)]
async fn load(
    addr: SocketAddr,
    volume: &str,
    pattern: Pattern,
    request: u64,
    iodepth: usize,
    amount: Amount,
    volume_bytes: u64,
    seed: u64,
) -> Result<Measured> {
    let mut pipe = Pipeline::connect(addr, volume, iodepth).await?;
    let slots = pipe.export.size.min(volume_bytes) / request;
    if slots == 0 {
        bail!("the volume is smaller than one request");
    }
    let len = u32::try_from(request).context("request size")?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut payload = vec![0u8; request as usize];
    rng.fill_bytes(&mut payload);
    let data = pattern.writes().then_some(&payload[..]);
    let t0 = Instant::now();
    loop {
        let n = pipe.sent();
        let done = match amount {
            Amount::Time(d) => t0.elapsed() >= d,
            Amount::Ops(total) => n >= total,
        };
        if done {
            break;
        }
        let slot = if pattern.random() {
            rng.gen_range(0..slots)
        } else {
            n % slots
        };
        pipe.submit(slot * request, len, data, Instant::now())
            .await?;
    }
    let sent = pipe.sent();
    let lat = pipe.finish().await?;
    let seconds = t0.elapsed().as_secs_f64();
    let hist = if pattern.writes() {
        &lat.writes
    } else {
        &lat.reads
    };
    let q = |p: f64| hist.value_at_quantile(p) as f64 / 1e3;
    Ok(Measured {
        ops: sent,
        bytes: sent * request,
        seconds,
        lat_us: [q(0.5), q(0.99), q(0.999)],
        lat_mean_us: hist.mean() / 1e3,
        errors: lat.errors,
        client: Usage::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that negotiates, takes one request and hangs up: the pipeline must say so, not
    /// wait for slots that never come back.
    #[tokio::test]
    async fn a_connection_that_ends_is_an_error_not_a_hang() {
        use railstore_volume::nbd::*;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            s.write_u64(NBD_MAGIC).await.unwrap();
            s.write_u64(IHAVEOPT).await.unwrap();
            s.write_u16(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES)
                .await
                .unwrap();
            s.read_u32().await.unwrap();
            let (_, _, len) = (
                s.read_u64().await.unwrap(),
                s.read_u32().await.unwrap(),
                s.read_u32().await.unwrap(),
            );
            let mut data = vec![0u8; len as usize];
            s.read_exact(&mut data).await.unwrap();
            let mut info = INFO_EXPORT.to_be_bytes().to_vec();
            info.extend_from_slice(&(1u64 << 20).to_be_bytes());
            info.extend_from_slice(&TRANSMISSION_FLAGS.to_be_bytes());
            for (kind, body) in [(REP_INFO, info), (REP_ACK, Vec::new())] {
                s.write_u64(OPTION_REPLY_MAGIC).await.unwrap();
                s.write_u32(OPT_GO).await.unwrap();
                s.write_u32(kind).await.unwrap();
                s.write_u32(body.len() as u32).await.unwrap();
                s.write_all(&body).await.unwrap();
            }
            let mut request = [0u8; 28];
            s.read_exact(&mut request).await.unwrap();
        });
        let outcome = tokio::time::timeout(Duration::from_secs(10), async {
            let mut pipe = Pipeline::connect(addr, "v", 4).await?;
            for i in 0..100u64 {
                pipe.submit(i * 4096, 4096, None, Instant::now()).await?;
            }
            pipe.finish().await.map(|_| ())
        })
        .await
        .expect("the pipeline hung on a closed connection");
        let err = outcome.expect_err("a dropped connection went unnoticed");
        assert!(err.to_string().contains("connection ended"), "{err:#}");
    }

    #[test]
    fn fio_json_with_a_line_before_it() {
        let text = r#"nbd: connected
{"jobs": [{"error": 0, "read": {"io_bytes": 8192, "total_ios": 2, "runtime": 1000,
 "clat_ns": {"mean": 2500.0, "percentile": {"50.000000": 1000, "99.000000": 5000, "99.900000": 9000}}},
 "write": {"io_bytes": 0, "total_ios": 0, "runtime": 0, "clat_ns": {}}}]}"#;
        let m = parse_fio(text, Pattern::Randread).unwrap();
        assert_eq!((m.ops, m.bytes), (2, 8192));
        assert_eq!(m.seconds, 1.0);
        assert_eq!(m.lat_us, [1.0, 5.0, 9.0]);
        assert_eq!(m.lat_mean_us, 2.5);
        let w = parse_fio(text, Pattern::Write).unwrap();
        assert_eq!((w.ops, w.bytes), (0, 0));
        assert!(parse_fio("no json", Pattern::Read).is_err());
    }
}
