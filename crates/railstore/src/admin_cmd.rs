//! `railstore device fail|replace|add|remove` and `railstore repair scrub|status`: the admin API of a running
//! server (docs/admin.md), from the command line. The admin token comes from `--admin-token`,
//! `RAILSTORE_ADMIN_TOKEN`, `[server] admin_token`, or the data folder's `admin-token` file
//! (made by `serve`), in that order.

use crate::server_cmd::{write_private, ConfigArgs, ServerSection};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use railstore_store::RepairStatus;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

/// The file in the data folder holding the generated admin token.
const ADMIN_TOKEN_FILE: &str = "admin-token";

/// Which server, and how to authenticate to its admin API.
#[derive(Args, Debug, Clone)]
pub struct AdminArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The server (host:port); by default the configured listening address.
    #[arg(long)]
    pub server: Option<String>,
    /// The admin token (see the module docs for where it is found otherwise).
    #[arg(long, env = "RAILSTORE_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
}

/// `railstore device …`.
#[derive(Subcommand, Debug)]
pub enum DeviceCommand {
    /// Take a device out of service now (its pieces are decoded around until it is replaced).
    Fail {
        /// The device (its index, as `railstore status` shows).
        device: usize,
        /// Why, recorded with its state.
        #[arg(long, default_value = "failed by the operator")]
        reason: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Rebuild a failed device onto an empty device at its place while the server serves,
    /// showing progress until it is done.
    Replace {
        /// The device.
        device: usize,
        /// Rebuild onto a new device at this absolute path on the server's machine (absent, or
        /// an empty folder or file) instead of the configured place; the server records it and
        /// opens the device there from then on.
        #[arg(long)]
        path: Option<std::path::PathBuf>,
        /// Start it and return at once.
        #[arg(long)]
        no_wait: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Add devices to the array while the server serves (as `railstore grow` does with it
    /// stopped): a new layout epoch with groups of its own; the objects whose group changed
    /// move to them (showing progress until done).
    Add {
        /// How many: a multiple of the group width (6 for the embedded default).
        #[arg(long)]
        devices: usize,
        /// Where each added device lives on the server's machine (absolute, absent or empty;
        /// one per device); default: the data folder's `devices/`.
        #[arg(long = "path")]
        paths: Vec<std::path::PathBuf>,
        /// Start it and return at once.
        #[arg(long)]
        no_wait: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Take the devices the last grow added out of the array while the server serves: their
    /// objects move to the other devices (showing progress until done), and the devices leave
    /// the array at the server's next clean shutdown.
    Remove {
        /// Start it and return at once.
        #[arg(long)]
        no_wait: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
}

/// `railstore repair …`.
#[derive(Subcommand, Debug)]
pub enum RepairCommand {
    /// Verify every object and set on the running server and repair what is wrong, showing
    /// progress until it is done (the report is kept in the data folder).
    Scrub {
        /// Start it and return at once.
        #[arg(long)]
        no_wait: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// The rebuild or scrub running (or last run) on the server.
    Status {
        /// Follow it until it ends.
        #[arg(long)]
        watch: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
}

/// The admin token `serve` uses: `[server] admin_token`, else the data folder's file, made on
/// first start (mode 0600).
pub fn serve_admin_token(server: &ServerSection, data_dir: &Path) -> Result<String> {
    if let Some(t) = &server.admin_token {
        return Ok(t.clone());
    }
    let path = data_dir.join(ADMIN_TOKEN_FILE);
    if let Ok(t) = std::fs::read_to_string(&path) {
        return Ok(t.trim().to_string());
    }
    let token = crate::server_cmd::random_text(40);
    write_private(&path, &format!("{token}\n"))?;
    Ok(token)
}

pub(crate) struct Target {
    addr: String,
    token: String,
}

impl AdminArgs {
    pub(crate) fn target(&self) -> Result<Target> {
        let loaded = self.config.load()?;
        let addr = self
            .server
            .clone()
            .unwrap_or_else(|| loaded.server.listen.to_string());
        let token = match (&self.admin_token, &loaded.server.admin_token) {
            (Some(t), _) | (None, Some(t)) => t.clone(),
            (None, None) => {
                let path = loaded.store.data_dir.join(ADMIN_TOKEN_FILE);
                std::fs::read_to_string(&path)
                    .map(|t| t.trim().to_string())
                    .with_context(|| {
                        format!(
                            "no admin token: give --admin-token (or RAILSTORE_ADMIN_TOKEN, or \
                             [server] admin_token), or run where {} is readable",
                            path.display()
                        )
                    })?
            }
        };
        Ok(Target { addr, token })
    }
}

/// One HTTP/1.1 request without a body; returns the status code and the body.
pub fn request(addr: &str, method: &str, path: &str, token: Option<&str>) -> Result<(u16, String)> {
    let mut s =
        std::net::TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let (head, body) = resp
        .split_once("\r\n\r\n")
        .context("a malformed HTTP response")?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("a malformed HTTP status line")?;
    Ok((code, body.to_string()))
}

/// Calls the admin API; an error answer becomes an error with the server's message.
pub(crate) fn call(t: &Target, method: &str, path: &str) -> Result<String> {
    let (code, body) = request(&t.addr, method, path, Some(&t.token))?;
    if (200..300).contains(&code) {
        return Ok(body);
    }
    let message = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or(body);
    bail!("{method} {path}: {code}: {message}")
}

/// `text` for a query string: unreserved bytes as they are, the rest as `%XX`.
pub(crate) fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub fn device(cmd: &DeviceCommand) -> Result<()> {
    match cmd {
        DeviceCommand::Fail {
            device,
            reason,
            admin,
        } => {
            let t = admin.target()?;
            let reason = percent_encode(reason);
            call(
                &t,
                "POST",
                &format!("/admin/v1/devices/{device}/fail?reason={reason}"),
            )?;
            println!("device {device} is out of service; replace it with `railstore device replace {device}`");
            Ok(())
        }
        DeviceCommand::Replace {
            device,
            path,
            no_wait,
            admin,
        } => {
            let t = admin.target()?;
            let query = match path {
                Some(p) => format!("?path={}", percent_encode(&p.to_string_lossy())),
                None => String::new(),
            };
            call(
                &t,
                "POST",
                &format!("/admin/v1/devices/{device}/replace{query}"),
            )?;
            match path {
                Some(p) => println!(
                    "rebuilding device {device} onto {} while serving",
                    p.display()
                ),
                None => println!("rebuilding device {device} while serving"),
            }
            if *no_wait {
                return Ok(());
            }
            follow(&t)
        }
        DeviceCommand::Add {
            devices,
            paths,
            no_wait,
            admin,
        } => {
            let t = admin.target()?;
            let mut query = format!("?count={devices}");
            for p in paths {
                query.push_str(&format!("&path={}", percent_encode(&p.to_string_lossy())));
            }
            let answer = call(&t, "POST", &format!("/admin/v1/devices/add{query}"))?;
            println!(
                "added devices {} while serving; the objects whose group changed move to them",
                devices_in(&answer, "added")?
            );
            if *no_wait {
                return Ok(());
            }
            follow(&t)
        }
        DeviceCommand::Remove { no_wait, admin } => {
            let t = admin.target()?;
            let answer = call(&t, "POST", "/admin/v1/devices/remove")?;
            println!(
                "draining devices {} while serving; they leave the array at the server's next \
                 clean shutdown",
                devices_in(&answer, "removing")?
            );
            if *no_wait {
                return Ok(());
            }
            follow(&t)
        }
    }
}

pub fn repair(cmd: &RepairCommand) -> Result<()> {
    let (watch, json, admin) = match cmd {
        RepairCommand::Scrub { no_wait, admin } => {
            let t = admin.target()?;
            call(&t, "POST", "/admin/v1/scrub")?;
            println!("scrubbing while serving");
            return if *no_wait { Ok(()) } else { follow(&t) };
        }
        RepairCommand::Status { watch, json, admin } => (watch, json, admin),
    };
    let t = admin.target()?;
    if *watch {
        return follow(&t);
    }
    let (code, body) = request(&t.addr, "GET", "/admin/v1/repair", Some(&t.token))?;
    if code == 404 {
        println!("no rebuild or scrub has run since the server started");
        return Ok(());
    }
    if code != 200 {
        bail!("GET /admin/v1/repair: {code}: {body}");
    }
    if *json {
        println!("{body}");
        return Ok(());
    }
    let r: RepairStatus = serde_json::from_str(&body).context("parsing the repair status")?;
    println!("{}", describe(&r));
    Ok(())
}

/// The devices the server's JSON `answer` lists under `field`, as "6, 7, 8".
fn devices_in(answer: &str, field: &str) -> Result<String> {
    let answer: serde_json::Value = serde_json::from_str(answer).context("the server's answer")?;
    let devices: Vec<String> = answer[field]
        .as_array()
        .map(|a| a.iter().map(|d| d.to_string()).collect())
        .unwrap_or_default();
    Ok(devices.join(", "))
}

/// Shows the rebuild's progress until it ends; fails when it stopped without finishing.
fn follow(t: &Target) -> Result<()> {
    let mut bar: Option<indicatif::ProgressBar> = None;
    loop {
        let r: RepairStatus = serde_json::from_str(&call(t, "GET", "/admin/v1/repair")?)
            .context("parsing the repair status")?;
        if r.items_total > 0 {
            let b = bar.get_or_insert_with(|| {
                railstore_bench::progress::bar(false, Some(r.items_total), &r.kind)
            });
            b.set_position(r.items_done);
        }
        if !r.running {
            if let Some(b) = bar {
                b.finish_and_clear();
            }
            println!("{}", describe(&r));
            if let Some(e) = &r.error {
                bail!("{} stopped: {e}", what(&r));
            }
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// "the rebuild of device N" or "the scrub".
fn what(r: &RepairStatus) -> String {
    match r.device {
        Some(d) => format!("the {} of device {d}", r.kind),
        None => format!("the {}", r.kind),
    }
}

fn describe(r: &RepairStatus) -> String {
    if r.queued {
        return format!(
            "{}: queued (starts once the index has loaded and no rebuild or scrub runs)",
            what(r)
        );
    }
    let state = match (&r.error, r.running) {
        (_, true) => "running".to_string(),
        (None, false) => "finished".to_string(),
        (Some(e), false) => format!("stopped ({e})"),
    };
    let eta = r
        .eta_s
        .map_or(String::new(), |s| format!(", about {s:.0} s left"));
    format!(
        "{}: {state}; {} of {} objects and sets, {} bytes written \
         ({:.1} MB/s) in {:.1} s{eta}; {} objects lost",
        what(r),
        r.items_done,
        r.items_total,
        r.bytes_done,
        r.bytes_per_s / 1e6,
        r.elapsed_s,
        r.objects_lost
    )
}
