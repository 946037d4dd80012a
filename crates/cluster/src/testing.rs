//! A throwaway etcd process on loopback ports, for tests and benchmarks: the real server
//! (Debian's `etcd-server`), never a stand-in.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// An etcd server in a temporary folder, killed on drop.
pub struct EtcdProcess {
    child: Child,
    /// Its client URL (`http://127.0.0.1:PORT`).
    pub client_url: String,
    /// `etcd://127.0.0.1:PORT`, the form railstore takes.
    pub cluster_url: String,
    _dir: tempfile::TempDir,
}

/// The etcd binary: `RAILSTORE_ETCD`, else `etcd` on the PATH; `None` when neither runs.
pub fn etcd_binary() -> Option<PathBuf> {
    let candidate = std::env::var_os("RAILSTORE_ETCD")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("etcd"));
    let runs = Command::new(&candidate)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    runs.then_some(candidate)
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl EtcdProcess {
    /// Starts etcd and waits (up to 30 s) until it answers. `Ok(None)` when no etcd binary is
    /// found and `RAILSTORE_REQUIRE_ETCD` is unset (the caller says it skipped); an error when
    /// it is set.
    pub fn start() -> std::io::Result<Option<EtcdProcess>> {
        let Some(binary) = etcd_binary() else {
            if std::env::var_os("RAILSTORE_REQUIRE_ETCD").is_some() {
                return Err(std::io::Error::other(
                    "RAILSTORE_REQUIRE_ETCD is set and no etcd was found (install etcd-server, or set RAILSTORE_ETCD)",
                ));
            }
            return Ok(None);
        };
        let dir = tempfile::tempdir()?;
        let (client, peer) = (free_port()?, free_port()?);
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = Command::new(binary)
            .arg("--name=test")
            .arg(format!("--data-dir={}", dir.path().join("etcd").display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=test={peer_url}"))
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(
                dir.path().join("etcd.log"),
            )?))
            .spawn()?;
        let mut etcd = EtcdProcess {
            child,
            cluster_url: format!("etcd://127.0.0.1:{client}"),
            client_url,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = etcd.child.try_wait()? {
                let log =
                    std::fs::read_to_string(etcd._dir.path().join("etcd.log")).unwrap_or_default();
                return Err(std::io::Error::other(format!(
                    "etcd exited ({status}): {log}"
                )));
            }
            if etcd.answers() {
                return Ok(Some(etcd));
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::other("etcd did not answer within 30 s"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether its health endpoint says it is healthy.
    fn answers(&self) -> bool {
        use std::io::{Read, Write};
        let addr = self.client_url.trim_start_matches("http://");
        let Ok(mut s) = std::net::TcpStream::connect(addr) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let req = format!("GET /health HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        let mut out = String::new();
        s.write_all(req.as_bytes()).is_ok()
            && s.read_to_string(&mut out).is_ok()
            && out.contains("\"health\":\"true\"")
    }
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
