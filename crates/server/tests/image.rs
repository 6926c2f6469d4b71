//! The `Containerfile` built with the real `podman` (Debian's package): no image registry is
//! reachable from the test machines, so the base is made from Debian's packages with
//! `mmdebstrap` (the host's release, cached under `target/image-base/`) and `podman import`,
//! and passed as `BASE`; the `prebuilt` target copies the binary this test suite built.
//! Containers cannot start on these machines (no cgroup controllers), so the image is mounted
//! (`podman image mount`) and its entrypoint run in a chroot of it, as the image's user: it
//! answers `/healthz` (the image's own HEALTHCHECK command, run in the chroot too) and
//! `ShouldRateLimit` on a YAML configuration added on top as a user's would be. Then
//! `/bin/ratelimit`, what envoyproxy/ratelimit's manifests run, in the same chroot with
//! envoyproxy/ratelimit's environment (its runtime directory in the image, a real
//! redis-server on the host): `/healthcheck`, `/healthz` and `ShouldRateLimit` (OK, then
//! OVER_LIMIT, counted in that Redis).

mod serve_support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use floodgate_store::redis::testing::RedisServer;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `cmd`, panicking with its output when it fails; its stdout.
fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (scripts/test installs podman and mmdebstrap)"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn podman(args: &[&str]) -> String {
    run(Command::new("podman").args(args))
}

/// The host's Debian release (`bookworm`): the base must have the glibc the test binary was
/// linked against.
fn codename() -> String {
    let text = std::fs::read_to_string("/etc/os-release").unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .expect("a Debian host")
        .trim_matches('"')
        .to_string()
}

/// The base image made from Debian's packages: `mmdebstrap` once (minutes; the tarball is
/// kept in `target/image-base/`), then `podman import` when the image is not there.
fn base_image() -> String {
    let suite = codename();
    let image = format!("localhost/floodgate-test-base:{suite}");
    if Command::new("podman")
        .args(["image", "exists", &image])
        .status()
        .unwrap()
        .success()
    {
        return image;
    }
    let dir = repo().join("target/image-base");
    std::fs::create_dir_all(&dir).unwrap();
    let tar = dir.join(format!("debian-{suite}.tar"));
    if !tar.exists() {
        let tmp = dir.join(format!("debian-{suite}.tar.tmp"));
        // The essential packages: bash, coreutils, glibc; no apt.
        run(Command::new("mmdebstrap")
            // `--format=tar`: mmdebstrap picks the format from the name's ending, and `.tmp`
            // is none it knows (it made a directory).
            .args(["--variant=essential", "--format=tar", "--quiet", &suite])
            .arg(&tmp));
        std::fs::rename(&tmp, &tar).unwrap();
    }
    podman(&["import", tar.to_str().unwrap(), &image]);
    image
}

/// An image, removed (and unmounted) on drop.
struct Image(String);

impl Drop for Image {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args(["image", "unmount", &self.0])
            .output();
        let _ = Command::new("podman").args(["rmi", "-f", &self.0]).output();
    }
}

/// A process, killed on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const YAML: &str = "domain: edge
descriptors:
  - key: generic_key
    value: all
    rate_limit: { unit: minute, requests_per_unit: 2 }
";

/// The runtime directory's file for `/bin/ratelimit`: 1 a day, so no window ends between two
/// calls of the test.
const RUNTIME_YAML: &str = "domain: edge
descriptors:
  - key: generic_key
    value: all
    rate_limit: { name: daily, unit: day, requests_per_unit: 1 }
";

fn request() -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "generic_key".into(),
                value: "all".into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

