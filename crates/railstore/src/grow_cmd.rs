//! `railstore grow` and `railstore drain`: adding devices to a stopped array as a new layout
//! epoch, and starting to take the last epoch's devices out (docs/admin.md, "Growing and
//! draining"). Both only record the change; `serve` moves the objects while it serves.

use crate::server_cmd::{runtime, ConfigArgs};
use anyhow::Result;
use clap::Args;
use railstore_store::Store;
use std::path::PathBuf;

/// `railstore grow`.
#[derive(Args, Debug)]
pub struct GrowArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Devices to add: a multiple of the group width (6 for the embedded default).
    #[arg(long)]
    pub devices: usize,
    /// Where each added device lives (absolute; absent or empty), once per device; without
    /// it they go in the data folder's `devices/` beside the others.
    #[arg(long = "path", value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

/// `railstore drain`.
#[derive(Args, Debug)]
pub struct DrainArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
}

pub fn grow(args: &GrowArgs) -> Result<()> {
    let loaded = args.config.load()?;
    let report = runtime()?.block_on(Store::grow_offline(
        loaded.store,
        args.devices,
        args.paths.clone(),
    ))?;
    println!(
        "grown from {} to {} devices; added:",
        report.devices_before, report.devices_after
    );
    for (i, p) in report.paths.iter().enumerate() {
        println!("  device {}: {}", report.devices_before + i, p.display());
    }
    println!(
        "start the server (railstore serve): it moves the objects whose group changed while it \
         serves; `railstore repair status` shows the move"
    );
    Ok(())
}

pub fn drain(args: &DrainArgs) -> Result<()> {
    let loaded = args.config.load()?;
    let devices = Store::drain_offline(&loaded.store)?;
    println!(
        "devices {} to {} will be drained: start the server (railstore serve) and let it move \
         their objects back (`railstore repair status`); the clean shutdown after that \
         removes them from the array, and their folders in the data folder's devices/ (clear \
         those grown with --path yourself)",
        devices.start,
        devices.end - 1
    );
    Ok(())
}
