//! The `railstore` command line: picks devices and coders and runs the jobs.

mod admin_cmd;
mod cluster_cmd;
mod cluster_network;
mod cluster_node;
mod grow_bench_cmd;
mod grow_cmd;
mod mixed_serve_cmd;
mod mttdl_cmd;
mod repair_bench_cmd;
mod s3_bench_cmd;
mod scale_bench_cmd;
mod serve_cmd;
mod server_cmd;
mod sim_cmd;
mod volume_bench_cmd;
mod volume_cmd;

use clap::{Parser, Subcommand};
use railstore_bench::device::{DeviceBenchArgs, SimValidationArgs};
use railstore_bench::ec::EcBenchArgs;
use railstore_bench::kv::{KvBenchArgs, RebuildBenchArgs};
use railstore_bench::mixed::{MixedBenchArgs, Preset};

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
    /// Serve the store over S3 (the main job): the embedded default without a configuration.
    Serve(serve_cmd::ServeArgs),
    /// Initialise a configuration file with every setting, commented.
    Init(server_cmd::InitArgs),
    /// Devices, roles, buffers, capacity and health of a store (asks the running server when
    /// the data folder is in use).
    Status(server_cmd::StatusArgs),
    /// Verify every object and repair what is damaged, missing or half-written (offline).
    Scrub(server_cmd::ScrubArgs),
    /// Rebuild one device of the array from the others (offline).
    Rebuild(server_cmd::RebuildArgs),
    /// Add devices (a multiple of the group width) to a stopped array as a new layout epoch;
    /// the next `serve` moves the objects whose group changed while it serves (offline).
    Grow(grow_cmd::GrowArgs),
    /// Start taking the devices the last grow added out of a stopped array: the next `serve`
    /// moves their objects back, and its clean shutdown after that removes them (offline).
    Drain(grow_cmd::DrainArgs),
    /// Take devices out of service or replace them on a running server (admin API).
    Device {
        #[command(subcommand)]
        what: admin_cmd::DeviceCommand,
    },
    /// Progress of the rebuild a running server performs (admin API).
    Repair {
        #[command(subcommand)]
        what: admin_cmd::RepairCommand,
    },
    /// The cluster map in etcd: create it, add or remove members, show it (docs/cluster.md).
    Cluster {
        #[command(subcommand)]
        what: cluster_cmd::ClusterCommand,
    },
    /// Block volumes of a running server, exported over NBD (admin API).
    Volume {
        #[command(subcommand)]
        what: volume_cmd::VolumeCommand,
    },
    /// Benchmark the erasure coders the way EC-Bench does (encode/decode sweeps over k, m,
    /// chunk size, engine and threads).
    EcBench(Box<EcBenchArgs>),
    /// Mean time to data loss of the reliability mechanisms (KVMD §5.1 Markov model, eq. 1-2)
    /// and their Table 4 read/write/space costs, with numbers.
    Mttdl(Box<mttdl_cmd::MttdlArgs>),
    /// The deterministic whole-system simulator: random S3 operations, crashes and device
    /// faults against the real store in virtual time, checked against a model (docs/sim.md).
    Sim(Box<sim_cmd::SimArgs>),
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
    /// A device against the same device through a node on loopback (gRPC): 1 MiB throughput
    /// and the latency the node adds to 4 KiB reads.
    Remote(Box<railstore_bench::remote::RemoteBenchArgs>),
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
    /// An S3 load generator (warp-like): PUT, GET or mixed against an in-process server (or
    /// `--endpoint`), with the store's own throughput for the same objects as the baseline.
    S3(Box<s3_bench_cmd::S3BenchArgs>),
    /// A device failed and rebuilt while the server serves an S3 load: client latency during
    /// the rebuild against without, and the throttled rebuild's rate against the unthrottled.
    Repair(Box<repair_bench_cmd::RepairBenchArgs>),
    /// The array grown by a width of devices and drained back while the server serves an S3
    /// load: the share of keys each move moves, their rates, client latency during the move.
    Grow(Box<grow_bench_cmd::GrowBenchArgs>),
    /// Memory per object by layer, bytes on disk, restart and listing time, GET and PUT rates
    /// as the object count grows, extrapolated to 10^9 objects.
    Scale(Box<scale_bench_cmd::ScaleBenchArgs>),
    /// The Ceph SSD study on block volumes: fio (nbd engine) or the own generator, sequential
    /// and random reads and writes per request size for rep3, RS(6,3) and RS(10,4); MB/s,
    /// IOPS, latency, CPU user/system per GB, context switches per MB, device amplification.
    CephStudy(Box<volume_bench_cmd::CephStudyBenchArgs>),
    /// The Ceph study's cluster-network comparison (its Figs. 16-17) across nodes: the same
    /// volume load with node 0 serving and the other nodes' devices over gRPC on loopback;
    /// network bytes per byte by mechanism, pattern and request size.
    Cluster(Box<volume_bench_cmd::ClusterBenchArgs>),
    /// A block trace (MSR, TPC-C, web search, CloudPhysics) replayed onto a volume at its
    /// offsets through NBD, with read/write separation on and off: the read tail.
    VolumeTrace(Box<volume_bench_cmd::VolumeTraceBenchArgs>),
}

