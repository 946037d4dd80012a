//! What the tests that start `railstore serve` share: the server process and its log, a
//! bare HTTP client, the CLI, and a small S3 load from `railstore bench s3`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A configuration with file devices of 1 GiB and no direct I/O (tmpfs has none).
pub fn config_file(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("railstore.toml");
    std::fs::write(
        &path,
        "[devices]\ncapacity_bytes = 1073741824\ndirect_io = false\n",
    )
    .unwrap();
    path
}

/// `railstore serve` on free ports of 127.0.0.1 (S3 and NBD) with [`config_file`] in `dir`, its data in
/// `dir/data`, and this key pair from the environment: the server, once it listens, and its
/// endpoint.
pub fn serve_in(dir: &Path, access: &str, secret: &str) -> (Served, String) {
    let mut served = Served::start(
        Command::new(env!("CARGO_BIN_EXE_railstore"))
            .arg("serve")
            .arg("--config")
            .arg(config_file(dir))
            .arg("--data")
            .arg(dir.join("data"))
            .args(["--listen", "127.0.0.1:0", "--nbd-listen", "127.0.0.1:0"])
            .env("RAILSTORE_ACCESS_KEY", access)
            .env("RAILSTORE_SECRET_KEY", secret),
    );
    let endpoint = endpoint_of(&mut served);
    (served, endpoint)
}

/// A running server and every line it has logged so far.
pub struct Served {
    pub child: Child,
    lines: mpsc::Receiver<String>,
    pub log: Vec<String>,
}

impl Served {
    pub fn start(cmd: &mut Command) -> Served {
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
    pub fn wait_for(&mut self, needle: &str) -> String {
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
    pub fn terminate(mut self) -> (std::process::ExitStatus, String) {
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

impl Drop for Served {
    /// A test that fails half-way leaves no server behind.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `railstore bench s3` against `endpoint` with these keys: (success, errors counted).
pub fn load(endpoint: &str, access: &str, secret: &str) -> (bool, u64, String) {
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

/// The address a started server logged.
pub fn endpoint_of(served: &mut Served) -> String {
    let line = served.wait_for("listening on");
    line[line.find("http://").expect("an address")..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// A bare `GET path` with `extra` header lines: (status line, body).
pub fn http_get(endpoint: &str, path: &str, extra: &str) -> (String, String) {
    use std::io::{Read, Write};
    let addr = endpoint.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{extra}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

/// The first file named `name` on `PATH`.
pub fn on_path(name: &str) -> Option<std::path::PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// A finished command's success and its stdout then stderr.
pub fn outcome(out: std::process::Output) -> (bool, String) {
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `railstore` with these arguments: (success, stdout and stderr).
pub fn cli(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_railstore"))
        .args(args)
        .env_remove("RAILSTORE_ADMIN_TOKEN")
        .output()
        .unwrap();
    outcome(out)
}

/// Runs `cmd`, which must succeed; returns its stdout and stderr.
pub fn succeeded(cmd: &mut Command) -> (String, String) {
    let out = cmd.output().expect("running railstore");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        out.status.success(),
        "{cmd:?} failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    (stdout, stderr)
}

/// Runs `cmd`, which must succeed and print a JSON report alone on stdout (a bare `--json`
/// or `--json -`); returns the report and stderr, where the lines for people go.
pub fn json_report(cmd: &mut Command) -> (serde_json::Value, String) {
    let (stdout, stderr) = succeeded(cmd);
    let report = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{stdout}\nstderr:\n{stderr}"));
    (report, stderr)
}
