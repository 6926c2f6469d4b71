//! `response_headers_to_add` on `OK` answers only where configured (issue 28): by default an
//! admitted call's answer carries no headers (as envoyproxy/ratelimit's without
//! `LIMIT_RESPONSE_HEADERS_ENABLED`), an `OVER_LIMIT` one carries `RateLimit-Policy`,
//! `RateLimit` and `Retry-After`; `[envoy] ok_response_headers = true` and
//! `--envoy-ok-response-headers` put them on `OK` answers too.

mod grpc_support;
mod serve_support;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use grpc_support::{code, header, one, start, yaml, FIVE_PER_MINUTE};

const TOML: &str = r#"
[[rules]]
name = "per-key"
algorithm = "gcra"
limit = "2/10s"
domain = "rl"
descriptors = [{ key = "k" }]
"#;

#[tokio::test]
async fn ok_answers_carry_no_headers_by_default_over_limit_ones_do() {
    let (_fg, mut c) = yaml(FIVE_PER_MINUTE).await;
    for i in 0..5 {
        let r = one(&mut c, "rl", &[("generic_key", "five")]).await;
        assert_eq!(code(&r), Code::Ok, "call {i}");
        assert!(r.response_headers_to_add.is_empty(), "call {i}: {r:?}");
    }
    let r = one(&mut c, "rl", &[("generic_key", "five")]).await;
    assert_eq!(code(&r), Code::OverLimit);
    assert_eq!(
        header(&r, "ratelimit-policy"),
        Some("\"rl.generic_key_five\";q=5;w=60")
    );
    assert!(header(&r, "ratelimit")
        .unwrap()
        .starts_with("\"rl.generic_key_five\";r=0;t="));
    assert!(header(&r, "retry-after").is_some());
}

#[tokio::test]
async fn the_setting_and_the_flag_put_them_on_ok_answers() {
    let with_setting = format!("[envoy]\nok_response_headers = true\n{TOML}");
    let configured = [
        (with_setting.as_str(), &[][..]),
        (TOML, &["--envoy-ok-response-headers"][..]),
    ];
    for (toml, args) in configured {
        let (_fg, mut c) = start(&[("f.toml", toml)], "f.toml", args).await;
        let r = one(&mut c, "rl", &[("k", "a")]).await;
        assert_eq!(code(&r), Code::Ok, "{args:?}");
        assert_eq!(header(&r, "ratelimit-policy"), Some("\"per-key\";q=2;w=10"));
        assert_eq!(header(&r, "ratelimit"), Some("\"per-key\";r=1;t=5"));
        assert_eq!(header(&r, "retry-after"), None);
    }
    // Without either, the same first call's answer has none.
    let (_fg, mut c) = start(&[("f.toml", TOML)], "f.toml", &[]).await;
    let r = one(&mut c, "rl", &[("k", "a")]).await;
    assert_eq!(code(&r), Code::Ok);
    assert!(r.response_headers_to_add.is_empty(), "{r:?}");
}
