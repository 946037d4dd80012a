//! Volumes through a real `railstore serve`, driven by real clients: created with the CLI
//! (admin API), written and verified by fio's `nbd` engine (`verify=crc32c`) on every
//! mechanism, and verified again after the server was killed with `kill -9` following writes
//! that fio flushed (`fsync=1`). With qemu-utils present, `qemu-io` reads what fio wrote.
//!
//! A second test has qemu map a sparse volume (NBD block status) and copy it out (structured
//! reads with holes).
//!
//! fio is found as `$RAILSTORE_FIO` or `fio`, qemu as `qemu-img` and `qemu-io`. Without them
//! the tests say so and pass, unless `RAILSTORE_REQUIRE_FIO` / `RAILSTORE_REQUIRE_QEMU` is set
//! (CI sets both and installs Debian's fio and qemu-utils).

use crate::common;

use common::{cli, on_path, outcome, serve_in, Served};
use std::path::{Path, PathBuf};
use std::process::Command;

const ACCESS: &str = "volumeaccess";
const SECRET: &str = "volumesecretvolumesecret";

fn fio() -> Option<PathBuf> {
    let path = std::env::var_os("RAILSTORE_FIO")
        .map(PathBuf::from)
        .or_else(|| on_path("fio"));
    if path.is_none() && std::env::var_os("RAILSTORE_REQUIRE_FIO").is_some() {
        panic!("RAILSTORE_REQUIRE_FIO is set and no fio was found");
    }
    path
}

/// The NBD address the server logged.
fn nbd_of(served: &Served) -> String {
    let line = served
        .log
        .iter()
        .find(|l| l.contains("NBD export of volumes at nbd://"))
        .expect("the server logs its NBD address");
    let at = &line[line.find("nbd://").unwrap() + 6..];
    at.split_whitespace().next().unwrap().to_string()
}

fn admin(dir: &Path, endpoint: &str) -> Vec<String> {
    let token = std::fs::read_to_string(dir.join("data/admin-token")).unwrap();
    vec![
        "--server".into(),
        endpoint.trim_start_matches("http://").into(),
        "--admin-token".into(),
        token.trim().into(),
    ]
}

fn volume_cli(dir: &Path, endpoint: &str, args: &[&str]) -> String {
    let mut all: Vec<&str> = vec!["volume"];
    all.extend_from_slice(args);
    let admin = admin(dir, endpoint);
    all.extend(admin.iter().map(String::as_str));
    let (ok, out) = cli(&all);
    assert!(ok, "railstore {all:?}: {out}");
    out
}

/// fio over NBD: (success, output).
fn run_fio(fio: &Path, nbd: &str, volume: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(fio)
        .args([
            "--name=nbd",
            "--ioengine=nbd",
            &format!("--uri=nbd://{nbd}/{volume}"),
            "--verify=crc32c",
            "--verify_fatal=1",
            // No verify state file left in the working directory when a job fails.
            "--verify_state_save=0",
            "--output-format=normal",
        ])
        .args(args)
        .output()
        .unwrap();
    outcome(out)
}

