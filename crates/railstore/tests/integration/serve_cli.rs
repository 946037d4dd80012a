//! `railstore serve` as scripts use it (the interface): `--data DIR --listen HOST:PORT`,
//! keys from `--access-key`/`--secret-key` or `RAILSTORE_ACCESS_KEY`/`RAILSTORE_SECRET_KEY`, a
//! `listening on` line once it accepts requests, and a clean exit on SIGTERM.

use crate::common;

use common::{cli, config_file, endpoint_of, http_get, load, serve_in, Served};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

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

/// A server that opened its store and then cannot listen (the port is taken) closes the store
/// as cleanly as a SIGTERM would: the next start neither scrubs nor finds a device failed.
#[test]
fn a_server_that_cannot_listen_closes_its_store_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let serve = |listen: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_railstore"));
        c.arg("serve")
            .arg("--config")
            .arg(config_file(dir.path()))
            .arg("--data")
            .arg(&data)
            .args(["--listen", listen])
            .args(["--access-key", "ak", "--secret-key", "secret-0123456789"])
            .env_remove("RUST_LOG");
        c
    };
    let mut served = Served::start(&mut serve("127.0.0.1:0"));
    let endpoint = endpoint_of(&mut served);
    let (ok, errors, out) = load(&endpoint, "ak", "secret-0123456789");
    assert!(ok && errors == 0, "{out}");
    let (status, log) = served.terminate();
    assert!(status.success(), "{log}");

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().to_string();
    let out = serve(&port).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(&format!("listening on {port}")), "{err}");
    assert!(err.contains("stopping after an error"), "{err}");
    drop(taken);

    let mut served = Served::start(&mut serve("127.0.0.1:0"));
    served.wait_for("listening on");
    let (status, log) = served.terminate();
    assert!(status.success(), "{log}");
    assert!(!log.contains("did not shut down cleanly"), "{log}");
    assert!(!log.contains("marked failed"), "{log}");
}

/// Paths under `dir` (itself included) that group or others may use.
#[cfg(unix)]
fn not_private(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(p) = todo.pop() {
        let meta = std::fs::symlink_metadata(&p).unwrap();
        if meta.file_type().is_symlink() {
            continue;
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            out.push(format!("{} {mode:04o}", p.display()));
        }
        if meta.is_dir() {
            todo.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        }
    }
    out
}

#[cfg(unix)]
#[test]
fn serve_never_logs_the_secret_key_and_keeps_its_files_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let start = || {
        Served::start(
            Command::new(env!("CARGO_BIN_EXE_railstore"))
                .arg("serve")
                .arg("--config")
                .arg(config_file(dir.path()))
                .arg("--data")
                .arg(&data)
                .args(["--listen", "127.0.0.1:0"])
                .env_remove("RAILSTORE_ACCESS_KEY")
                .env_remove("RAILSTORE_SECRET_KEY")
                .env_remove("RAILSTORE_OPERATOR_TOKEN")
                .env_remove("RUST_LOG"),
        )
    };
    let mut served = start();
    let generated = served.wait_for("generated an access key pair");
    let endpoint = endpoint_of(&mut served);
    let keys: toml::Table =
        toml::from_str(&std::fs::read_to_string(data.join("credentials.toml")).unwrap()).unwrap();
    let access = keys["access_key"].as_str().unwrap().to_string();
    let secret = keys["secret_key"].as_str().unwrap().to_string();
    // The log names the access key and the file, never the secret.
    assert!(generated.contains(&access), "{generated}");
    assert!(generated.contains("credentials.toml"), "{generated}");
    // The pair from the file signs requests (objects land in segment files).
    let (ok, errors, out) = load(&endpoint, &access, &secret);
    assert!(ok && errors == 0, "{out}");
    let (status, log) = served.terminate();
    assert!(status.success(), "{log}");
    assert!(
        !log.contains(&secret),
        "the secret key is in the log:\n{log}"
    );
    // Everything the server made is its owner's alone: 0600 files, 0700 folders.
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data.join("credentials.toml")), 0o600);
    assert_eq!(mode(&data), 0o700);
    // The SSE master key was made on first start, private, and said so.
    let master = data.join("sse-master.key");
    assert_eq!(mode(&master), 0o600);
    assert!(log.contains("made the master key"), "{log}");
    let master_key = std::fs::read_to_string(&master).unwrap();
    assert_eq!(master_key.trim().len(), 64);
    assert!(std::fs::read_dir(data.join("devices")).is_ok());
    let open = not_private(&data);
    assert!(open.is_empty(), "readable by others: {open:#?}");

    // A data folder and key file made readable by others are narrowed at the next start.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        data.join("credentials.toml"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let mut served = start();
    served.wait_for("listening on");
    let (status, log) = served.terminate();
    assert!(status.success(), "{log}");
    assert!(log.contains(&access) && !log.contains(&secret), "{log}");
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("credentials.toml")), 0o600);
    // The next start reads the same master key rather than making another.
    assert!(!log.contains("made the master key"), "{log}");
    assert_eq!(std::fs::read_to_string(&master).unwrap(), master_key);
    assert!(
        !log.contains(master_key.trim()),
        "the master key is in the log"
    );
    // A missing or different master key stops the start; it is never silently replaced.
    let refused = |why: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_railstore"))
            .arg("serve")
            .arg("--config")
            .arg(config_file(dir.path()))
            .arg("--data")
            .arg(&data)
            .args(["--listen", "127.0.0.1:0"])
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!out.status.success() && err.contains(why), "{err}");
    };
    std::fs::remove_file(&master).unwrap();
    refused("is missing");
    assert!(!master.exists(), "no new key was made");
    std::fs::write(&master, format!("{}\n", "ab".repeat(32))).unwrap();
    refused("is not the one");
    std::fs::write(&master, &master_key).unwrap();
}

