#!/usr/bin/env python3
"""Floodgate beside its peers, one run: `scripts/peers` builds everything and calls this.

    run.py --out DIR [--rounds 3] [--seconds 2] [--only inproc,http,grpc,redis]

Sections (each writes DIR/<section>.md and prints it):
- inproc: the criterion bench in crates/bench/peers/rust (Floodgate KeyedLimiter, governor,
  limitador's in-memory storage; 1k and 1M String keys; 1 and 2 threads).
- http: `floodgate serve` POST /v1/check beside throttlecrab-server POST /throttle, both GCRA,
  the same wrk load (2 threads, 32 keep-alive connections, 1,000 keys), rounds interleaved.
- grpc: `floodgate serve --grpc-listen` ShouldRateLimit (Envoy RLS v3) beside
  throttlecrab-server's gRPC Throttle, both GCRA, the same load generator (grpc-peer: 32 HTTP/2
  connections, one closed loop each, 1,000 keys), rounds interleaved.
- redis: one redis-server for everyone; per round and client count (1 sequential, 64
  concurrent) every implementation once, interleaved; FLUSHALL and CONFIG RESETSTAT before each
  run; Redis CPU per decision from INFO commandstats (usec of every command the run sent);
  MEMORY USAGE per key from a probe of 1,000 fresh keys, one decision each, in database 1.
  Then the hot key: 64 concurrent clients on ONE key, every implementation (Floodgate's engine
  twice: without a lease and with a 20 ms lease), in the same rounds; Redis calls and CPU per
  decision, admitted against the exact count, ratio to Floodgate with the lease.

Every table prints min / median / max over the rounds and the ratio of medians to Floodgate's
same-algorithm row, measured in the same run. Paths of the built tools come from the
environment scripts/peers sets (FLOODGATE_BIN, REDIS_PEER_BIN, GRPC_PEER_BIN, THROTTLECRAB_BIN,
NODE_PATH, PEERS_PYTHON, PEERS_CARGO_TARGET).
"""

import argparse
import datetime
import json
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]


def load():
    return open("/proc/loadavg").read().split()[:3]