#[test]
fn fio_verifies_every_mechanism_over_nbd_and_across_kill_9() {
    let Some(fio) = fio() else {
        eprintln!("no fio: skipping the NBD test (set RAILSTORE_REQUIRE_FIO to make this fail)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (served, endpoint) = serve_in(dir.path(), ACCESS, SECRET);
    let nbd = nbd_of(&served);
    // (volume, mechanism, object size, fio job): small objects where writes are small, so
    // random writes are mostly partial objects (read-modify-write) yet quick.
    let cases = [
        (
            "hybrid",
            "hybrid",
            "64KiB",
            "--rw=randwrite --bsrange=512-32k",
        ),
        ("rep3", "rep3", "64KiB", "--rw=randwrite --bs=4k"),
        ("split", "split4+2", "256KiB", "--rw=randrw --bs=16k"),
        ("pack", "pack4+2", "4KiB", "--rw=randwrite --bs=4k"),
        ("big", "split4+2", "4MiB", "--rw=write --bs=1M"),
    ];
    for (name, mech, object, job) in cases {
        let out = volume_cli(
            dir.path(),
            &endpoint,
            &[
                "create",
                name,
                "--size",
                "8MiB",
                "--mechanism",
                mech,
                "--object-size",
                object,
            ],
        );
        assert!(out.contains(&format!("created {name}")), "{out}");
        let mut args: Vec<&str> = job.split_whitespace().collect();
        args.extend(["--size=4M", "--iodepth=8", "--do_verify=1"]);
        let (ok, out) = run_fio(&fio, &nbd, name, &args);
        assert!(ok, "fio on {name} ({mech}):\n{out}");
        assert!(!out.contains("verify: bad"), "{out}");
    }
    // Bad requests get the server's reason and change nothing.
    let admin_args = admin(dir.path(), &endpoint);
    for (args, reason) in [
        (vec!["create", "odd", "--size", "1000"], "multiple of 512"),
        (vec!["create", "rep3", "--size", "1MiB"], "exists"),
        (
            vec!["create", "m", "--size", "1MiB", "--mechanism", "raid5"],
            "unknown mechanism",
        ),
        (vec!["create", "bad/name", "--size", "1MiB"], "volume name"),
        (
            vec!["resize", "nosuch", "--size", "1MiB"],
            "no volume named",
        ),
    ] {
        let mut all = vec!["volume"];
        all.extend(args.iter().copied());
        all.extend(admin_args.iter().map(String::as_str));
        let (ok, out) = cli(&all);
        assert!(!ok && out.contains(reason), "{all:?}: {out}");
    }
    let (ok, out) = cli(&[
        "volume",
        "list",
        "--server",
        endpoint.trim_start_matches("http://"),
        "--admin-token",
        "wrong",
    ]);
    assert!(!ok && out.contains("401"), "{out}");
    let listed = volume_cli(dir.path(), &endpoint, &["list"]);
    assert_eq!(listed.lines().count(), cases.len(), "{listed}");
    for (name, ..) in cases {
        assert!(listed.contains(&format!("{name}: 8388608 B")), "{listed}");
    }
    // An export that does not exist is refused, and fio says so.
    let (ok, _) = run_fio(&fio, &nbd, "nosuch", &["--rw=read", "--bs=4k", "--size=4k"]);
    assert!(!ok, "fio read a volume that does not exist");

    // Flushed writes survive kill -9: fio flushes after every write, the server dies without a
    // shutdown, and a new server gives back what fio wrote.
    let write = [
        "--rw=randwrite",
        "--bs=8k",
        "--size=4M",
        "--fsync=1",
        "--do_verify=0",
    ];
    let (ok, out) = run_fio(&fio, &nbd, "split", &write);
    assert!(ok, "{out}");
    let (ok, out) = run_fio(&fio, &nbd, "rep3", &write);
    assert!(ok, "{out}");
    let mut served = served;
    served.child.kill().unwrap();
    served.child.wait().unwrap();
    let (served, endpoint) = serve_in(dir.path(), ACCESS, SECRET);
    let nbd = nbd_of(&served);
    for name in ["split", "rep3"] {
        let mut verify = write.to_vec();
        verify.push("--verify_only");
        let (ok, out) = run_fio(&fio, &nbd, name, &verify);
        assert!(ok, "after kill -9, {name}:\n{out}");
    }
    if let Some(qemu_io) = on_path("qemu-io") {
        // qemu's own NBD client reads the volume fio's sequential job filled.
        let out = Command::new(qemu_io)
            .args(["-f", "raw", "-r", "-c", "read -v 0 16"])
            .arg(format!("nbd://{nbd}/big"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("read 16/16 bytes"),
            "{text}"
        );
    }
    // Deleting frees the name; the export is gone.
    volume_cli(dir.path(), &endpoint, &["delete", "pack"]);
    let listed = volume_cli(dir.path(), &endpoint, &["list"]);
    assert!(!listed.contains("pack:"), "{listed}");
    let (ok, _) = run_fio(&fio, &nbd, "pack", &["--rw=read", "--bs=4k", "--size=4k"]);
    assert!(!ok);
    let (status, log) = served.terminate();
    assert!(status.success(), "{log}");
}

/// `qemu-img` and `qemu-io`, or `None` (a panic when `RAILSTORE_REQUIRE_QEMU` is set).
fn qemu() -> Option<(PathBuf, PathBuf)> {
    let found = on_path("qemu-img").zip(on_path("qemu-io"));
    if found.is_none() && std::env::var_os("RAILSTORE_REQUIRE_QEMU").is_some() {
        panic!("RAILSTORE_REQUIRE_QEMU is set and no qemu-img and qemu-io were found");
    }
    found
}

fn qemu_io(qemu_io: &Path, uri: &str, command: &str) -> String {
    let out = Command::new(qemu_io)
        .args(["-f", "raw", "-c", command, uri])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && !text.contains("fail") && !text.contains("error"),
        "qemu-io {command}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn qemu_maps_and_copies_a_sparse_volume_over_nbd() {
    let Some((qemu_img, qemu_io_bin)) = qemu() else {
        eprintln!("no qemu-img/qemu-io: skipping (set RAILSTORE_REQUIRE_QEMU to make this fail)");
        return;
    };
    const MIB: u64 = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let (served, endpoint) = serve_in(dir.path(), ACCESS, SECRET);
    let nbd = nbd_of(&served);
    let args = [
        "create",
        "sparse",
        "--size",
        "8MiB",
        "--mechanism",
        "split4+2",
        "--object-size",
        "1MiB",
    ];
    volume_cli(dir.path(), &endpoint, &args);
    let uri = format!("nbd://{nbd}/sparse");
    // Two writes, in objects 1 and 5; the rest was never written.
    qemu_io(&qemu_io_bin, &uri, &format!("write -P 0xab {} 4096", MIB));
    qemu_io(
        &qemu_io_bin,
        &uri,
        &format!("write -P 0xcd {} 4096", 5 * MIB + 512),
    );

    // Block status: data exactly where objects exist.
    let out = Command::new(&qemu_img)
        .args(["map", "--output=json", "-f", "raw", &uri])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let map: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let mut data = Vec::new();
    let mut covered = 0;
    for e in &map {
        let (start, length) = (e["start"].as_u64().unwrap(), e["length"].as_u64().unwrap());
        assert_eq!(start, covered, "{map:?}");
        covered += length;
        if e["data"].as_bool().unwrap() {
            data.push((start, length));
        } else {
            assert!(e["zero"].as_bool().unwrap(), "a hole that is not zero: {e}");
        }
    }
    assert_eq!(covered, 8 * MIB);
    assert_eq!(data, vec![(MIB, MIB), (5 * MIB, MIB)], "{map:?}");

    // Reads: a hole, the written bytes, and the zeros around them inside an object.
    qemu_io(&qemu_io_bin, &uri, &format!("read -P 0 0 {MIB}"));
    qemu_io(&qemu_io_bin, &uri, &format!("read -P 0xab {MIB} 4096"));
    qemu_io(
        &qemu_io_bin,
        &uri,
        &format!("read -P 0 {} 4096", MIB + 4096),
    );

    // A copy to a local file holds exactly the volume's bytes.
    let copy = dir.path().join("copy.raw");
    let out = Command::new(&qemu_img)
        .args(["convert", "-f", "raw", "-O", "raw", &uri])
        .arg(&copy)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut want = vec![0u8; 8 * MIB as usize];
    want[MIB as usize..][..4096].fill(0xab);
    want[(5 * MIB + 512) as usize..][..4096].fill(0xcd);
    assert!(
        std::fs::read(&copy).unwrap() == want,
        "the copy differs from the volume"
    );

    let (status, log) = served.terminate();
    assert!(status.success(), "{log}");
}