/// VmHWM (the peak resident set) of a process, in bytes.
#[cfg(target_os = "linux")]
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM");
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib << 10
}

#[cfg(target_os = "linux")]
#[test]
fn an_anonymous_half_gigabyte_form_post_does_not_grow_the_server() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let mut served = Served::start(
        Command::new(env!("CARGO_BIN_EXE_railstore"))
            .arg("serve")
            .arg("--config")
            .arg(config_file(dir.path()))
            .arg("--data")
            .arg(dir.path().join("data"))
            .args(["--listen", "127.0.0.1:0"])
            .env("RAILSTORE_ACCESS_KEY", "form-access")
            .env("RAILSTORE_SECRET_KEY", "form-secret-0123456789"),
    );
    let endpoint = endpoint_of(&mut served);
    let (status, _) = http_get(&endpoint, "/status", "");
    assert!(status.contains(" 200 "), "{status}");
    let pid = served.child.id();
    let before = peak_rss(pid);

    // `curl -F key=x -F file=@big`, the file 512 MiB made on the fly.
    const FILE: u64 = 512 << 20;
    let addr = endpoint.trim_start_matches("http://").to_string();
    let prefix = b"--b0undary\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nx\r\n\
        --b0undary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big\"\r\n\
        Content-Type: application/octet-stream\r\n\r\n";
    let suffix = b"\r\n--b0undary--\r\n";
    let len = prefix.len() as u64 + FILE + suffix.len() as u64;
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut r = s.try_clone().unwrap();
    r.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    });
    write!(
        s,
        "POST /anybucket HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: curl/8\r\n\
         Content-Type: multipart/form-data; boundary=b0undary\r\nContent-Length: {len}\r\n\r\n"
    )
    .unwrap();
    let mut written = 0u64;
    if s.write_all(prefix).is_ok() {
        let chunk = vec![0x5au8; 1 << 20];
        while written < FILE {
            match s.write(&chunk[..chunk.len().min((FILE - written) as usize)]) {
                Ok(0) | Err(_) => break,
                Ok(n) => written += n as u64,
            }
        }
        if written == FILE {
            let _ = s.write_all(suffix);
        }
    }
    let _ = s.shutdown(std::net::Shutdown::Write);
    let response = reader.join().unwrap();
    let after = peak_rss(pid);
    eprintln!("peak RSS {before} -> {after} bytes; {written} file bytes written");
    assert!(
        after.saturating_sub(before) <= 8 << 20,
        "the server's peak RSS grew from {before} to {after} bytes"
    );
    assert!(
        written < 64 << 20,
        "the server took {written} of the file's {FILE} bytes before answering"
    );
    // No such bucket: S3's answer to anyone, given before the file is read (a bucket that
    // exists but does not let everyone write answers 403 the same way: the SDK tests).
    assert!(response.starts_with("HTTP/1.1 404"), "{response}");
    assert!(response.contains("<Code>NoSuchBucket</Code>"), "{response}");
    let (status, log) = served.terminate();
    assert!(status.success(), "{log}");
}

