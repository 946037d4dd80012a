//! `railstore init`, `status`, `scrub` and `rebuild`, and the configuration every store
//! command reads (`serve` is in `serve_cmd.rs`).

use anyhow::{bail, Context, Result};
use clap::Args;
use railstore_store::{
    RepairOptions, RepairProgress, RepairReport, Store, StoreConfig, StoreStatus, EXAMPLE_TOML,
};
use serde::Deserialize;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Where the configuration comes from (shared by every store command).
#[derive(Args, Debug, Clone)]
pub struct ConfigArgs {
    /// Configuration file (TOML; `railstore init` writes a commented one). Without it, the
    /// embedded default: 6 file devices in ./railstore-data, RS(3,3) with read/write
    /// separation, hybrid policy.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Data folder (overrides the file's `data_dir`).
    #[arg(long = "data", visible_alias = "data-dir", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

/// The `[server]` table.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    /// Listening address.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Region requests are signed for.
    #[serde(default = "default_region")]
    pub region: String,
    /// Access key id.
    pub access_key: Option<String>,
    /// Secret key.
    pub secret_key: Option<String>,
    /// The canonical id of that key pair's user.
    #[serde(default = "default_user_id")]
    pub user_id: String,
    /// Its display name (by default its id).
    pub display_name: Option<String>,
    /// Its email, for ACL grants by address.
    pub email: Option<String>,
    /// More users, each with its own key pair.
    #[serde(default)]
    pub users: Vec<UserSection>,
    /// Connections served at once; more wait in the listen backlog.
    #[serde(default = "default_connections_max")]
    pub connections_max: usize,
    /// How long a request's head may take, and an idle keep-alive connection may stay.
    #[serde(default = "default_header_read_timeout_ms")]
    pub header_read_timeout_ms: u64,
    /// How long a request body may send nothing, or a client read nothing of a response.
    #[serde(default = "default_body_idle_timeout_ms")]
    pub body_idle_timeout_ms: u64,
    /// Bytes of a browser-form POST read to find its fields.
    #[serde(default = "default_post_form_bytes_max")]
    pub post_form_bytes_max: usize,
    /// Accept AWS Signature Version 2.
    #[serde(default)]
    pub sigv2: bool,
    /// Bearer token `/metrics` and `/status` require; open without one.
    pub operator_token: Option<String>,
    /// Bearer token of the admin API (`/admin/v1/…`); by default one made at first start in
    /// the data folder's `admin-token` file.
    pub admin_token: Option<String>,
    /// The file holding the master key of SSE-S3 and KMS (made on first start); by default
    /// `sse-master.key` in the data folder.
    pub sse_master_key_file: Option<PathBuf>,
    /// Seconds between passes of the lifecycle worker (0: no worker).
    #[serde(default = "default_lifecycle_interval_s")]
    pub lifecycle_interval_s: u64,
    /// Where volumes are exported over NBD (TCP, loopback only).
    pub nbd_listen: Option<SocketAddr>,
    /// The NBD Unix socket; by default `nbd.sock` in the data folder.
    pub nbd_socket: Option<PathBuf>,
}

/// One `[[server.users]]` entry.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserSection {
    /// Canonical id.
    pub id: String,
    /// Display name (by default the id).
    pub display_name: Option<String>,
    /// Email, for ACL grants by address.
    pub email: Option<String>,
    /// Access key id.
    pub access_key: String,
    /// Secret key.
    pub secret_key: String,
}

impl UserSection {
    fn user(&self) -> railstore_s3::User {
        railstore_s3::User {
            id: self.id.clone(),
            display_name: self.display_name.clone().unwrap_or_else(|| self.id.clone()),
            email: self.email.clone(),
            access_key: self.access_key.clone(),
            secret_key: self.secret_key.clone(),
        }
    }
}

fn default_user_id() -> String {
    railstore_s3::MAIN_USER_ID.to_string()
}

fn default_lifecycle_interval_s() -> u64 {
    3600
}

