//! A forwarding header with more entries than are examined (32), every examined one a trusted
//! proxy: the client stands beyond reach and is counted under a key of its own
//! (`ip=?too-many-hops`), never as the last proxy examined (it used to be `ip=10.0.0.9`).

mod serve_support;

use serve_support::{client, Floodgate};

const CONFIG: &str = r#"
[server]
trusted_proxies = ["127.0.0.1/32", "10.0.0.0/8"]

[[rules]]
name = "per-client"
limit = "2/min"
key = "client_ip"
"#;

async fn status(fg: &Floodgate, xff: &str) -> u16 {
    client()
        .get(fg.url("/v1/forward-auth"))
        .header("x-forwarded-for", xff)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn an_over_long_trusted_chain_is_a_client_of_its_own_not_the_last_proxy() {
    let fg = Floodgate::with_config(CONFIG, &[]);
    // 40 trusted hops, whatever the client wrote beyond them: one bucket.
    for (i, expected) in [200, 200, 429].into_iter().enumerate() {
        let mut hops = vec![format!("198.51.100.{i}")];
        hops.extend((1..=40).map(|h| format!("10.0.0.{h}")));
        assert_eq!(status(&fg, &hops.join(", ")).await, expected, "{i}");
    }
    // The proxy that was the 32nd from the right was never charged.
    assert_eq!(status(&fg, "10.0.0.9").await, 200);
    assert_eq!(status(&fg, "10.0.0.9").await, 200);
    // A chain of exactly 32 trusted entries is still its leftmost.
    let hops: Vec<String> = (9..=40).map(|h| format!("10.0.0.{h}")).collect();
    assert_eq!(status(&fg, &hops.join(", ")).await, 429);
}
