//! `railstore bench s3`: the S3 load generator of `railstore_bench::s3load`, pointed at a
//! railstore S3 endpoint started here over a fresh store (and at that store directly, for the
//! baseline), or at an external endpoint.

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use railstore_bench::s3load::{self, Endpoint, LoadArgs, Setup};
use railstore_s3::S3Config;
use railstore_store::{DeviceKind, Store, StoreConfig};
use std::path::{Path, PathBuf};

/// What the in-process store's devices are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DevicesKind {
    /// Log-structured file devices in the temporary data folder (O_DIRECT where allowed).
    File,
    /// Memory only. Everything written stays in RAM until the end: mind `--size` times
    /// the PUT rate times `--duration`, twice over with RS(3,3).
    Mem,
    /// Simulated SSDs (real-time clock) over file devices.
    Sim,
}

/// Options of `railstore bench s3`.
#[derive(Args, Debug, Clone)]
pub struct S3BenchArgs {
    #[command(flatten)]
    pub load: LoadArgs,
    /// Drive this S3 endpoint (`http://host:port`) instead of starting railstore here; there
    /// is no store baseline then.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Access key for `--endpoint`.
    #[arg(long, requires = "endpoint")]
    pub access_key: Option<String>,
    /// Secret key for `--endpoint`.
    #[arg(long, requires = "endpoint")]
    pub secret_key: Option<String>,
    /// Region requests are signed for.
    #[arg(long, default_value = "us-east-1")]
    pub region: String,
    /// Store configuration (TOML, as `railstore init` writes; `[server]` is ignored and
    /// `data_dir` replaced by a temporary folder). Default: the embedded default, 6 devices,
    /// RS(3,3) with read/write separation, hybrid policy.
    #[arg(long, conflicts_with = "endpoint")]
    pub config: Option<PathBuf>,
    /// Device kind of the in-process store (overrides the configuration's; default `file`).
    #[arg(long, value_enum, conflicts_with = "endpoint")]
    pub devices_kind: Option<DevicesKind>,
    /// Folder under which the temporary data folder is made (default: the system's temporary
    /// folder). It is removed at the end.
    #[arg(long, conflicts_with = "endpoint")]
    pub path: Option<PathBuf>,
    /// tokio worker threads shared by the clients and the in-process server (default: one per
    /// CPU).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// A data folder removed when dropped.
pub(crate) struct TempDir(pub PathBuf);

impl TempDir {
    pub(crate) fn new(parent: &Path) -> Result<TempDir> {
        use rand::Rng;
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
        for _ in 0..16 {
            let p = parent.join(format!(
                "railstore-s3bench-{:08x}",
                rand::thread_rng().gen::<u32>()
            ));
            match std::fs::create_dir(&p) {
                Ok(()) => return Ok(TempDir(p)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e).with_context(|| format!("creating {}", p.display())),
            }
        }
        bail!("no free temporary folder name under {}", parent.display())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            eprintln!("could not remove {}: {e}", self.0.display());
        }
    }
}