impl std::fmt::Debug for ServerSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |v: &Option<String>| v.as_ref().map(|_| "<hidden>");
        f.debug_struct("ServerSection")
            .field("listen", &self.listen)
            .field("region", &self.region)
            .field("access_key", &self.access_key)
            .field("secret_key", &hidden(&self.secret_key))
            .field("user_id", &self.user_id)
            .field("display_name", &self.display_name)
            .field("email", &self.email)
            .field(
                "users",
                &self.users.iter().map(UserSection::user).collect::<Vec<_>>(),
            )
            .field("connections_max", &self.connections_max)
            .field("header_read_timeout_ms", &self.header_read_timeout_ms)
            .field("body_idle_timeout_ms", &self.body_idle_timeout_ms)
            .field("post_form_bytes_max", &self.post_form_bytes_max)
            .field("sigv2", &self.sigv2)
            .field("operator_token", &hidden(&self.operator_token))
            .field("sse_master_key_file", &self.sse_master_key_file)
            .field("lifecycle_interval_s", &self.lifecycle_interval_s)
            .field("nbd_listen", &self.nbd_listen)
            .field("nbd_socket", &self.nbd_socket)
            .finish()
    }
}

fn default_listen() -> SocketAddr {
    "127.0.0.1:9000".parse().expect("a valid address")
}

fn default_region() -> String {
    "us-east-1".into()
}

fn default_connections_max() -> usize {
    railstore_s3::CONNECTIONS_MAX
}

fn default_header_read_timeout_ms() -> u64 {
    railstore_s3::HEADER_READ_TIMEOUT.as_millis() as u64
}

fn default_body_idle_timeout_ms() -> u64 {
    railstore_s3::BODY_IDLE_TIMEOUT.as_millis() as u64
}

fn default_post_form_bytes_max() -> usize {
    railstore_s3::POST_FORM_BYTES_MAX
}

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection {
            listen: default_listen(),
            region: default_region(),
            access_key: None,
            secret_key: None,
            user_id: default_user_id(),
            display_name: None,
            email: None,
            users: Vec::new(),
            connections_max: default_connections_max(),
            header_read_timeout_ms: default_header_read_timeout_ms(),
            body_idle_timeout_ms: default_body_idle_timeout_ms(),
            post_form_bytes_max: default_post_form_bytes_max(),
            sigv2: false,
            operator_token: None,
            admin_token: None,
            sse_master_key_file: None,
            lifecycle_interval_s: default_lifecycle_interval_s(),
            nbd_listen: None,
            nbd_socket: None,
        }
    }
}

impl ServerSection {
    /// The S3 endpoint's configuration for this section and key pair.
    pub fn s3_config(&self, access_key: String, secret_key: String) -> railstore_s3::S3Config {
        railstore_s3::S3Config {
            listen: self.listen,
            region: self.region.clone(),
            access_key,
            secret_key,
            user_id: self.user_id.clone(),
            display_name: self
                .display_name
                .clone()
                .unwrap_or_else(|| self.user_id.clone()),
            email: self.email.clone(),
            users: self.users.iter().map(UserSection::user).collect(),
            domain: None,
            limits: railstore_s3::Limits {
                connections_max: self.connections_max,
                header_read_timeout: Duration::from_millis(self.header_read_timeout_ms),
                body_idle_timeout: Duration::from_millis(self.body_idle_timeout_ms),
                post_form_bytes_max: self.post_form_bytes_max,
            },
            sigv2: self.sigv2,
            operator_token: self.operator_token.clone(),
            admin_token: self.admin_token.clone(),
            keyring: railstore_s3::Keyring::default(),
        }
    }
}

/// The whole configuration: the store's, and the server's.
pub struct Loaded {
    pub store: StoreConfig,
    pub server: ServerSection,
}

