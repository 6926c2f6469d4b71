//! `;parameters` behind the real nginx and through the proxy (issue 23, item 2): Tomcat and
//! Spring serve `/api/login;jsessionid=x` (and `/x/..;/api/login`) as `/api/login`, so a
//! `/api/login` rule limits those spellings too, on one counter, by default; with
//! `[server] path_parameters = "keep"` they are segments of their own (RFC 3986).

mod proxies_support;
mod serve_support;

use std::net::SocketAddr;
use std::path::PathBuf;

use proxies_support::{binary, nginx_launch, send, snippet, start_app, start_proxy, Reply};
use serve_support::{client, Floodgate};

const RULES: &str = r#"
[[rules]]
name = "login"
limit = "2/min"
algorithm = "fixed_window"
key = "path"
[rules.match]
path_prefix = "/api/login"
"#;

const SPELLINGS: [&str; 4] = [
    "/api/login;jsessionid=a",
    "/api;v=1/login",
    "/x/..;/api/login",
    "/api/login;jsessionid=b?next=/a;b",
];

/// The statuses of `SPELLINGS` through nginx's forward-auth snippet in front of Floodgate
/// serving `config`.
async fn through_nginx(config: &str) -> Vec<u16> {
    let nginx = binary(
        "nginx",
        &[PathBuf::from("/usr/sbin/nginx")],
        "Debian package nginx",
    );
    let app = start_app().await;
    let fg = Floodgate::with_config(config, &[]);
    let floodgate = fg.api.trim_start_matches("http://").to_string();
    let serves = |r: &Reply| r.status == 200 && r.json()["app"] == "hello";
    let proxy = start_proxy(
        |addr| nginx_launch(&nginx, &snippet("nginx.conf", addr, &floodgate, app)),
        &serves,
    )
    .await;
    let mut statuses = Vec::new();
    for spelling in SPELLINGS {
        let reply = send(proxy.addr, spelling, &[]).await.unwrap();
        if reply.status == 200 {
            // Passed on as the client wrote it.
            let saw = reply.app_saw();
            let target = spelling.to_ascii_lowercase();
            assert!(saw.starts_with(&format!("get {target} ")), "{saw}");
        }
        statuses.push(reply.status);
    }
    statuses
}

const TRUSTING: &str = "[server]\ntrusted_proxies = [\"127.0.0.1/32\"]\n";

#[tokio::test]
async fn nginx_path_parameters_are_stripped_for_matching_by_default() {
    let statuses = through_nginx(&format!("{TRUSTING}{RULES}")).await;
    assert_eq!(statuses, [200, 200, 429, 429]);
}

#[tokio::test]
async fn nginx_path_parameters_kept_are_segments_of_their_own() {
    let config = format!("{TRUSTING}path_parameters = \"keep\"\n{RULES}");
    let statuses = through_nginx(&config).await;
    assert_eq!(statuses, [200, 200, 200, 200]);
}

#[tokio::test]
async fn the_proxy_strips_path_parameters_for_matching_and_forwards_them() {
    let app: SocketAddr = start_app().await;
    let fg = Floodgate::with_config(RULES, &["--upstream", &format!("http://{app}")]);
    let c = client();
    let mut statuses = Vec::new();
    for spelling in SPELLINGS {
        let r = c.get(fg.proxy_url(spelling)).send().await.unwrap();
        let status = r.status().as_u16();
        if status == 200 {
            let body: serde_json::Value = r.json().await.unwrap();
            let head = body["head"].as_str().unwrap().to_ascii_lowercase();
            assert!(
                head.starts_with(&format!("get {} ", spelling.to_ascii_lowercase())),
                "{head}"
            );
        }
        statuses.push(status);
    }
    assert_eq!(statuses, [200, 200, 429, 429]);
}