fn main() -> anyhow::Result<()> {
    keep_large_allocations_in_the_heap();
    let cli = Cli::parse();
    if matches!(
        cli.command,
        Command::Serve(_)
            | Command::Status(_)
            | Command::Scrub(_)
            | Command::Rebuild(_)
            | Command::Grow(_)
            | Command::Drain(_)
    ) {
        private_files();
    }
    match cli.command {
        Command::Serve(args) => {
            logging();
            serve_cmd::serve(&args)
        }
        Command::Init(args) => server_cmd::init(&args),
        Command::Status(args) => server_cmd::status(&args),
        Command::Scrub(args) => {
            logging();
            server_cmd::scrub(&args)
        }
        Command::Rebuild(args) => {
            logging();
            server_cmd::rebuild(&args)
        }
        Command::Grow(args) => {
            logging();
            grow_cmd::grow(&args)
        }
        Command::Drain(args) => grow_cmd::drain(&args),
        Command::Cluster { what } => cluster_cmd::run(what),
        Command::Device { what } => admin_cmd::device(&what),
        Command::Repair { what } => admin_cmd::repair(&what),
        Command::Volume { what } => volume_cmd::run(&what),
        Command::EcBench(args) => railstore_bench::ec::run(&args).map(|_| ()),
        Command::Mttdl(args) => mttdl_cmd::run(&args),
        Command::Sim(args) => sim_cmd::run(&args),
        Command::Bench { what } => match what {
            BenchCommand::Device(args) => railstore_bench::device::run(&args),
            BenchCommand::Remote(args) => railstore_bench::remote::run(&args),
            BenchCommand::SimSsd(args) => railstore_bench::device::run_sim_validation(&args),
            BenchCommand::Kv(args) => railstore_bench::kv::run(&args),
            BenchCommand::Rebuild(args) => railstore_bench::kv::run_rebuild(&args),
            BenchCommand::Mixed(args) if args.preset == Preset::Serve => {
                mixed_serve_cmd::run(&args)
            }
            BenchCommand::Mixed(args) => railstore_bench::mixed::run(&args),
            BenchCommand::S3(args) => s3_bench_cmd::run(&args),
            BenchCommand::Repair(args) => repair_bench_cmd::run(&args),
            BenchCommand::Grow(args) => grow_bench_cmd::run(&args),
            BenchCommand::Scale(args) => scale_bench_cmd::run(&args),
            BenchCommand::CephStudy(args) => volume_bench_cmd::ceph_study(&args),
            BenchCommand::Cluster(args) => volume_bench_cmd::cluster(&args),
            BenchCommand::VolumeTrace(args) => volume_bench_cmd::volume_trace(&args),
        },
    }
}

/// Files and folders the store commands create (data folder, device folders, segment files,
/// layout, credentials) are their owner's alone: the umask makes them 0600 and 0700.
fn private_files() {
    #[cfg(unix)]
    // SAFETY: umask only replaces the process's file mode creation mask; it has no failure.
    unsafe {
        libc::umask(0o077);
    }
}

/// Logs to stderr; `RUST_LOG` overrides the default of `info` for railstore and warnings
/// for everything else, except that s3s never logs below `warn`: its debug lines print whole
/// requests, headers included, and so SSE-C keys and signatures.
fn logging() {
    use tracing_subscriber::EnvFilter;
    let filter = match EnvFilter::try_from_default_env() {
        Ok(f) => f.add_directive("s3s=warn".parse().expect("a valid directive")),
        Err(_) => EnvFilter::new(
            "warn,s3s=off,railstore=info,railstore_store=info,railstore_s3=info,railstore_rails=info,railstore_volume=info",
        ),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

/// Shards, pieces and chunks of a MiB or more are allocated and freed at a high rate. By default
/// glibc maps each one fresh from the kernel and unmaps it when freed, so every page of it
/// faults and is zeroed again: loading 4 MiB split objects took a third more page faults and
/// system time (docs/benchmarks/kv.md, "Large allocations"). Below 32 MiB (glibc's largest
/// threshold) they now come from the heap and their pages are reused.
fn keep_large_allocations_in_the_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes allocator parameters; called before any thread starts.
        let ok = unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20) == 1
        };
        if !ok {
            eprintln!("railstore: the allocator refused its thresholds; large buffers stay mapped");
        }
    }
}
