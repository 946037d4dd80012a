//! The `railstore` command line: picks devices and coders and runs the jobs.

mod mttdl_cmd;

use clap::{Parser, Subcommand};
use railstore_bench::device::{DeviceBenchArgs, SimValidationArgs};
use railstore_bench::ec::EcBenchArgs;
use railstore_bench::kv::{KvBenchArgs, RebuildBenchArgs};
use railstore_bench::mixed::MixedBenchArgs;

/// railstore: an object and key-value store for flash arrays that keeps reads at read-only
/// latency while writes pour in, protected by erasure codes.
#[derive(Parser)]
#[command(name = "railstore", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Benchmark the erasure coders the way EC-Bench does (encode/decode sweeps over k, m,
    /// chunk size, engine and threads).
    EcBench(Box<EcBenchArgs>),
    /// Mean time to data loss of the reliability mechanisms (KVMD §5.1 Markov model, eq. 1-2)
    /// and their Table 4 read/write/space costs, with numbers.
    Mttdl(Box<mttdl_cmd::MttdlArgs>),
    /// Workload benchmarks.
    Bench {
        #[command(subcommand)]
        what: BenchCommand,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// A fio-like load on one key-value device backend (mem, file or a simulated SSD).
    Device(Box<DeviceBenchArgs>),
    /// Validates the simulated SSD: random 4 KiB reads alone, then with 25 % random writes.
    SimSsd(SimValidationArgs),
    /// kvbench-style load on the reliability manager (KVMD): throughput against raw devices,
    /// latency, I/O amplification, CPU and context switches per mechanism.
    Kv(Box<KvBenchArgs>),
    /// Rebuild of a failed device per mechanism (all and half the objects) against a
    /// RAID-style full-capacity copy.
    Rebuild(Box<RebuildBenchArgs>),
    /// Reads and writes at once on simulated SSDs with read/write separation on, off and
    /// without writes (Flash on Rails §4.4, eRails §7): read tail latency, write throughput
    /// against the eRails bound, buffers over time.
    Mixed(Box<MixedBenchArgs>),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::EcBench(args) => railstore_bench::ec::run(&args).map(|_| ()),
        Command::Mttdl(args) => mttdl_cmd::run(&args),
        Command::Bench { what } => match what {
            BenchCommand::Device(args) => railstore_bench::device::run(&args),
            BenchCommand::SimSsd(args) => railstore_bench::device::run_sim_validation(&args),
            BenchCommand::Kv(args) => railstore_bench::kv::run(&args),
            BenchCommand::Rebuild(args) => railstore_bench::kv::run_rebuild(&args),
            BenchCommand::Mixed(args) => railstore_bench::mixed::run(&args),
        },
    }
}