impl ConfigArgs {
    /// Reads the file (if any) and applies the overrides.
    pub fn load(&self) -> Result<Loaded> {
        let (mut store, server) = match &self.config {
            None => (StoreConfig::default(), ServerSection::default()),
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let mut table: toml::Table =
                    toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
                let server = match table.remove("server") {
                    Some(v) => v
                        .try_into()
                        .with_context(|| format!("[server] in {}", path.display()))?,
                    None => ServerSection::default(),
                };
                let store = StoreConfig::from_table(table)
                    .with_context(|| format!("in {}", path.display()))?;
                (store, server)
            }
        };
        if let Some(d) = &self.data_dir {
            store.data_dir = d.clone();
        }
        Ok(Loaded { store, server })
    }
}

/// The access key pair: from the configuration, else the one kept in the data folder, else a
/// new one (written there). Returns the pair and whether it was just generated.
pub fn credentials(server: &ServerSection, data_dir: &Path) -> Result<(String, String, bool)> {
    if let (Some(a), Some(s)) = (&server.access_key, &server.secret_key) {
        return Ok((a.clone(), s.clone(), false));
    }
    if server.access_key.is_some() != server.secret_key.is_some() {
        bail!("[server] needs both access_key and secret_key, or neither");
    }
    let path = data_dir.join("credentials.toml");
    if path.exists() {
        #[derive(Deserialize)]
        struct Keys {
            access_key: String,
            secret_key: String,
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let k: Keys =
            toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        return Ok((k.access_key, k.secret_key, false));
    }
    use rand::Rng;
    let mut rng = rand::thread_rng();
    const UPPER: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let access: String = "RS"
        .chars()
        .chain((0..18).map(|_| UPPER[rng.gen_range(0..UPPER.len())] as char))
        .collect();
    let secret = random_text(40);
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let text = format!(
        "# railstore's generated S3 access key pair; [server] in the configuration overrides it.\n\
         access_key = \"{access}\"\nsecret_key = \"{secret}\"\n"
    );
    write_private(&path, &text)?;
    Ok((access, secret, true))
}

/// `len` random letters and digits (secret keys, tokens).
pub fn random_text(len: usize) -> String {
    use rand::Rng;
    const ANY: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::thread_rng();
    (0..len)
        .map(|_| ANY[rng.gen_range(0..ANY.len())] as char)
        .collect()
}

/// Takes group and other permissions away from an existing data folder or credentials file
/// (made before files were private); what the process creates is private through its umask
/// (`main`).
pub fn keep_private(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return;
        };
        let mode = meta.permissions().mode() & 0o7777;
        if meta.file_type().is_symlink() || mode & 0o077 == 0 {
            return;
        }
        let private = mode & 0o700;
        match std::fs::set_permissions(path, std::fs::Permissions::from_mode(private)) {
            Ok(()) => tracing::warn!(
                path = %path.display(),
                "permissions were {mode:04o}; now {private:04o}, for its owner alone"
            ),
            Err(e) => tracing::warn!(
                path = %path.display(),
                error = %e,
                "permissions are {mode:04o} (others may read it) and could not be narrowed"
            ),
        }
    }
}

pub fn write_private(path: &Path, text: &str) -> Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    Ok(())
}

/// `railstore init`.
#[derive(Args, Debug)]
pub struct InitArgs {
    /// Where to write the example configuration.
    #[arg(default_value = "railstore.toml")]
    pub path: PathBuf,
    /// Replace an existing file.
    #[arg(long)]
    pub force: bool,
}

pub fn init(args: &InitArgs) -> Result<()> {
    if args.path.exists() && !args.force {
        bail!("{} exists; pass --force to replace it", args.path.display());
    }
    std::fs::write(&args.path, EXAMPLE_TOML)
        .with_context(|| format!("writing {}", args.path.display()))?;
    println!(
        "wrote {}; start with: railstore serve --config {}",
        args.path.display(),
        args.path.display()
    );
    Ok(())
}