/// Reads "floodgate: listening on ADDR (NAME)" lines from `child` until it has every one
/// of `names`; their addresses in that order (the rest of its output is drained).
fn listeners(child: &mut Child, names: &[&str]) -> Vec<String> {
    let stdout = child.stdout.take().unwrap();
    let mut found = vec![None; names.len()];
    let mut lines = BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let Some(rest) = line.strip_prefix("floodgate: listening on ") else {
            continue;
        };
        let (addr, name) = rest.split_once(' ').unwrap();
        if let Some(i) = names.iter().position(|n| name == format!("({n})")) {
            found[i] = Some(addr.to_string());
        }
        if found.iter().all(Option::is_some) {
            break;
        }
    }
    // The rest read too: a line printed later into a closed pipe would stop the process.
    std::thread::spawn(move || lines.for_each(drop));
    found
        .into_iter()
        .zip(names)
        .map(|(a, n)| a.unwrap_or_else(|| panic!("no {n} listener")))
        .collect()
}

/// `/bin/ratelimit` in the chroot `root` as `user`, with envoyproxy/ratelimit's environment
/// only (the runtime directory `/data/ratelimit/config` of the image, `redis` on the host).
async fn ratelimit_in_the_chroot(root: &str, user: &str, redis: &RedisServer) {
    let mut child = Command::new("chroot")
        .arg(format!("--userspec={user}"))
        .arg(root)
        .arg("/bin/ratelimit")
        .env_clear()
        .envs([
            // What a container runtime sets when the image sets no PATH.
            (
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            ),
            ("RUNTIME_ROOT", "/data"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("RUNTIME_WATCH_ROOT", "false"),
            ("USE_STATSD", "false"),
            ("LOG_LEVEL", "warn"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_TIMEOUT", "5s"),
            ("HOST", "127.0.0.1"),
            ("PORT", "0"),
            ("GRPC_HOST", "127.0.0.1"),
            ("GRPC_PORT", "0"),
            ("DEBUG_HOST", "127.0.0.1"),
            ("DEBUG_PORT", "0"),
        ])
        .env("REDIS_URL", format!("127.0.0.1:{}", redis.port()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let found = listeners(&mut child, &["API", "gRPC"]);
    let _running = Running(child);
    let (api, grpc) = (&found[0], &found[1]);
    let http = serve_support::client();
    for path in ["/healthcheck", "/healthz"] {
        let r = http
            .get(format!("http://{api}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    let mut c = RateLimitServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();
    let mut codes = Vec::new();
    for _ in 0..2 {
        let r = c.should_rate_limit(request()).await.unwrap().into_inner();
        codes.push(Code::try_from(r.overall_code).unwrap());
    }
    assert_eq!(codes, [Code::Ok, Code::OverLimit]);
    // Counted in REDIS_URL: one counter under Floodgate's default prefix (its reservation
    // secret, `fg:secret:reservation`, aside).
    let keys = redis.cli(&["--scan", "--pattern", "fg:*"]).unwrap();
    let counters = keys.lines().filter(|k| !k.contains("secret")).count();
    assert_eq!(counters, 1, "{keys}");
}

/// Builds the `prebuilt` target as `tag` on `base` with the binary this suite built.
fn build_prebuilt(base: &str, tag: &str) -> Image {
    // The build context: the binary this suite built, and the files the Containerfile copies.
    let context = tempfile::tempdir().unwrap();
    std::fs::copy(
        env!("CARGO_BIN_EXE_floodgate"),
        context.path().join("floodgate"),
    )
    .unwrap();
    std::fs::create_dir_all(context.path().join("scripts/container")).unwrap();
    std::fs::copy(
        repo().join("scripts/container/ratelimit"),
        context.path().join("scripts/container/ratelimit"),
    )
    .unwrap();
    let containerfile = repo().join("Containerfile");
    let image = Image(tag.to_string());
    podman(&[
        "build",
        "--format",
        "docker",
        "--target",
        "prebuilt",
        "--build-arg",
        &format!("BASE={base}"),
        "--build-arg",
        "BINARY=floodgate",
        "-f",
        containerfile.to_str().unwrap(),
        "-t",
        tag,
        context.path().to_str().unwrap(),
    ]);
    image
}

#[tokio::test]
async fn the_image_serves_healthz_and_should_rate_limit_from_a_chroot() {
    // How long the image takes is reported, never asserted: a monotonic clock, not the
    // limiter's.
    #[allow(clippy::disallowed_methods)]
    let started = Instant::now();
    let base = base_image();
    let based = started.elapsed();
    let tag = format!("localhost/floodgate-image-test:{}", std::process::id());

    let _image = build_prebuilt(&base, &tag);

    // What the image declares.
    let inspect: Value = serde_json::from_str(&podman(&["image", "inspect", &tag])).unwrap();
    let config = &inspect[0]["Config"];
    assert_eq!(
        config["Entrypoint"],
        serde_json::json!(["/usr/local/bin/floodgate"])
    );
    assert_eq!(config["Cmd"][0], "serve");
    let user = config["User"].as_str().unwrap().to_string();
    assert!(
        !user.is_empty() && !user.starts_with('0') && user != "root",
        "{user}"
    );
    let health: Vec<String> = inspect[0]["Healthcheck"]["Test"]
        .as_array()
        .expect("a HEALTHCHECK")
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(health[0], "CMD");
    assert!(health.iter().any(|a| a.contains("/healthz")), "{health:?}");

    // A user's configuration on top of it (as a ConfigMap would be mounted).
    let layer = tempfile::tempdir().unwrap();
    std::fs::write(layer.path().join("ratelimit.yaml"), YAML).unwrap();
    std::fs::write(layer.path().join("runtime.yaml"), RUNTIME_YAML).unwrap();
    std::fs::write(
        layer.path().join("Containerfile"),
        format!(
            "FROM {tag}\nCOPY ratelimit.yaml /etc/floodgate/ratelimit.yaml\n\
             COPY runtime.yaml /data/ratelimit/config/config.yaml\n"
        ),
    )
    .unwrap();
    let configured = Image(format!("{tag}-configured"));
    podman(&[
        "build",
        "--format",
        "docker",
        "-t",
        &configured.0,
        layer.path().to_str().unwrap(),
    ]);
    let root = podman(&["image", "mount", &configured.0])
        .trim()
        .to_string();
    assert!(Path::new(&root).join("bin/ratelimit").exists());

    // The entrypoint in a chroot of the image, as its user, on free ports.
    let entrypoint = config["Entrypoint"][0].as_str().unwrap();
    let mut child = Command::new("chroot")
        .arg(format!("--userspec={user}"))
        .arg(&root)
        .arg(entrypoint)
        .args(["serve", "--config", "/etc/floodgate/ratelimit.yaml"])
        .args(["--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let found = listeners(&mut child, &["API", "gRPC"]);
    let running = Running(child);
    let (api, grpc) = (&found[0], &found[1]);
    let port = api.rsplit(':').next().unwrap();

    // The image's own health check, in the chroot, against that port.
    let status = Command::new("chroot")
        .arg(format!("--userspec={user}"))
        .arg(&root)
        .arg("env")
        .arg(format!("PORT={port}"))
        .args(&health[1..])
        .status()
        .unwrap();
    assert!(status.success(), "the HEALTHCHECK command failed");
    let r = serve_support::client()
        .get(format!("http://{api}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    let mut c = RateLimitServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();
    let mut codes = Vec::new();
    for _ in 0..3 {
        let r = c.should_rate_limit(request()).await.unwrap().into_inner();
        codes.push(Code::try_from(r.overall_code).unwrap());
    }
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit]);
    drop(running);

    // envoyproxy/ratelimit's entrypoint and environment, as its Deployment runs it.
    let redis = RedisServer::start().unwrap();
    ratelimit_in_the_chroot(&root, &user, &redis).await;
    eprintln!(
        "image test: base ready in {:.1} s, all in {:.1} s",
        based.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}
