//! The web console in a real browser: `railstore serve` with a device rebuilt, a scrub run and
//! another device failed, the page at `/admin/console/` opened in headless Chromium. The DOM
//! it builds is checked against `/status`, and its screenshot where the ring is drawn.
//!
//! Chromium is found as `$RAILSTORE_CHROMIUM`, `chromium` or `chromium-browser`. Without one
//! the test says so and passes, unless `RAILSTORE_REQUIRE_BROWSER` is set (CI sets it and
//! installs Debian's chromium).

use crate::common;

use common::{cli, http_get, load, on_path, serve_in};
use std::path::{Path, PathBuf};
use std::process::Command;

fn chromium() -> Option<PathBuf> {
    let candidates = std::env::var_os("RAILSTORE_CHROMIUM")
        .map(PathBuf::from)
        .into_iter()
        .chain(
            ["chromium", "chromium-browser"]
                .iter()
                .filter_map(|name| on_path(name)),
        );
    for c in candidates {
        if c.is_file() {
            return Some(c);
        }
    }
    if std::env::var_os("RAILSTORE_REQUIRE_BROWSER").is_some() {
        panic!("RAILSTORE_REQUIRE_BROWSER is set and no chromium was found");
    }
    None
}

const WIDTH: u32 = 1180;
const HEIGHT: u32 = 1400;

/// Headless Chromium on `url`, with `what` (`--dump-dom` or `--screenshot=PATH`): its stdout.
fn browse(browser: &Path, profile: &Path, what: &str, url: &str) -> String {
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            &format!("--window-size={WIDTH},{HEIGHT}"),
            // Page timers run ahead of the clock; the page has drawn by the end.
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(what)
        .arg(url)
        .output()
        .expect("chromium starts");
    assert!(
        out.status.success(),
        "chromium {what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The opening tags of every element with `marker` in them (`<g class="device"`), in order.
fn tags<'a>(dom: &'a str, marker: &str) -> Vec<&'a str> {
    dom.match_indices(marker)
        .map(|(i, _)| &dom[i..i + dom[i..].find('>').unwrap()])
        .collect()
}

/// One attribute of an opening tag.
fn attr<'a>(tag: &'a str, name: &str) -> &'a str {
    let start = tag
        .find(&format!(" {name}=\""))
        .unwrap_or_else(|| panic!("no {name} in {tag}"))
        + name.len()
        + 3;
    &tag[start..start + tag[start..].find('"').unwrap()]
}

/// The text inside the element that opens with `open` (no nested elements).
fn text_of<'a>(dom: &'a str, open: &str) -> &'a str {
    let i = dom
        .find(open)
        .unwrap_or_else(|| panic!("no {open} in the page"));
    let start = i + dom[i..].find('>').unwrap() + 1;
    &dom[start..start + dom[start..].find('<').unwrap()]
}