/// `railstore status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Ask a running server at this address (host:port) instead of reading the data folder;
    /// by default the server's configured address is asked when the data folder is in use.
    #[arg(long)]
    pub server: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// GETs `path` from the server's operator endpoints, with the operator token when one is set.
fn http_get(addr: &str, path: &str, token: Option<&str>) -> Result<String> {
    let (code, body) = crate::admin_cmd::request(addr, "GET", path, token)?;
    if code != 200 {
        bail!("{addr}{path}: {code}: {}", body.trim());
    }
    Ok(body)
}

pub fn status(args: &StatusArgs) -> Result<()> {
    let loaded = args.config.load()?;
    let ask = |addr: &str| -> Result<StoreStatus> {
        let body = http_get(addr, "/status", loaded.server.operator_token.as_deref())?;
        serde_json::from_str(&body).context("parsing the server's status")
    };
    let status = match &args.server {
        Some(addr) => ask(addr)?,
        None => {
            let rt = runtime()?;
            let mut cfg = loaded.store.clone();
            cfg.separation = None;
            match rt.block_on(Store::open(cfg)) {
                Ok(store) => rt.block_on(async {
                    let s = store.status().await;
                    store.shutdown().await?;
                    anyhow::Ok(s)
                })?,
                Err(e) if e.to_string().contains("in use by another") => {
                    ask(&loaded.server.listen.to_string())?
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
        return Ok(());
    }
    print_status(&status);
    Ok(())
}

fn print_status(s: &StoreStatus) {
    println!("data folder  {}", s.data_dir);
    println!("policy       {}", s.policy);
    match &s.window {
        Some(w) => {
            println!(
                "separation   on: {} of {} colours read{}, {} ms frames, {} partial frames; \
                 reads outside the window: {} serving reads, {} by writes and background work",
                w.size,
                w.colours,
                if w.adaptive {
                    format!(" (adaptive, {}-{})", w.size_range.0, w.size_range.1)
                } else {
                    String::new()
                },
                w.frame_ms,
                w.partial_frames,
                w.off_window_reads,
                w.off_window_other_reads
            );
            let mb = |b: u64| format!("{:.1} MB/s", b as f64 / 1e6);
            println!(
                "writes       {} to the devices, writers absorb {}; device rate {}; buffers \
                 {} MiB each{}",
                mb(w.write_bytes_per_s),
                w.write_bound_bytes_per_s
                    .map_or("(not measured yet)".into(), mb),
                w.device_write_bytes_per_s
                    .map_or("(not measured yet)".into(), mb),
                w.buffer_bytes_max >> 20,
                w.buffer_bytes_needed.map_or(String::new(), |n| format!(
                    " (the Rails rule asks {} MiB)",
                    n.div_ceil(1 << 20)
                ))
            );
        }
        None => println!("separation   {}", if s.separation { "on" } else { "off" }),
    }
    if let Some((id, epoch)) = &s.array {
        println!("array        {id}, epoch {epoch}");
    }
    println!(
        "contents     {} buckets, {} objects, {} bytes, {} multipart uploads",
        s.buckets, s.objects, s.object_bytes, s.uploads
    );
    println!(
        "\n{:>3} {:>6} {:>7} {:>12} {:>14} {:>14} {:>10}  {:<8} path",
        "dev", "colour", "role", "buffer", "used", "capacity", "keys", "health"
    );
    for d in &s.devices {
        println!(
            "{:>3} {:>6} {:>7} {:>12} {:>14} {:>14} {:>10}  {:<8} {}",
            d.index,
            d.colour,
            d.role,
            d.buffer_bytes,
            d.used_bytes,
            d.capacity_bytes,
            d.keys,
            match (d.healthy, d.recorded) {
                (_, Some(railstore_store::DeviceHealth::Rebuilding)) => "REBUILD",
                (true, _) => "ok",
                (false, _) => "FAILED",
            },
            d.path.as_deref().unwrap_or("(memory)")
        );
        if let Some(e) = &d.error {
            println!("      {e}");
        }
    }
    if let Some(r) = &s.at_risk {
        println!(
            "\nat risk      devices {:?} out of service: {} objects with pieces on them, {} with \
             no redundancy left, {} unreadable",
            r.devices_out, r.objects_at_risk, r.objects_without_redundancy, r.objects_unreadable
        );
        for name in &r.sample {
            println!("             {name}");
        }
    }
    if let Some(r) = &s.repair {
        let what = r
            .device
            .map_or(r.kind.clone(), |d| format!("{} of device {d}", r.kind));
        println!(
            "{}{what}: {} of {} objects and sets, {} bytes written{}",
            if s.at_risk.is_some() { "" } else { "\n" },
            r.items_done,
            r.items_total,
            r.bytes_done,
            if r.running { " (running)" } else { "" }
        );
    }
    if let Some(r) = &s.last_scrub {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |t| t.as_millis() as u64);
        println!(
            "last scrub   {} s ago ({}): {} objects, {} repaired, {} lost{}",
            now_ms.saturating_sub(r.finished_unix_ms) / 1000,
            r.reason,
            r.objects,
            r.objects_repaired,
            r.objects_lost,
            r.error
                .as_ref()
                .map_or(String::new(), |e| format!(", stopped: {e}"))
        );
    }
}

pub fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Options of a repair run.
#[derive(Args, Debug, Clone)]
pub struct RepairArgs {
    /// Objects repaired at once.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Most bytes per second the repair writes (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub write_bytes_per_s_max: u64,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

impl RepairArgs {
    fn options(&self) -> RepairOptions {
        RepairOptions {
            concurrency: self.concurrency.max(1),
            write_bytes_per_s_max: (self.write_bytes_per_s_max > 0)
                .then_some(self.write_bytes_per_s_max),
        }
    }
}

/// `railstore scrub`.
#[derive(Args, Debug)]
pub struct ScrubArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(flatten)]
    pub repair: RepairArgs,
}

/// `railstore rebuild`.
#[derive(Args, Debug)]
pub struct RebuildArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The device to rebuild (its index in the array, as `railstore status` shows). Its old
    /// contents, if any, are moved aside and it is rebuilt empty from the others.
    #[arg(long)]
    pub device: usize,
    #[command(flatten)]
    pub repair: RepairArgs,
}

