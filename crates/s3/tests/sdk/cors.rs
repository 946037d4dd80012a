//! CORS: the configuration through the SDK, preflights and CORS headers as a browser sees
//! them (raw, unsigned requests).

use crate::common::*;
use aws_sdk_s3::types::{CorsConfiguration, CorsRule};

fn rule(origins: &[&str], methods: &[&str], headers: &[&str]) -> CorsRule {
    let mut r = CorsRule::builder();
    for o in origins {
        r = r.allowed_origins(*o);
    }
    for m in methods {
        r = r.allowed_methods(*m);
    }
    for h in headers {
        r = r.allowed_headers(*h);
    }
    r.expose_headers("x-amz-meta-colour").build().unwrap()
}

/// A raw request to `path` with `headers` (each `Name: value`), no body.
async fn request(s: &TestServer, method: &str, path: &str, headers: &[&str]) -> Raw {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", s.addr);
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("Content-Length: 0\r\nConnection: close\r\n\r\n");
    s.raw(req.as_bytes()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflights_and_responses_follow_the_bucket_rules() {
    let s = start().await;
    let b = s.bucket("cors").await;
    let c = &s.client;
    let e = c.get_bucket_cors().bucket(&b).send().await.unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("NoSuchCORSConfiguration"));
    assert_eq!(status(&e), Some(404));
    let path = format!("/{b}/some/key");
    // No rules yet: a preflight is refused.
    let r = request(
        &s,
        "OPTIONS",
        &path,
        &[
            "Origin: https://app.example",
            "Access-Control-Request-Method: GET",
        ],
    )
    .await;
    assert_eq!(r.status, 403);

    let config = CorsConfiguration::builder()
        .cors_rules(rule(&["https://*.example"], &["GET", "HEAD"], &["x-amz-*"]))
        .cors_rules(rule(&["*"], &["PUT"], &[]))
        .build()
        .unwrap();
    c.put_bucket_cors()
        .bucket(&b)
        .cors_configuration(config)
        .send()
        .await
        .unwrap();
    let got = c.get_bucket_cors().bucket(&b).send().await.unwrap();
    assert_eq!(got.cors_rules().len(), 2);
    assert_eq!(got.cors_rules()[0].allowed_origins(), ["https://*.example"]);

    let r = request(
        &s,
        "OPTIONS",
        &path,
        &[
            "Origin: https://app.example",
            "Access-Control-Request-Method: GET",
            "Access-Control-Request-Headers: x-amz-date, X-Amz-Content-Sha256",
        ],
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    assert_eq!(r.header("access-control-allow-methods"), Some("GET, HEAD"));
    assert_eq!(
        r.header("access-control-expose-headers"),
        Some("x-amz-meta-colour")
    );
    // A header no rule allows, a method of another origin, no method, no origin.
    for (headers, want) in [
        (
            vec![
                "Origin: https://app.example",
                "Access-Control-Request-Method: GET",
                "Access-Control-Request-Headers: authorization",
            ],
            403,
        ),
        (
            vec![
                "Origin: https://app.example",
                "Access-Control-Request-Method: DELETE",
            ],
            403,
        ),
        (vec!["Origin: https://app.example"], 400),
        (vec!["Access-Control-Request-Method: GET"], 400),
    ] {
        let r = request(&s, "OPTIONS", &path, &headers).await;
        assert_eq!(r.status, want, "{headers:?}");
        assert_eq!(r.header("access-control-allow-origin"), None);
    }
    // The open PUT rule answers `*`.
    let r = request(
        &s,
        "OPTIONS",
        &path,
        &[
            "Origin: https://other.test",
            "Access-Control-Request-Method: PUT",
        ],
    )
    .await;
    assert_eq!(
        (r.status, r.header("access-control-allow-origin")),
        (200, Some("*"))
    );

    // Ordinary requests with an Origin get the headers, errors included (this one is
    // anonymous: 403).
    let r = request(&s, "GET", &path, &["Origin: https://app.example"]).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    let r = request(&s, "GET", &path, &["Origin: https://evil.test"]).await;
    assert_eq!(r.header("access-control-allow-origin"), None);
    let r = request(&s, "GET", &path, &[]).await;
    assert_eq!(r.header("access-control-allow-origin"), None);

    // Bad rules are refused; deleting the rules ends CORS.
    let bad = CorsConfiguration::builder()
        .cors_rules(rule(&["*"], &["PATCH"], &[]))
        .build()
        .unwrap();
    let e = c
        .put_bucket_cors()
        .bucket(&b)
        .cors_configuration(bad)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e).as_deref(), Some("InvalidRequest"));
    c.delete_bucket_cors().bucket(&b).send().await.unwrap();
    let r = request(
        &s,
        "OPTIONS",
        &path,
        &[
            "Origin: https://app.example",
            "Access-Control-Request-Method: GET",
        ],
    )
    .await;
    assert_eq!(r.status, 403);
    s.stop().await;
}
