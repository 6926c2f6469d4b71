//! Regression test: the docs named the key of a client whose `X-Forwarded-For` entry is no
//! address `ip=?unknown`, but it is stored escaped (`ip=%3Funknown`) and the admin API finds it
//! only as `ip=%253Funknown?encoded=true`. The docs now show that lookup; this runs the lookup
//! they show against the real binary.

mod serve_support;

use serde_json::json;
use serve_support::{client, split, Floodgate};

const TOKEN: &str = "test-token-0123456789";

/// The admin lookup docs/proxies.md shows for the key `unknown` gets.
fn documented_lookup() -> String {
    let guide = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/proxies.md"),
    )
    .unwrap();
    let start = guide
        .find("GET /v1/keys/<rule>/ip=")
        .expect("docs/proxies.md shows the admin lookup of an unparsed client's key");
    let rest = &guide[start + "GET ".len()..];
    rest[..rest.find('`').unwrap()].replace("<rule>", "per-ip")
}

#[tokio::test]
async fn the_documented_admin_lookup_finds_an_unparsed_clients_key() {
    let fg = Floodgate::with_config(
        &format!(
            "[server]\ntrusted_proxies = [\"127.0.0.1/32\"]\nadmin_token = \"{TOKEN}\"\n\n\
             [[rules]]\nname = \"per-ip\"\nlimit = \"5/min\"\nkey = \"client_ip\"\n"
        ),
        &[],
    );
    let c = client();
    for _ in 0..2 {
        let r = c
            .get(fg.url("/v1/forward-auth"))
            .header("x-forwarded-for", "unknown")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let get = |path: String| {
        let c = c.clone();
        let url = fg.url(&path);
        async move { split(c.get(url).bearer_auth(TOKEN).send().await.unwrap()).await }
    };
    let (status, _, body) = get(documented_lookup()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (&body["store_key"], &body["remaining"], &body["tracked"]),
        (&json!("ip=%3Funknown"), &json!(3), &json!(true))
    );
    // Without ?encoded=true the path names a /v1/check client key (`key=...`): another key.
    let (status, _, body) = get("/v1/keys/per-ip/ip=%3Funknown".into()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (&body["tracked"], &body["remaining"]),
        (&json!(false), &json!(5))
    );
}