/// Shows a repair's progress until `work` ends.
async fn with_progress<F>(
    quiet: bool,
    what: &str,
    progress: Arc<RepairProgress>,
    work: F,
) -> Result<RepairReport>
where
    F: std::future::Future<Output = railstore_store::Result<RepairReport>>,
{
    let bar = std::sync::Mutex::new(railstore_bench::progress::bar(
        quiet,
        None,
        &format!("{what}: listing"),
    ));
    let shown = async {
        let mut counting = true;
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let total = progress.items_total.load(Ordering::Relaxed);
            let mut b = bar.lock().unwrap();
            if total > 0 && counting {
                // Listing is over: a bar of known length replaces the spinner.
                counting = false;
                b.finish_and_clear();
                *b = railstore_bench::progress::bar(quiet, Some(total), what);
            }
            b.set_position(if counting {
                progress.keys_listed.load(Ordering::Relaxed)
            } else {
                progress.items_done.load(Ordering::Relaxed)
            });
        }
    };
    let report = tokio::select! {
        r = work => r,
        _ = shown => unreachable!("the display loop never ends"),
    };
    bar.lock().unwrap().finish_and_clear();
    Ok(report?)
}

fn print_report(what: &str, r: &RepairReport) {
    println!(
        "{what}: {} objects ({} repaired), {} packing sets ({} repaired, {} reclaimed, {} lost), \
         {} pieces rewritten, {} bytes written in {:.1} s",
        r.objects,
        r.objects_repaired,
        r.sets,
        r.sets_repaired,
        r.sets_reclaimed,
        r.sets_lost,
        r.pieces_repaired,
        r.bytes_written,
        r.elapsed.as_secs_f64()
    );
    if !r.objects_lost.is_empty() {
        println!(
            "{} objects LOST (more pieces missing than their mechanism tolerates)",
            r.objects_lost.len()
        );
    }
}

