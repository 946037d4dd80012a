//! `railstore bench ceph-study`, `railstore bench cluster` and `railstore bench volume-trace`:
//! the volume benchmarks of `railstore_bench::volume_bench`, each on fresh stores in a
//! temporary data folder.

use crate::s3_bench_cmd::{read_store_config, TempDir};
use anyhow::{ensure, Result};
use clap::Args;
use railstore_bench::volume_bench::cluster::{self, ClusterArgs};
use railstore_bench::volume_bench::replay::{self, VolumeTraceArgs};
use railstore_bench::volume_bench::study::{self, CephStudyArgs};
use railstore_store::StoreConfig;
use std::path::{Path, PathBuf};

/// Options of `railstore bench ceph-study`.
#[derive(Args, Debug, Clone)]
pub struct CephStudyBenchArgs {
    #[command(flatten)]
    pub study: CephStudyArgs,
    /// Store configuration (TOML, as `railstore init` writes; `[server]` is ignored and
    /// `data_dir` replaced by a temporary folder). Default: 14 file devices (RS(10,4) needs
    /// 14), no read/write separation, groups as wide as the widest mechanism.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Folder under which the temporary data folder is made (default: the system's temporary
    /// folder). It is removed at the end.
    #[arg(long)]
    pub path: Option<PathBuf>,
}

/// Options of `railstore bench cluster`.
#[derive(Args, Debug, Clone)]
pub struct ClusterBenchArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Folder under which the temporary folder of the nodes' devices is made (default: the
    /// system's temporary folder). It is removed at the end.
    #[arg(long)]
    pub path: Option<PathBuf>,
}

/// Options of `railstore bench volume-trace`.
#[derive(Args, Debug, Clone)]
pub struct VolumeTraceBenchArgs {
    #[command(flatten)]
    pub replay: VolumeTraceArgs,
    /// Store configuration (TOML, as `railstore init` writes; `[server]` is ignored and
    /// `data_dir` replaced by a temporary folder). Default: the embedded default (6 devices,
    /// RS(3,3) with read/write separation).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Folder under which the temporary data folder is made (default: the system's temporary
    /// folder). It is removed at the end.
    #[arg(long)]
    pub path: Option<PathBuf>,
}

/// Runs `railstore bench ceph-study`.
pub fn ceph_study(args: &CephStudyBenchArgs) -> Result<()> {
    args.study.plan()?;
    let cfg = match &args.config {
        Some(p) => read_store_config(Some(p))?,
        None => study::default_config(&args.study)?,
    };
    let report = in_temp(cfg, args.path.as_deref(), |cfg| {
        study::run(&args.study, cfg)
    })?;
    report.write(&args.study.output)
}

/// Runs `railstore bench cluster`.
pub fn cluster(args: &ClusterBenchArgs) -> Result<()> {
    args.cluster.width()?;
    let parent = args.path.clone().unwrap_or_else(std::env::temp_dir);
    let dir = TempDir::new(&parent)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let report = rt.block_on(cluster::run(&args.cluster, &dir.0));
    drop(rt);
    drop(dir);
    report?.write(&args.cluster.study.output)
}

/// Runs `railstore bench volume-trace`.
pub fn volume_trace(args: &VolumeTraceBenchArgs) -> Result<()> {
    let cfg = read_store_config(args.config.as_deref())?;
    let report = in_temp(cfg, args.path.as_deref(), |cfg| {
        replay::run(&args.replay, cfg)
    })?;
    report.write(&args.replay.output)
}

/// Runs `bench` on `cfg` moved to a fresh temporary data folder under `parent`, removed after.
fn in_temp<T, F>(
    mut cfg: StoreConfig,
    parent: Option<&Path>,
    bench: impl FnOnce(StoreConfig) -> F,
) -> Result<T>
where
    F: std::future::Future<Output = Result<T>>,
{
    ensure!(
        cfg.devices.paths.is_empty(),
        "the configuration names device paths; the volume benchmarks only run on a fresh \
         temporary data folder and will not write to them (remove [devices].paths)"
    );
    let dir = TempDir::new(&parent.map_or_else(std::env::temp_dir, Path::to_path_buf))?;
    cfg.data_dir = dir.0.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(bench(cfg));
    // The runtime's blocking threads may still hold files; stop it before the folder goes.
    drop(rt);
    drop(dir);
    result
}