#[test]
fn serve_takes_its_limits_and_operator_token_from_the_configuration() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("railstore.toml");
    std::fs::write(
        &config,
        "[server]\noperator_token = \"from-the-file\"\nheader_read_timeout_ms = 300\n\
         connections_max = 8\nbody_idle_timeout_ms = 1000\npost_form_bytes_max = 4096\n\
         sigv2 = false\n\
         [devices]\ncapacity_bytes = 1073741824\ndirect_io = false\n",
    )
    .unwrap();
    let mut served = Served::start(
        Command::new(env!("CARGO_BIN_EXE_railstore"))
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .arg("--data")
            .arg(dir.path().join("data"))
            .args(["--listen", "127.0.0.1:0"])
            .env("RAILSTORE_ACCESS_KEY", "cfg-access")
            .env("RAILSTORE_SECRET_KEY", "cfg-secret-0123456789")
            .env_remove("RAILSTORE_OPERATOR_TOKEN"),
    );
    let endpoint = endpoint_of(&mut served);
    for path in ["/status", "/metrics"] {
        let (status, body) = http_get(&endpoint, path, "");
        assert!(status.contains(" 401 "), "{path}: {status}");
        assert!(
            !body.contains("railstore_") && !body.contains("devices"),
            "{body}"
        );
        let (status, _) = http_get(&endpoint, path, "Authorization: Bearer wrong\r\n");
        assert!(status.contains(" 401 "), "{path}: {status}");
        let (status, body) = http_get(&endpoint, path, "Authorization: Bearer from-the-file\r\n");
        assert!(status.contains(" 200 "), "{path}: {status}");
        assert!(!body.is_empty());
    }
    // The 300 ms head timeout: an idle connection is closed long before the default 30 s.
    let mut idle = std::net::TcpStream::connect(endpoint.trim_start_matches("http://")).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let started = std::time::Instant::now();
    let _ = idle.read_to_end(&mut Vec::new());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // S3 requests still work with the file's limits.
    let (ok, errors, out) = load(&endpoint, "cfg-access", "cfg-secret-0123456789");
    assert!(ok && errors == 0, "{out}");
    let (status, log) = served.terminate();
    assert!(status.success(), "{log}");
    assert!(
        !log.contains("from-the-file"),
        "the token is in the log:\n{log}"
    );
}