def log(msg):
    print(f"[{datetime.datetime.now(datetime.timezone.utc):%H:%M:%S}] load "
          f"{' '.join(load())} :: {msg}", file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, proc, what):
    for _ in range(200):
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited before listening (exit {proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{what} did not listen on {port}")


def cpu_seconds(pid):
    """utime + stime of a process, in seconds (USER_HZ = 100)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100


def spread(values, digits=0):
    """'min / median / max'."""
    fmt = f"{{:,.{digits}f}}"
    return " / ".join(fmt.format(v) for v in (min(values), statistics.median(values), max(values)))


def fmt(v, digits):
    """`v` with `digits` decimals, "-" when not measured (NaN)."""
    return "-" if v != v else f"{v:,.{digits}f}"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(out)


def versions():
    def first_line(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip().splitlines()[0]
        except (OSError, IndexError):
            return "?"
    return {
        "floodgate": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                    capture_output=True, text=True).stdout.strip(),
        "redis-server": first_line(["redis-server", "--version"]),
        "wrk": first_line(["wrk", "--version"]),
        "node": first_line(["node", "--version"]),
        "python": first_line([os.environ.get("PEERS_PYTHON", "python3"), "--version"]),
        "rustc": first_line(["rustc", "--version"]),
    }


# ---------------------------------------------------------------- in-process (criterion)

def inproc(args):
    target = pathlib.Path(os.environ["PEERS_CARGO_TARGET"])
    crit = target / "criterion"
    subprocess.run(["rm", "-rf", str(crit)], check=True)
    log("inproc: criterion bench keyed (Floodgate, governor, limitador)")
    features = [] if args.limitador else ["--no-default-features"]
    subprocess.run(
        ["cargo", "bench", "--locked", *features, "--bench", "keyed", "--", "--warm-up-time",
         "1", "--measurement-time", str(max(1, int(args.seconds))), *args.bench_filter],
        cwd=HERE / "rust", check=True, env=dict(os.environ, CARGO_TARGET_DIR=str(target)))
    ns = {}
    for meta_path in crit.glob("**/new/benchmark.json"):
        meta = json.loads(meta_path.read_text())
        est = json.loads((meta_path.parent / "estimates.json").read_text())
        ns[meta["full_id"]] = (est.get("slope") or est["mean"])["point_estimate"]
    rows = []
    for keys in ("1k", "1m"):
        for t in ("1t", "2t"):
            get = lambda name: ns.get(f"peers/{keys}/{name}/{t}", float("nan"))
            fg, gov, fw, lim = (get("floodgate_gcra"), get("governor"),
                                get("floodgate_fixed_window"), get("limitador"))
            rows.append([keys, t[0], fmt(fg, 1), fmt(gov, 1), fmt(gov / fg, 2),
                         fmt(fw, 1), fmt(lim, 1), fmt(lim / fw, 2)])
    speed = []
    for keys in ("1k", "1m"):
        row = [keys]
        for name in ("floodgate_gcra", "governor", "floodgate_fixed_window", "limitador"):
            one = ns.get(f"peers/{keys}/{name}/1t", float("nan"))
            two = ns.get(f"peers/{keys}/{name}/2t", float("nan"))
            row.append(fmt(one / two, 2))
        speed.append(row)
    return (
        "#### In-process keyed checks, ns per check (criterion point estimate)\n\n"
        + table(["keys", "threads", "Floodgate GCRA", "governor 0.10.4 (GCRA)",
                 "governor / Floodgate", "Floodgate fixed window",
                 "limitador 0.14.0 in-memory (fixed window)", "limitador / Floodgate"], rows)
        + "\n\n2-thread speed-up (1-thread time / 2-thread time per check):\n\n"
        + table(["keys", "Floodgate GCRA", "governor", "Floodgate fixed window", "limitador"],
                speed)
        + "\n\nString keys `user:NNNNNN`, uniform order, every check admits and writes; "
          "2 threads share one limiter, time is wall time per check over both threads. "
          "limitador at its storage layer (`InMemoryStorage::check_and_update` on prebuilt "
          "counters; its per-request CEL evaluation is not counted). Ratios above 1: the peer "
          "takes longer than Floodgate.\n")


# ---------------------------------------------------------------- HTTP

WRK_SCRIPT = r"""
local i = 0
local fmt = %s
request = function()
  i = i + 1
  return wrk.format("POST", "%s", {["Content-Type"] = "application/json"},
                    string.format(fmt, i %% 1000))
end
done = function(summary, latency, requests)
  io.write(string.format("JSON {\"requests\": %%d, \"seconds\": %%f, \"errors\": %%d, "
    .. "\"non2xx\": %%d, \"p50_us\": %%d, \"p99_us\": %%d}\n", summary.requests,
    summary.duration / 1e6, summary.errors.connect + summary.errors.read + summary.errors.write
    + summary.errors.timeout, summary.errors.status, latency:percentile(50),
    latency:percentile(99)))
end
"""


def wrk(port, path, body_fmt, seconds, connections):
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(WRK_SCRIPT % (json.dumps(body_fmt), path))
        script = f.name
    try:
        out = subprocess.run(
            ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "-s", script,
             f"http://127.0.0.1:{port}{path}"],
            capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(script)
    line = next(l for l in out.splitlines() if l.startswith("JSON "))
    return json.loads(line[5:])


def http(args):
    fg_port, tc_port = free_port(), free_port()
    config = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    config.write('[[rules]]\nname = "per-user"\nalgorithm = "gcra"\nlimit = 10000000\n'
                 'period = "1s"\nkey = "client_ip"\n')
    config.close()
    servers = {
        "Floodgate POST /v1/check": (
            subprocess.Popen([os.environ["FLOODGATE_BIN"], "serve", "--config", config.name,
                              "--listen", f"127.0.0.1:{fg_port}", "--watch-interval", "0"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
            fg_port, "/v1/check", '{"rule":"per-user","key":"user:%06d","cost":1}'),
        "throttlecrab-server 0.4.40 POST /throttle": (
            subprocess.Popen([os.environ["THROTTLECRAB_BIN"], "--http", "--http-host",
                              "127.0.0.1", "--http-port", str(tc_port),
                              "--store-capacity", "100000"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
            tc_port, "/throttle",
            '{"key":"user:%06d","max_burst":10000000,"count_per_period":10000000,'
            '"period":1,"quantity":1}'),
    }
    try:
        for name, (proc, port, _, _) in servers.items():
            wait_port(port, proc, name)
        results = {name: [] for name in servers}
        for r in range(args.rounds):
            for name, (proc, port, path, body) in servers.items():
                log(f"http round {r + 1}: {name}")
                wrk(port, path, body, 1, args.connections)  # warm-up, not counted
                before = cpu_seconds(proc.pid)
                res = wrk(port, path, body, args.http_seconds, args.connections)
                res["cpu_us"] = (cpu_seconds(proc.pid) - before) * 1e6 / max(res["requests"], 1)
                results[name].append(res)
    finally:
        for proc, *_ in servers.values():
            proc.terminate()
            proc.wait()
        os.unlink(config.name)
    base = statistics.median(r["requests"] / r["seconds"] for r in results["Floodgate POST /v1/check"])
    rows = []
    for name, rs in results.items():
        rps = [r["requests"] / r["seconds"] for r in rs]
        rows.append([name, spread(rps), f"{statistics.median(rps) / base:.2f}",
                     f"{statistics.median(r['p50_us'] for r in rs):,.0f}",
                     f"{statistics.median(r['p99_us'] for r in rs):,.0f}",
                     f"{statistics.median(r['cpu_us'] for r in rs):.1f}",
                     sum(r["errors"] + r["non2xx"] for r in rs)])
    return (
        f"#### HTTP decision service over loopback: wrk -t2 -c{args.connections}, "
        f"{args.http_seconds} s per run, {args.rounds} interleaved rounds\n\n"
        + table(["server", "requests/s (min / median / max)", "ratio to Floodgate",
                 "p50 (us, median)", "p99 (us, median)", "server CPU (us/request)",
                 "errors + non-2xx"], rows)
        + "\n\nBoth GCRA, 10,000,000 per second per key (every request admitted), keys "
          "`user:000000`..`user:000999` in turn; both servers on their default tokio runtime "
          "(2 workers here); wrk's own 2 threads share the machine. Server CPU: the serving "
          "process's user + system time per answered request.\n")


# ---------------------------------------------------------------- gRPC

def grpc(args):
    fg_api, fg_port, tc_port = free_port(), free_port(), free_port()
    config = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    config.write('[[rules]]\nname = "per-user"\nalgorithm = "gcra"\nlimit = 10000000\n'
                 'period = "1s"\ndomain = "bench"\ndescriptors = [{ key = "user" }]\n')
    config.close()
    fg = "Floodgate ShouldRateLimit (Envoy RLS v3)"
    tc = "throttlecrab-server 0.4.40 Throttle"
    servers = {
        fg: (subprocess.Popen([os.environ["FLOODGATE_BIN"], "serve", "--config", config.name,
                               "--listen", f"127.0.0.1:{fg_api}",
                               "--grpc-listen", f"127.0.0.1:{fg_port}",
                               "--watch-interval", "0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
             fg_port, "floodgate"),
        tc: (subprocess.Popen([os.environ["THROTTLECRAB_BIN"], "--grpc", "--grpc-host",
                               "127.0.0.1", "--grpc-port", str(tc_port),
                               "--store-capacity", "100000"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
             tc_port, "throttlecrab"),
    }
    peer = os.environ["GRPC_PEER_BIN"]
    try:
        for name, (proc, port, _) in servers.items():
            wait_port(port, proc, name)
        results = {name: [] for name in servers}
        for r in range(args.rounds):
            for name, (proc, port, target) in servers.items():
                log(f"grpc round {r + 1}: {name}")
                out = subprocess.run(
                    [peer, target, f"http://127.0.0.1:{port}", str(args.connections), "1",
                     str(args.http_seconds), str(proc.pid)],
                    capture_output=True, text=True, check=True).stdout
                res = json.loads(out.strip().splitlines()[-1])
                res["rate"] = res["decisions"] / res["seconds"]
                res["load"] = load()[0]
                results[name].append(res)
    finally:
        for proc, *_ in servers.values():
            proc.terminate()
            proc.wait()
        os.unlink(config.name)
    base = statistics.median(r["rate"] for r in results[fg])
    rows = []
    for name, rs in results.items():
        rates = [r["rate"] for r in rs]
        per = lambda key: statistics.median(r[key] * 1e6 / max(r["decisions"], 1) for r in rs)
        rows.append([name, spread(rates), " / ".join(f"{v:,.0f}" for v in rates),
                     f"{statistics.median(rates) / base:.2f}",
                     f"{statistics.median(r['p50_us'] for r in rs):,.0f}",
                     f"{statistics.median(r['p99_us'] for r in rs):,.0f}",
                     f"{per('server_cpu_s'):.1f}", f"{per('client_cpu_s'):.1f}",
                     f"{rs[0]['request_bytes']} / {rs[0]['answer_bytes']}",
                     sum(r["not_ok"] for r in rs)])
    per_round = [a["rate"] / b["rate"] for a, b in zip(results[fg], results[tc])]
    tc_median = statistics.median(r["rate"] for r in results[tc])
    return (
        f"#### gRPC decision service over loopback: grpc-peer, {args.connections} HTTP/2 "
        f"connections, {args.http_seconds} s per run, {args.rounds} interleaved rounds\n\n"
        + table(["server", "decisions/s (min / median / max)", "rounds (decisions/s)",
                 "ratio to Floodgate", "p50 (us, median)", "p99 (us, median)",
                 "server CPU (us/decision)", "client CPU (us/decision)",
                 "protobuf bytes (request / answer)", "not admitted"],
                rows)
        + f"\n\nFloodgate / throttlecrab-server, decisions/s: {base / tc_median:.2f} "
          f"(medians); per round {' / '.join(f'{v:.2f}' for v in per_round)}. 1-minute load "
          f"average after each run: {' / '.join(r['load'] for pair in zip(results[fg], results[tc]) for r in pair)} "
          "(Floodgate, throttlecrab, ...).\n\n"
          "Both GCRA, 10,000,000 per second per key (every request admitted; the last column "
          "counts answers that were not), keys `user:000000`..`user:000999` in turn, one "
          "descriptor (`user`) per ShouldRateLimit request. One load generator for both "
          "(`crates/bench/peers/rust/src/bin/grpc-peer.rs`: tonic 0.14 clients, envoy-types "
          "for Floodgate, throttlecrab-server's own generated client), one tonic channel "
          "(HTTP/2 connection) per closed loop on 2 tokio workers; per run 1 s of warm-up on "
          "the same connections, not counted. Both servers on their default tokio runtime "
          "(2 workers here) share the machine's 2 CPUs with the client. Server / client CPU: "
          "user + system time of the serving process / the load generator over the measured "
          "pass, per decision. Protobuf bytes: one request and its answer as encoded, "
          "without gRPC and HTTP/2 framing.\n")


# ---------------------------------------------------------------- Redis

ADMIN = {"info", "config", "flushall", "flushdb", "select", "ping", "client", "hello",
         "command", "memory", "scan", "dbsize", "script", "auth"}

# (label, algorithm family, command line builder(url, clients, seconds, keys))
def redis_impls():
    peer = os.environ["REDIS_PEER_BIN"]
    py = os.environ["PEERS_PYTHON"]
    node = "node"
    def rust(imp):
        return lambda url, c, s, k: [peer, imp, url, str(c), str(s), str(k)]
    def limits(strategy):
        return lambda url, c, s, k: [py, str(HERE / "python" / "limits_peer.py"), strategy,
                                      url, str(c), str(s), str(k)]
    def rlf(url, c, s, k):
        return [node, str(HERE / "node" / "rlf.js"), url, str(c), str(s), str(k)]
    return [
        ("Floodgate fixed window", "fixed window", True, rust("floodgate:fixed_window")),
        ("limitador 0.14.0 (AsyncRedisStorage)", "fixed window", False, rust("limitador")),
        ("rate-limiter-flexible 11.4.0 (ioredis 6.0.0)", "fixed window", False, rlf),
        ("limits 5.8.0 fixed window", "fixed window", False, limits("fixed_window")),
        ("Floodgate sliding log", "exact log", True, rust("floodgate:sliding_log")),
        ("limits 5.8.0 moving window", "exact log", False, limits("moving_window")),
        ("Floodgate sliding window", "sliding window counter", True,
         rust("floodgate:sliding_window")),
        ("limits 5.8.0 sliding window counter", "sliding window counter", False,
         limits("sliding_window_counter")),
        ("Floodgate GCRA", "GCRA", True, rust("floodgate:gcra")),
    ]


# The hot key's implementations: (label, algorithm, limit per minute, command line builder).
HOT_LEASE = "Floodgate engine, lease 20ms"


def hot_impls():
    rust = {label: cmd for label, _, _, cmd in redis_impls()}
    peer = os.environ["REDIS_PEER_BIN"]
    def engine(imp):
        return lambda url, c, s, k: [peer, imp, url, str(c), str(s), str(k)]
    return [
        ("Floodgate engine, no lease", "fixed window", 100_000_000,
         engine("floodgate-engine:fixed_window")),
        (HOT_LEASE, "fixed window", 100_000_000, engine("floodgate-engine:fixed_window:lease=20")),
        *((label, family, 1_000_000, rust[label]) for label, family, is_fg, _ in redis_impls()
          if not is_fg),
    ]


def rcli(port, *cmd, db=0):
    return subprocess.run(["redis-cli", "-p", str(port), "-n", str(db), *cmd],
                          capture_output=True, text=True, check=True).stdout


def quote(arg):
    """One argument for redis-cli's stdin (limitador's key names hold quotes and spaces)."""
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


SCRIPTS = {"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}


def commandstats(port):
    """(script calls, usec in scripts, other top-level calls) from INFO commandstats.

    Commands a script runs are counted again under their own names, so only script calls'
    usec is summed; `other` counts the commands of implementations that send no script (an
    upper bound when scripts also run: their inner commands are in it too)."""
    calls = usec = other = 0
    for line in rcli(port, "INFO", "commandstats").splitlines():
        if not line.startswith("cmdstat_"):
            continue
        name, rest = line[len("cmdstat_"):].split(":", 1)
        name = name.split("|")[0]
        if name in ADMIN:
            continue
        f = dict(kv.split("=") for kv in rest.split(","))
        if name in SCRIPTS:
            calls += int(f["calls"])
            usec += int(f["usec"])
        else:
            other += int(f["calls"])
    return calls, usec, other


def redis_cpu(port):
    """used_cpu_user + used_cpu_sys of the server, in microseconds."""
    f = dict(l.split(":", 1) for l in rcli(port, "INFO", "cpu").splitlines() if ":" in l)
    return (float(f["used_cpu_user"]) + float(f["used_cpu_sys"])) * 1e6


def redis_run(port, label, argv):
    """One run on a flushed server with reset statistics: the driver's JSON line, with the
    server's CPU (`cpu`, us) and INFO commandstats (`calls`, `usec`, `other`) over the run."""
    rcli(port, "FLUSHALL")
    rcli(port, "CONFIG", "RESETSTAT")
    cpu_before = redis_cpu(port)
    out = subprocess.run(argv, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{label} failed: {out.stderr.strip()[-2000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["cpu"] = redis_cpu(port) - cpu_before
    res["calls"], res["usec"], res["other"] = commandstats(port)
    return res


def hot_table(args, hot, results):
    """The hot key's table: one row per implementation, min / median / max over the rounds."""
    rate = lambda rs: [r["decisions"] / r["seconds"] for r in rs]
    base = statistics.median(rate(results[HOT_LEASE])) if results.get(HOT_LEASE) else float("nan")
    rows = []
    for label, family, limit, _ in hot:
        rs = results[label]
        per = lambda f: [f(r) / max(r["total"], 1) for r in rs]
        # Script calls; for implementations that send none, their plain commands.
        calls = per(lambda r: r["calls"] or r["other"])
        cpu = per(lambda r: r["cpu"])
        decided = sum(r["decisions"] for r in rs)
        errors = sum(r.get("store_errors", 0) for r in rs)
        admitted = decided - sum(r["denied"] for r in rs) - errors
        # Every run's decisions (warm-up included) fit the limit: the exact count is all of them.
        exact = (f"{decided:,}" if all(r["total"] <= limit for r in rs)
                 else "- (the limit was reached)")
        rows.append([label, family, f"{limit:,}", spread(rate(rs)),
                     fmt(statistics.median(rate(rs)) / base, 2), spread(calls, 4),
                     spread(cpu, 2), f"{admitted:,}", exact,
                     f"{statistics.median(r['p50_us'] for r in rs):,.0f}",
                     f"{statistics.median(r['p99_us'] for r in rs):,.0f}", f"{errors:,}"])
    return (
        f"#### Redis-backed decisions, one hot key, 64 concurrent clients, {args.seconds} s per "
        f"run, {args.rounds} interleaved rounds\n\n"
        + table(["implementation", "algorithm", "limit per minute",
                 "decisions/s (min / median / max)", "ratio to Floodgate with the lease",
                 "Redis calls per decision (min / median / max)",
                 "Redis CPU us per decision (min / median / max)",
                 "admitted (measured, all rounds)", "exact count", "p50 (us)", "p99 (us)",
                 "store errors (measured, all rounds)"],
                rows)
        + "\n\nThe same server, rounds and drivers as the tables below, on the single key "
          "`user:000000` (KEYS = 1). Floodgate through its engine (`RateLimiter::evaluate`, "
          "one rule over the Redis store): without a lease every decision is one script "
          "call; with `lease` 20 ms (at most a tenth of the capacity per lease, sized from the "
          "instance's own rate) decisions are made from units taken beforehand, and the units "
          "still held are returned before the driver exits (those calls are counted). Limits "
          "are far above what a run reaches (Floodgate 100,000,000 per minute, the peers "
          "their 1,000,000 per minute), so each one's exact algorithm admits every decision: "
          "the exact count is every measured decision, and admitted must equal it. Store errors: "
          "Floodgate's decisions whose store call failed (the engine's verdict carries the "
          "error and admits by the rule's failure mode): counted apart, not as admitted. Redis "
          "calls: INFO commandstats calls of EVAL/EVALSHA, or of plain commands for "
          "implementations that send no script, per decision (warm-up included); Redis CPU: "
          "used_cpu_user + used_cpu_sys over the run per decision. Ratios above 1: the peer is "
          "faster than Floodgate with the lease.\n")


def redis(args):
    port = free_port()
    tmp = tempfile.mkdtemp()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", tmp], stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}"
    impls = [i for i in redis_impls()
             if (args.limitador or not i[0].startswith("limitador"))
             and (not args.impls or any(f in i[0] for f in args.impls.split(",")))]
    results = {(label, c): [] for label, *_ in impls for c in (1, 64)}
    hot = [i for i in hot_impls()
           if (args.limitador or not i[0].startswith("limitador"))
           and (not args.impls or any(f in i[0] for f in args.impls.split(",")))]
    hot_results = {label: [] for label, *_ in hot}
    try:
        wait_port(port, server, "redis-server")
        for r in range(args.rounds):
            for clients in (1, 64):
                for label, _, _, cmd in impls:
                    log(f"redis round {r + 1}, {clients} client(s): {label}")
                    results[(label, clients)].append(
                        redis_run(port, label, cmd(url, clients, args.seconds, 100_000)))
            for label, _, _, cmd in hot:
                log(f"redis round {r + 1}, hot key, 64 clients: {label}")
                hot_results[label].append(redis_run(port, label, cmd(url, 64, args.seconds, 1)))
        memory = {}
        for label, _, _, cmd in impls:
            # A probe's keys can expire under it (a fixed window of 1 per minute ends at the
            # minute): a probe that finds a key gone is run again, at most three times.
            for attempt in range(3):
                log(f"redis memory probe: {label}")
                rcli(port, "FLUSHALL")
                out = subprocess.run(cmd(url + "/1", 0, 0, 1000), capture_output=True,
                                     text=True)
                if out.returncode != 0:
                    raise SystemExit(f"{label} probe failed: {out.stderr.strip()[-2000:]}")
                keys, cursor = [], "0"
                while True:
                    reply = rcli(port, "SCAN", cursor, "COUNT", "1000", db=1).split("\n")
                    cursor = reply[0]
                    keys += [k for k in reply[1:] if k]
                    if cursor == "0":
                        break
                # One pipelined redis-cli for all keys: milliseconds, not seconds.
                usage = subprocess.run(
                    ["redis-cli", "-p", str(port), "-n", "1"],
                    input="".join(f"MEMORY USAGE {quote(k)} SAMPLES 0\n" for k in keys),
                    capture_output=True, text=True, check=True).stdout.split("\n")[:len(keys)]
                if all(u.strip().isdigit() for u in usage):
                    break
                log(f"redis memory probe: {label}: a key expired during the probe, again")
            else:
                raise SystemExit(f"{label} probe: keys kept expiring during the probe")
            memory[label] = (sum(int(u) for u in usage) / 1000, len(keys))
    finally:
        server.terminate()
        server.wait()
    out = [] if not hot else [hot_table(args, hot, hot_results)]
    for clients in (1, 64):
        rows = []
        base = {}
        for label, family, is_fg, _ in impls:
            rs = results[(label, clients)]
            if is_fg and rs:
                base[family] = statistics.median(r["decisions"] / r["seconds"] for r in rs)
        for label, family, is_fg, _ in impls:
            rs = results[(label, clients)]
            rate = [r["decisions"] / r["seconds"] for r in rs]
            per = lambda k: statistics.median(r[k] / max(r["total"], 1) for r in rs)
            cpu, usec, calls, other = per("cpu"), per("usec"), per("calls"), per("other")
            mem, nkeys = memory[label]
            ratio = ("-" if is_fg or family not in base
                     else f"{statistics.median(rate) / base[family]:.2f}")
            rows.append([label, family, spread(rate), ratio,
                         f"{statistics.median(r['p50_us'] for r in rs):,.0f}",
                         f"{statistics.median(r['p99_us'] for r in rs):,.0f}",
                         f"{cpu:.1f}", f"{usec:.1f}", f"{calls:.2f}",
                         f"{other:.2f}" if not calls else "-", f"{mem:.0f} ({nkeys})",
                         sum(r.get("denied", 0) for r in rs)])
        out.append(
            f"#### Redis-backed decisions, {clients} "
            f"{'sequential client' if clients == 1 else 'concurrent clients'}, "
            f"{args.seconds} s per run, {args.rounds} interleaved rounds\n\n"
            + table(["implementation", "algorithm", "decisions/s (min / median / max)",
                     "ratio to Floodgate, same algorithm", "p50 (us)", "p99 (us)",
                     "Redis CPU us per decision (INFO cpu)",
                     "in scripts, us per decision (commandstats)",
                     "script calls per decision", "plain commands per decision",
                     "MEMORY USAGE per client key, B (Redis keys for 1,000)", "denied"],
                    rows))
    return ("\n\n".join(out)
            + "\n\nOne redis-server (`--save '' --appendonly no`, TCP loopback) for every "
              "implementation; FLUSHALL and CONFIG RESETSTAT before each run; 100,000 keys "
              "`user:NNNNNN` in a fixed scrambled order; quota 1,000,000 per minute per key, so "
              "every decision admits and writes (no implementation denied any: the last column). Each implementation uses its own client "
              "library over one client object (Floodgate and limitador: one multiplexed "
              "connection; ioredis: one connection; limits: redis-py, a connection pool). "
              "64 concurrent: 64 tasks (tokio, Node promises, asyncio) in one process. Redis "
              "CPU: the server's used_cpu_user + used_cpu_sys (INFO cpu) over the run, network "
              "I/O included, per decision; in scripts: INFO commandstats usec of EVAL/EVALSHA "
              "(the script's own run time) per decision; both over every decision of the run, "
              "warm-up included. Plain commands: calls of other commands per decision, for "
              "implementations that send no script. MEMORY USAGE: a probe makes one decision on each of 1,000 fresh keys in "
              "database 1, then sums MEMORY USAGE (SAMPLES 0) over every key it created, per "
              "client key; the bracket is how many Redis keys that took. p50/p99: medians of "
              "the rounds. Ratios above 1: the peer is faster.\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=2)
    p.add_argument("--http-seconds", type=int, default=5)
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--only", default="inproc,http,grpc,redis")
    p.add_argument("--no-limitador", dest="limitador", action="store_false",
                   help="leave limitador out (the peers crate built without its feature)")
    p.add_argument("--impls", default="",
                   help="redis: only implementations whose label contains one of these "
                        "comma-separated words")
    p.add_argument("--bench-filter", nargs="*", default=[],
                   help="inproc: criterion filter arguments")
    args = p.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    head = (f"floodgate peers, {now:%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, load average "
            f"{' '.join(load())} at start\nversions: "
            + ", ".join(f"{k} {v}" for k, v in versions().items()) + "\n")
    print(head)
    (out / "head.md").write_text(head)
    for section in args.only.split(","):
        text = {"inproc": inproc, "http": http, "grpc": grpc, "redis": redis}[section](args)
        text += f"\nload average at the end of this section: {' '.join(load())}\n"
        (out / f"{section}.md").write_text(text)
        print(text, flush=True)
    log("done")


if __name__ == "__main__":
    main()
