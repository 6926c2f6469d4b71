//! `[server]`: listeners and reservations.

use super::*;

#[test]
fn server_grpc_listen_is_an_address() {
    let c = parse("f.toml", "[server]\ngrpc_listen = \"127.0.0.1:8081\"\n").unwrap();
    assert_eq!(
        c.server.grpc_listen,
        Some("127.0.0.1:8081".parse().unwrap())
    );
    let e = parse("f.toml", "[server]\ngrpc_listen = \"8081\"\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "f.toml:2: server.grpc_listen: invalid address \"8081\": expected IP:PORT, e.g. \"127.0.0.1:8081\""
    );
}

#[test]
fn reservation_secret_and_ttl_are_read_and_bad_values_name_file_line_and_field() {
    let c = parse(
        "f.toml",
        "[server]\nreservation_secret = \"0123456789abcdef0123456789abcdef\"\nreservation_ttl = \"90s\"\n",
    )
    .unwrap();
    assert_eq!(
        c.server.reservation_secret.as_deref(),
        Some("0123456789abcdef0123456789abcdef")
    );
    assert_eq!(c.server.reservation_ttl, 90_000_000);
    // The defaults: no secret (a random one per process), 5 minutes.
    let c = parse("f.toml", "").unwrap();
    assert_eq!(c.server.reservation_secret, None);
    assert_eq!(c.server.reservation_ttl, DEFAULT_RESERVATION_TTL);
    let e =
        err("[server]\n\nreservation_secret = \"too short\"\nreservation_ttl = \"5fortnights\"\n");
    let lines: Vec<&str> = e.lines().collect();
    assert_eq!(lines.len(), 2, "{e}");
    assert!(
        lines[0].starts_with(
            "rules.toml:3: server.reservation_secret: must be at least 32 printable ASCII"
        ),
        "{e}"
    );
    assert!(
        lines[1].starts_with("rules.toml:4: server.reservation_ttl: invalid duration"),
        "{e}"
    );
    let e = err("[server]\nreservation_ttl = \"5\"\n");
    assert_eq!(
        e,
        "rules.toml:2: server.reservation_ttl: invalid duration: duration \"5\" has no unit \
         (use us, ms, s, min, h or day)"
    );
    for ttl in ["500ms", "8day"] {
        let e = err(&format!("[server]\nreservation_ttl = \"{ttl}\"\n"));
        assert_eq!(
            e,
            format!(
                "rules.toml:2: server.reservation_ttl: must be between 1s and 7day, got \"{ttl}\""
            )
        );
    }
    let e = err("[server]\nreservation_ttl = 300\n");
    assert!(e.starts_with("rules.toml:2:"), "{e}");
    assert!(e.contains("reservation_ttl"), "{e}");
}
