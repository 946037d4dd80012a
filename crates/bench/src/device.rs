//! `railstore bench device`: a fio-like load on any device backend.

/// Options of `railstore bench device`.
#[derive(Debug, Clone, clap::Args)]
pub struct DeviceBenchArgs {}

/// Runs the device benchmark.
pub fn run(_args: &DeviceBenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("bench device is not built yet")
}
