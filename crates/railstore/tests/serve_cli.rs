//! `railstore serve` as scripts use it (the interface): `--data DIR --listen HOST:PORT`,
//! keys from `--access-key`/`--secret-key` or `RAILSTORE_ACCESS_KEY`/`RAILSTORE_SECRET_KEY`, a
//! `listening on` line once it accepts requests, and a clean exit on SIGTERM.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

fn config_file(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("railstore.toml");
    std::fs::write(
        &path,
        "[devices]\ncapacity_bytes = 1073741824\ndirect_io = false\n",
    )
    .unwrap();
    path
}

/// A running server and every line it has logged so far.
struct Served {
    child: Child,
    lines: mpsc::Receiver<String>,
    log: Vec<String>,
}

impl Served {
    fn start(cmd: &mut Command) -> Served {
        let mut child = cmd.stderr(Stdio::piped()).spawn().expect("starts");
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Served {
            child,
            lines,
            log: Vec::new(),
        }
    }

    /// Waits for a logged line containing `needle`; returns it.
    fn wait_for(&mut self, needle: &str) -> String {
        loop {
            match self.lines.recv_timeout(Duration::from_secs(120)) {
                Ok(line) => {
                    self.log.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => panic!("no line with {needle:?}; log:\n{}", self.log.join("\n")),
            }
        }
    }

    /// SIGTERM, then the exit status and the rest of the log.
    fn terminate(mut self) -> (std::process::ExitStatus, String) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        let status = self.child.wait().unwrap();
        self.log.extend(self.lines.try_iter());
        (status, self.log.join("\n"))
    }
}

/// `railstore bench s3` against `endpoint` with these keys: (success, errors counted).
fn load(endpoint: &str, access: &str, secret: &str) -> (bool, u64, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_railstore"))
        .args([
            "bench",
            "s3",
            "--endpoint",
            endpoint,
            "--access-key",
            access,
            "--secret-key",
            secret,
            "--workload",
            "put,get",
            "--size",
            "4KiB",
            "--clients",
            "2",
            "--ops",
            "40",
            "--objects",
            "10",
            "--warmup",
            "0s",
            "--quiet",
            "--no-plots",
            "--json",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let errors = serde_json::from_str::<serde_json::Value>(&stdout)
        .ok()
        .and_then(|r| r["errors"].as_u64())
        .unwrap_or(u64::MAX);
    (out.status.success(), errors, format!("{stdout}\n{stderr}"))
}

#[test]
fn serve_takes_keys_from_the_environment_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut served = Served::start(
        Command::new(env!("CARGO_BIN_EXE_railstore"))
            .arg("serve")
            .arg("--config")
            .arg(config_file(dir.path()))
            .arg("--data")
            .arg(&data)
            .args(["--listen", "127.0.0.1:0"])
            .env("RAILSTORE_ACCESS_KEY", "env-access")
            .env("RAILSTORE_SECRET_KEY", "env-secret-0123456789"),
    );
    let line = served.wait_for("listening on");
    let endpoint = line[line.find("http://").expect("an address")..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    // The given pair signs requests; no pair is generated into the data folder.
    let (ok, errors, out) = load(&endpoint, "env-access", "env-secret-0123456789");
    assert!(ok && errors == 0, "{out}");
    assert!(!data.join("credentials.toml").exists());
    let (_, errors, out) = load(&endpoint, "env-access", "wrong-secret");
    assert!(errors > 0, "a wrong secret was accepted:\n{out}");

    let (status, log) = served.terminate();
    assert!(status.success(), "exit {status:?}; log:\n{log}");
    assert!(log.contains("stopping"), "{log}");
    // The shutdown was clean: the next start does not scrub.
    let mut again = Served::start(
        Command::new(env!("CARGO_BIN_EXE_railstore"))
            .arg("serve")
            .arg("--config")
            .arg(config_file(dir.path()))
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen", "127.0.0.1:0"])
            .args([
                "--access-key",
                "flag-access",
                "--secret-key",
                "flag-secret-0123",
            ]),
    );
    again.wait_for("listening on");
    let (status, log) = again.terminate();
    assert!(status.success(), "{log}");
    assert!(log.contains("flag-access"), "{log}");
    assert!(!log.contains("did not shut down cleanly"), "{log}");
}

#[test]
fn serve_refuses_half_a_key_pair() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_railstore"))
        .arg("serve")
        .arg("--config")
        .arg(config_file(dir.path()))
        .arg("--data")
        .arg(dir.path().join("data"))
        .args(["--listen", "127.0.0.1:0", "--access-key", "only-access"])
        .env_remove("RAILSTORE_SECRET_KEY")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--secret-key"), "{stderr}");
    assert!(!dir.path().join("data").exists(), "something was created");
}