/// The admin API from the command line: a device failed and replaced on a running server
/// while it serves, the admin token found in the data folder, wrong or missing tokens refused.
#[test]
fn a_device_is_failed_and_replaced_on_a_running_server() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (served, endpoint) = serve_in(dir.path(), "admin-test", "admin-test-secret-0123");
    let addr = endpoint.trim_start_matches("http://").to_string();
    let (ok, errors, out) = load(&endpoint, "admin-test", "admin-test-secret-0123");
    assert!(ok && errors == 0, "{out}");

    // Without the token, or with a wrong one, nothing happens.
    let (status, _) = http_get(&endpoint, "/admin/v1/status", "");
    assert!(status.contains(" 401 "), "{status}");
    let (ok, out) = cli(&[
        "device",
        "fail",
        "3",
        "--server",
        &addr,
        "--admin-token",
        "wrong-wrong-wrong-wrong",
    ]);
    assert!(!ok && out.contains("401"), "{out}");
    let token = std::fs::read_to_string(data.join("admin-token")).unwrap();
    let (status, body) = http_get(
        &endpoint,
        "/admin/v1/status",
        &format!("Authorization: Bearer {}\r\n", token.trim()),
    );
    assert!(status.contains(" 200 "), "{status}");
    let s: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(s["devices"][3]["healthy"], true, "{body}");

    // A device in service is not replaced.
    let with = |args: &[&str]| {
        let mut a = args.to_vec();
        a.extend(["--server", &addr, "--data", data.to_str().unwrap()]);
        cli(&a)
    };
    let (ok, out) = with(&["device", "replace", "3"]);
    assert!(!ok && out.contains("in service"), "{out}");
    let (ok, out) = with(&["device", "fail", "3", "--reason", "pulled for the test"]);
    assert!(ok, "{out}");
    let (_, body) = http_get(&endpoint, "/status", "");
    let s: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(s["devices"][3]["healthy"], false, "{body}");
    assert_eq!(s["devices"][3]["error"], "pulled for the test", "{body}");
    let (ok, out) = with(&["repair", "status"]);
    assert!(ok && out.contains("no rebuild"), "{out}");
    // Reads go on around the failed device.
    let (ok, errors, out) = load(&endpoint, "admin-test", "admin-test-secret-0123");
    assert!(ok && errors == 0, "{out}");

    // Onto another path (named with a space, so the query is percent-encoded): a relative one
    // is refused by the server, an absolute one taken.
    let (ok, out) = with(&["device", "replace", "3", "--path", "moved dev3"]);
    assert!(!ok && out.contains("must be absolute"), "{out}");
    let moved = dir.path().join("moved dev3");
    let (ok, out) = with(&["device", "replace", "3", "--path", moved.to_str().unwrap()]);
    assert!(
        ok && out.contains("finished") && out.contains("onto"),
        "{out}"
    );
    assert!(std::fs::read_dir(&moved).unwrap().next().is_some());
    let (ok, out) = with(&["repair", "status", "--json"]);
    assert!(ok, "{out}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (&r["running"], &r["device"], &r["objects_lost"], &r["error"]),
        (
            &serde_json::json!(false),
            &serde_json::json!(3),
            &serde_json::json!(0),
            &serde_json::Value::Null
        ),
        "{out}"
    );
    assert!(r["items_done"].as_u64().unwrap() > 0, "{out}");
    let (_, body) = http_get(&endpoint, "/status", "");
    let s: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(s["devices"][3]["healthy"], true, "{body}");
    assert_eq!(s["devices"][3]["recorded"], "ok", "{body}");
    let (_, metrics) = http_get(&endpoint, "/metrics", "");
    assert!(metrics.contains("railstore_rebuild_running 0"), "{metrics}");
    // Separation's window (the embedded default reads three colours of six).
    assert!(
        metrics.contains("railstore_rails_window_size 3"),
        "{metrics}"
    );
    assert_eq!(s["window"]["colours"], 6, "{body}");
    assert_eq!(s["window"]["size"], 3, "{body}");
    // Adaptive by default; with six devices and three journal copies the load keeps it at 3
    // (4 only past a failed device), and each buffer's bound (the memory setting until a rate
    // is measured) is shown per device.
    assert_eq!(s["window"]["adaptive"], true, "{body}");
    assert_eq!(
        s["window"]["size_range"],
        serde_json::json!([3, 4]),
        "{body}"
    );
    assert!(
        metrics.contains("railstore_rails_buffer_bytes_max{device=\"0\"}"),
        "{metrics}"
    );
    // A scrub on request finds the rebuilt array whole, and keeps its report.
    let (ok, out) = with(&["repair", "scrub"]);
    assert!(ok && out.contains("the scrub: finished"), "{out}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(data.join("scrub-report.json")).unwrap()).unwrap();
    assert_eq!(
        (
            &report["reason"],
            &report["pieces_repaired"],
            &report["objects_lost"]
        ),
        (
            &serde_json::json!("requested"),
            &serde_json::json!(0),
            &serde_json::json!(0)
        ),
        "{report}"
    );
    let (ok, errors, out) = load(&endpoint, "admin-test", "admin-test-secret-0123");
    assert!(ok && errors == 0, "{out}");
    let (status, log) = served.terminate();
    assert!(status.success(), "{log}");
    assert!(!log.contains(token.trim()), "the admin token is in the log");
}