pub fn scrub(args: &ScrubArgs) -> Result<()> {
    let loaded = args.config.load()?;
    let rt = runtime()?;
    rt.block_on(async {
        let mut cfg = loaded.store;
        cfg.separation = None;
        let store = Store::open(cfg)
            .await
            .context("opening the store (stop a running server first)")?;
        let progress = Arc::new(RepairProgress::default());
        let report = with_progress(
            args.repair.quiet,
            "scrub",
            progress.clone(),
            store.scrub(args.repair.options(), progress),
        )
        .await?;
        store.shutdown().await?;
        print_report("scrub", &report);
        if !report.objects_lost.is_empty() {
            bail!("some objects are lost");
        }
        Ok(())
    })
}

pub fn rebuild(args: &RebuildArgs) -> Result<()> {
    let loaded = args.config.load()?;
    let rt = runtime()?;
    rt.block_on(async {
        let progress = Arc::new(RepairProgress::default());
        let report = with_progress(
            args.repair.quiet,
            &format!("rebuild of device {}", args.device),
            progress.clone(),
            Store::rebuild_offline(loaded.store, args.device, args.repair.options(), progress),
        )
        .await?;
        print_report(&format!("rebuild of device {}", args.device), &report);
        if !report.objects_lost.is_empty() {
            bail!("some objects are lost");
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_server_table_is_the_default() {
        let mut table: toml::Table = toml::from_str(EXAMPLE_TOML).unwrap();
        let server: ServerSection = table.remove("server").unwrap().try_into().unwrap();
        assert_eq!(
            format!("{server:?}"),
            format!("{:?}", ServerSection::default())
        );
        let s3 = server.s3_config("a".into(), "s".into());
        assert_eq!(s3.limits, railstore_s3::Limits::default());
        assert!(!s3.sigv2);
        assert!(s3.operator_token.is_none());
    }

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let server: ServerSection = toml::from_str(
            "secret_key = \"s3cr3t-key\"\naccess_key = \"AK\"\noperator_token = \"t0ken\"\n",
        )
        .unwrap();
        let shown = format!(
            "{server:?} {:?}",
            server.s3_config("AK".into(), "s3cr3t-key".into())
        );
        assert!(shown.contains("AK"), "{shown}");
        assert!(
            !shown.contains("s3cr3t-key") && !shown.contains("t0ken"),
            "{shown}"
        );
    }

    #[test]
    fn more_users_come_from_the_server_table_and_must_not_clash() {
        let text = |second_id: &str| {
            format!(
                "user_id = \"main\"\n\
                 [[users]]\nid = \"alt\"\naccess_key = \"AK2\"\nsecret_key = \"alt-s3cr3t\"\n\
                 [[users]]\nid = \"{second_id}\"\ndisplay_name = \"Carol\"\nemail = \"c@x\"\n\
                 access_key = \"AK3\"\nsecret_key = \"s3\"\n"
            )
        };
        let server: ServerSection = toml::from_str(&text("carol")).unwrap();
        let users = server.s3_config("AK1".into(), "s1".into()).users().unwrap();
        assert_eq!(users.main().id, "main");
        assert_eq!(users.main().access_key, "AK1");
        assert_eq!(users.by_access_key("AK2").unwrap().display_name, "alt");
        assert_eq!(users.by_email("c@x").unwrap().display_name, "Carol");
        let shown = format!("{server:?}");
        assert!(
            shown.contains("AK2") && !shown.contains("alt-s3cr3t"),
            "{shown}"
        );
        let clash: ServerSection = toml::from_str(&text("alt")).unwrap();
        let e = clash
            .s3_config("AK1".into(), "s1".into())
            .users()
            .unwrap_err();
        assert!(e.to_string().contains("two users have the id"), "{e}");
    }
}