/// Prints a benchmark's table and writes its report as JSON to `json` (`-`: stdout, and then
/// the table goes to stderr so stdout stays JSON).
pub(crate) fn emit_report<T: serde::Serialize>(
    table: &str,
    json: Option<&Path>,
    report: &T,
) -> Result<()> {
    let to_stdout = json == Some(Path::new("-"));
    if to_stdout {
        eprint!("{table}");
    } else {
        print!("{table}");
    }
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(report)?;
        if to_stdout {
            println!("{text}");
        } else {
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(())
}

/// A benchmark's store configuration: the file's without its `[server]` table, or the
/// embedded default.
pub(crate) fn read_store_config(path: Option<&Path>) -> Result<StoreConfig> {
    let Some(path) = path else {
        return Ok(StoreConfig::default());
    };
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut table: toml::Table =
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    table.remove("server");
    StoreConfig::from_table(table).with_context(|| format!("in {}", path.display()))
}

/// The store configuration of an in-process run, on `data_dir`.
fn store_config(args: &S3BenchArgs, data_dir: &Path) -> Result<StoreConfig> {
    let mut cfg = read_store_config(args.config.as_deref())?;
    ensure!(
        cfg.devices.paths.is_empty(),
        "the configuration names device paths; bench s3 only runs on a fresh temporary data \
         folder and will not write to them (remove [devices].paths)"
    );
    cfg.data_dir = data_dir.to_path_buf();
    if let Some(k) = args.devices_kind {
        cfg.devices.kind = match k {
            DevicesKind::File => DeviceKind::File,
            DevicesKind::Mem => DeviceKind::Mem,
            DevicesKind::Sim => DeviceKind::Sim,
        };
    }
    Ok(cfg)
}

pub(crate) fn describe_store(cfg: &StoreConfig) -> String {
    let kind = match cfg.devices.kind {
        DeviceKind::File => format!(
            "file devices in {}{}",
            cfg.data_dir.display(),
            if cfg.devices.direct_io {
                " (O_DIRECT where allowed)"
            } else {
                " (buffered I/O)"
            }
        ),
        DeviceKind::Sim => format!(
            "simulated SSDs over file devices in {}",
            cfg.data_dir.display()
        ),
        DeviceKind::Mem => "in-memory devices".to_string(),
    };
    let separation = match &cfg.separation {
        Some(s) => format!(
            "read/write separation ({} of {} colours read, {} ms frames)",
            s.window,
            cfg.manager.width(),
            s.frame.as_millis()
        ),
        None => "no read/write separation".into(),
    };
    format!(
        "{} {kind}, {}, {separation}",
        cfg.device_count(),
        railstore_store::metrics::policy_text(&cfg.manager.policy)
    )
}

fn random_key(len: usize, alphabet: &[u8]) -> String {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    (0..len)
        .map(|_| alphabet[rng.gen_range(0..alphabet.len())] as char)
        .collect()
}

/// Runs `railstore bench s3`.
pub fn run(args: &S3BenchArgs) -> Result<()> {
    // Check the options before anything starts.
    args.load.plan()?;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    let report = match &args.endpoint {
        Some(url) => {
            let (Some(access_key), Some(secret_key)) = (&args.access_key, &args.secret_key) else {
                bail!("--endpoint needs --access-key and --secret-key");
            };
            let endpoint = Endpoint {
                url: url.trim_end_matches('/').to_string(),
                region: args.region.clone(),
                access_key: access_key.clone(),
                secret_key: secret_key.clone(),
            };
            let setup = Setup {
                endpoint: endpoint.url.clone(),
                in_process: false,
                store: None,
                threads,
            };
            rt.block_on(s3load::measure(&args.load, setup, &endpoint, None))?
        }
        None => {
            let parent = args.path.clone().unwrap_or_else(std::env::temp_dir);
            let dir = TempDir::new(&parent)?;
            let cfg = store_config(args, &dir.0)?;
            let report = rt.block_on(in_process(args, cfg, threads));
            // The runtime's blocking threads may still hold files; stop it before the folder
            // goes.
            drop(rt);
            drop(dir);
            report?
        }
    };
    s3load::write_report(&args.load, &report)
}

/// An S3 endpoint served in this process over a store, with a random key pair.
pub(crate) struct InProcess {
    pub endpoint: Endpoint,
    stop: tokio::sync::oneshot::Sender<()>,
    serving: tokio::task::JoinHandle<std::result::Result<(), railstore_s3::ServeError>>,
}

impl InProcess {
    /// Serves `store` on a free loopback port.
    pub(crate) async fn start(store: &Store, region: &str) -> Result<InProcess> {
        const ANY: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let access_key = format!("RS{}", random_key(18, b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"));
        let secret_key = random_key(40, ANY);
        let server = railstore_s3::bind(
            store.clone(),
            S3Config {
                listen: "127.0.0.1:0".parse().expect("a valid address"),
                region: region.to_string(),
                access_key: access_key.clone(),
                secret_key: secret_key.clone(),
                ..S3Config::default()
            },
        )
        .await
        .context("starting the S3 endpoint")?;
        let endpoint = Endpoint {
            url: format!("http://{}", server.local_addr()),
            region: region.to_string(),
            access_key,
            secret_key,
        };
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(server.serve(async move {
            let _ = stop_rx.await;
        }));
        Ok(InProcess {
            endpoint,
            stop,
            serving,
        })
    }

    /// Stops serving (open connections finish first).
    pub(crate) async fn stop(self) -> Result<()> {
        let _ = self.stop.send(());
        self.serving
            .await
            .context("the S3 endpoint panicked")?
            .context("the S3 endpoint")
    }
}

async fn in_process(
    args: &S3BenchArgs,
    cfg: StoreConfig,
    threads: usize,
) -> Result<s3load::S3Report> {
    let description = describe_store(&cfg);
    let store = Store::open(cfg).await.context("opening the store")?;
    let server = InProcess::start(&store, &args.region).await?;
    let setup = Setup {
        endpoint: server.endpoint.url.clone(),
        in_process: true,
        store: Some(description),
        threads,
    };
    let measured = s3load::measure(&args.load, setup, &server.endpoint, Some(&store)).await;
    let served = server.stop().await;
    let closed = store.shutdown().await;
    let report = measured?;
    served?;
    closed.context("shutting the store down")?;
    Ok(report)
}