fn unescape(html: &str) -> String {
    html.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// Pixels within `box_` whose colour is within 16 of `rgb` in every channel.
fn pixels_like(png_path: &Path, box_: [u32; 4], rgb: [u8; 3]) -> usize {
    let decoder = png::Decoder::new(std::fs::File::open(png_path).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(
        (info.width, info.height),
        (WIDTH, HEIGHT),
        "screenshot size"
    );
    let channels = match info.color_type {
        png::ColorType::Rgba => 4,
        png::ColorType::Rgb => 3,
        other => panic!("a screenshot in {other:?}"),
    };
    let [left, top, w, h] = box_;
    let mut n = 0;
    for y in top..(top + h).min(info.height) {
        for x in left..(left + w).min(info.width) {
            let p = (y as usize * info.line_size) + x as usize * channels;
            if (0..3).all(|c| buf[p + c].abs_diff(rgb[c]) <= 16) {
                n += 1;
            }
        }
    }
    n
}

#[test]
fn the_console_shows_the_array_as_status_reports_it() {
    let Some(browser) = chromium() else {
        eprintln!("no chromium: the console test did not run (set RAILSTORE_CHROMIUM)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (served, endpoint) = serve_in(dir.path(), "console-test", "console-test-secret-0123");
    let addr = endpoint.trim_start_matches("http://").to_string();
    let token = std::fs::read_to_string(data.join("admin-token")).unwrap();
    let token = token.trim();
    let admin = |args: &[&str]| {
        let mut a = args.to_vec();
        a.extend(["--server", &addr, "--admin-token", token]);
        let (ok, out) = cli(&a);
        assert!(ok, "{args:?}: {out}");
        out
    };
    // A rebuilt device, a scrub, a failed device, and S3 traffic for the latency chart.
    let (ok, errors, out) = load(&endpoint, "console-test", "console-test-secret-0123");
    assert!(ok && errors == 0, "{out}");
    admin(&["device", "fail", "3"]);
    admin(&["device", "replace", "3"]);
    admin(&["repair", "scrub"]);
    admin(&[
        "device",
        "fail",
        "4",
        "--reason",
        "pulled for the console test",
    ]);
    let (ok, errors, out) = load(&endpoint, "console-test", "console-test-secret-0123");
    assert!(ok && errors == 0, "{out}");

    let profile = dir.path().join("chromium");
    let page = format!("{endpoint}/admin/console/");
    // No token, or a wrong one: the login form, and nothing of the array.
    let dom = browse(&browser, &profile, "--dump-dom", &page);
    assert!(dom.contains("<form id=\"login\">"), "{dom}");
    assert!(dom.contains("<main id=\"console\" hidden=\"\">"), "{dom}");
    let dom = browse(
        &browser,
        &profile,
        "--dump-dom",
        &format!("{page}#token=not-the-admin-token"),
    );
    assert!(dom.contains("<form id=\"login\">"), "{dom}");
    assert!(dom.contains("the admin token was refused"), "{dom}");
    assert!(tags(&dom, "<g class=\"device\"").is_empty(), "{dom}");

    let with_token = format!("{page}#token={token}");
    let dom = browse(&browser, &profile, "--dump-dom", &with_token);
    let (_, body) = http_get(&endpoint, "/status", "");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    let shown: serde_json::Value =
        serde_json::from_str(&unescape(text_of(&dom, "<pre id=\"status-json\""))).unwrap();

    // The status the page rendered is the server's (roles turn with the schedule; the rest
    // holds still while nothing writes).
    for field in [
        "array",
        "policy",
        "objects",
        "object_bytes",
        "buckets",
        "separation",
    ] {
        assert_eq!(shown[field], status[field], "{field}");
    }
    for field in ["kind", "device", "running", "items_total", "objects_lost"] {
        assert_eq!(
            shown["repair"][field], status["repair"][field],
            "repair {field}"
        );
    }
    assert_eq!(shown["at_risk"], status["at_risk"]);
    let devices = status["devices"].as_array().unwrap();
    assert_eq!(shown["devices"].as_array().unwrap().len(), devices.len());
    for (s, d) in shown["devices"].as_array().unwrap().iter().zip(devices) {
        for field in ["index", "path", "colour", "healthy", "recorded", "error"] {
            assert_eq!(s[field], d[field], "device {} {field}", d["index"]);
        }
    }
    assert_eq!(status["devices"][4]["healthy"], false);
    assert_eq!(status["devices"][3]["recorded"], "ok");

    // The page draws what it rendered: a node per device in its state, the table, the numbers.
    let ring = tags(&dom, "<g class=\"device\"");
    assert_eq!(ring.len(), devices.len(), "{dom}");
    for (node, d) in ring.iter().zip(shown["devices"].as_array().unwrap()) {
        assert_eq!(attr(node, "data-device"), d["index"].to_string());
        assert_eq!(attr(node, "data-role"), d["role"].as_str().unwrap());
        let state = if d["healthy"] == true {
            d["role"].as_str().unwrap()
        } else {
            "failed"
        };
        assert_eq!(attr(node, "data-state"), state, "{node}");
    }
    assert_eq!(
        text_of(&dom, "<dd id=\"objects\""),
        status["objects"].to_string()
    );
    assert_eq!(
        text_of(&dom, "<dd id=\"in-service\""),
        format!("{} of {}", devices.len() - 1, devices.len())
    );
    let row4 = &dom[dom.find("<tr data-device=\"4\"").unwrap()..];
    let row4 = &row4[..row4.find("</tr>").unwrap()];
    assert!(row4.contains(">failed<"), "{row4}");
    assert!(row4.contains(">pulled for the console test<"), "{row4}");
    let repair = text_of(&dom, "<p id=\"repair\"");
    assert!(repair.starts_with("scrub: finished"), "{repair}");
    let risk = text_of(&dom, "<p id=\"risk\"");
    assert!(
        risk.contains(&format!(
            "{} objects at risk with device(s) 4 out",
            status["at_risk"]["objects_at_risk"]
        )),
        "{risk}"
    );
    for line in ["read", "write"] {
        let tag = tags(&dom, &format!("<polyline class=\"{line}\""));
        assert_eq!(tag.len(), 1, "{dom}");
        let points: usize = attr(tag[0], "data-points").parse().unwrap();
        assert!(points > 0, "no {line} latency drawn: {}", tag[0]);
    }

    // The screenshot: where the page says the ring is, exactly one node is the failed red
    // and the five others are reader, writer or guard colours.
    let shot = dir.path().join("console.png");
    browse(
        &browser,
        &profile,
        &format!("--screenshot={}", shot.display()),
        &with_token,
    );
    let ring_tag = tags(&dom, "<svg id=\"ring\"")[0];
    let box_: Vec<u32> = attr(ring_tag, "data-box")
        .split(' ')
        .map(|v| v.parse().unwrap())
        .collect();
    let box_ = [box_[0], box_[1], box_[2], box_[3]];
    let node = |rgb| pixels_like(&shot, box_, rgb);
    let failed = node([0xd3, 0x2f, 0x2f]);
    assert!(
        (1500..5000).contains(&failed),
        "{failed} pixels of the failed colour in the ring {box_:?}"
    );
    let serving = node([0x2e, 0x9d, 0x4a]) + node([0xe0, 0x7b, 0x00]) + node([0x3b, 0x6f, 0xd8]);
    assert!(
        (5 * 1500..5 * 5000).contains(&serving),
        "{serving} pixels of the serving colours in the ring {box_:?}"
    );
    if let Some(keep) = std::env::var_os("RAILSTORE_CONSOLE_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }

    let (status, log) = served.terminate();
    assert!(status.success(), "{log}");
}
