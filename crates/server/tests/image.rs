//! The `Containerfile` built with the real `podman` (Debian's package): no image registry is
//! reachable from the test machines, so the base is made from Debian's packages with
//! `mmdebstrap` (the host's release, cached under `target/image-base/`) and `podman import`,
//! and passed as `BASE`; the `prebuilt` target copies the binary this test suite built.
//! Containers cannot start on these machines (no cgroup controllers), so the image is mounted
//! (`podman image mount`) and its entrypoint run in a chroot of it, as the image's user: it
//! answers `/healthz` (the image's own HEALTHCHECK command, run in the chroot too) and
//! `ShouldRateLimit` on a YAML configuration added on top as a user's would be.

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
            .args(["--variant=essential", "--quiet", &suite])
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

#[tokio::test]
async fn the_image_serves_healthz_and_should_rate_limit_from_a_chroot() {
    // How long the image takes is reported, never asserted: a monotonic clock, not the
    // limiter's.
    #[allow(clippy::disallowed_methods)]
    let started = Instant::now();
    let base = base_image();
    let based = started.elapsed();
    let tag = format!("localhost/floodgate-image-test:{}", std::process::id());

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
    let _image = Image(tag.clone());
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
        &tag,
        context.path().to_str().unwrap(),
    ]);

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
    std::fs::write(
        layer.path().join("Containerfile"),
        format!("FROM {tag}\nCOPY ratelimit.yaml /etc/floodgate/ratelimit.yaml\n"),
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
    let stdout = child.stdout.take().unwrap();
    let _running = Running(child);
    let (mut api, mut grpc) = (None, None);
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        let addr = line
            .strip_prefix("floodgate: listening on ")
            .and_then(|rest| rest.split(' ').next())
            .map(str::to_string);
        if line.ends_with("(API)") {
            api = addr;
        } else if line.ends_with("(gRPC)") {
            grpc = addr;
        }
        if api.is_some() && grpc.is_some() {
            break;
        }
    }
    let (api, grpc) = (
        api.expect("the API listener"),
        grpc.expect("the gRPC listener"),
    );
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
    let request = RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "generic_key".into(),
                value: "all".into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    };
    let mut codes = Vec::new();
    for _ in 0..3 {
        let r = c
            .should_rate_limit(request.clone())
            .await
            .unwrap()
            .into_inner();
        codes.push(Code::try_from(r.overall_code).unwrap());
    }
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit]);
    eprintln!(
        "image test: base ready in {:.1} s, all in {:.1} s",
        based.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}
