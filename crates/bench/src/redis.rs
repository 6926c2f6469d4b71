//! `--what redis`: decisions per second through the Redis store (`--store redis://...`), for
//! one sequential client and for 64 concurrent clients sharing the store's multiplexed
//! connection (with coalescing, and without), Redis' own CPU per decision (`INFO
//! commandstats`), `MEMORY USAGE` of one key per algorithm, and `redis-benchmark` (when
//! installed) against the same server sending the exact script call of one check: the server's
//! ceiling for that script, apples to apples.
//!
//! The keys go under the prefixes `fb:` (the store), `f1:` to `f6:` (the script ceiling, one
//! per algorithm) and `fgbench-`
//! (`SET` for scale) and expire on their own (every key written has a TTL); nothing else on the
//! server is touched.

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use floodgate_core::{AlgorithmKind, Policy, SystemClock};
use floodgate_store::redis::{scripts, RedisStore, RedisStoreConfig};
use floodgate_store::{CheckItem, Store};
use serde_json::Value;

use super::report::{num, Section};
use super::{Options, Progress};

/// Distinct keys the throughput runs spread over.
const KEYS: u64 = 100_000;

/// `clients` tasks share up to `total` checks (stopping after `time`); returns decisions per
/// second, the p99 latency in microseconds and the number of checks made.
#[allow(clippy::disallowed_methods)] // a benchmark measures elapsed time
async fn throughput(
    store: &Arc<RedisStore>,
    policy: &Arc<Policy>,
    clients: u64,
    total: u64,
    time: Duration,
) -> anyhow::Result<(f64, f64, u64)> {
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (store, policy, next) = (store.clone(), policy.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total || start.elapsed() >= time {
                    break;
                }
                // A fixed scramble of the request number over KEYS keys.
                let key = format!("user:{:06}", n.wrapping_mul(2_654_435_761) % KEYS);
                let item = CheckItem {
                    rule: "bench",
                    policy: &policy,
                    key: &key,
                    cost: 1,
                };
                let t = Instant::now();
                store.check(&[item]).await?;
                latencies.push(t.elapsed().as_micros() as u64);
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    let elapsed = start.elapsed().as_secs_f64();
    all.sort_unstable();
    let p99 = all
        .get(((all.len() as f64 - 1.0) * 0.99).round() as usize)
        .map_or(f64::NAN, |&v| v as f64);
    Ok((all.len() as f64 / elapsed, p99, all.len() as u64))
}

/// `MEMORY USAGE key SAMPLES 0`.
async fn memory_usage(
    con: &mut redis::aio::MultiplexedConnection,
    key: &str,
) -> anyhow::Result<i64> {
    Ok(redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .arg("SAMPLES")
        .arg(0)
        .query_async(con)
        .await?)
}

/// This process's CPU time (user + system, every thread) in microseconds, from
/// `/proc/self/stat` (Linux; `None` elsewhere). The kernel reports it in USER_HZ = 100 ticks
/// per second, so runs of a few seconds resolve it to about 1%.
fn process_cpu_us() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after ')'.
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks * 10_000)
}

/// `(calls, usec)` of `INFO commandstats` for `EVALSHA` (0, 0 before the first call).
async fn evalsha_stats(con: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<(u64, u64)> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(con)
        .await?;
    let Some(line) = info
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:"))
    else {
        return Ok((0, 0));
    };
    let field = |name: &str| -> u64 {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
            .unwrap_or(0)
    };
    Ok((field("calls"), field("usec")))
}

/// `redis-benchmark -q` with `clients` connections and `pipeline` requests in flight each,
/// running `command` (`__rand_int__` in it is replaced by a random 12-digit number below
/// 100,000); requests per second.
///
/// # Errors
/// Why there is no figure, for the table's notes: the tool is not installed, it timed out, or
/// it failed (its first error line, e.g. `Error from server: ERR ...`: redis-benchmark stops at
/// the first error reply).
fn redis_benchmark_command(
    host: &str,
    port: &str,
    clients: u32,
    pipeline: u32,
    requests: u32,
    command: &[String],
) -> Result<f64, String> {
    let out = Command::new("timeout")
        // A bound, so a stuck server cannot hang the bench; the runs take a few seconds.
        .args(["120", "redis-benchmark"])
        .args(["-h", host, "-p", port, "-q", "-r", "100000"])
        .args(["-n", &requests.to_string()])
        .args(["-c", &clients.to_string(), "-P", &pipeline.to_string()])
        .args(command)
        .output()
        .map_err(|e| format!("could not run redis-benchmark: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let errors = String::from_utf8_lossy(&out.stderr);
    let first_error = || {
        errors
            .lines()
            .chain(text.split(['\r', '\n']))
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.contains("requests per second"))
            .map(str::to_string)
    };
    match out.status.code() {
        // timeout(1): 124 when the limit was reached, 127 when the command is not found.
        Some(124) => return Err("redis-benchmark timed out after 120 s".into()),
        Some(127) => return Err("redis-benchmark is not installed".into()),
        Some(0) => {}
        code => {
            return Err(format!(
                "redis-benchmark failed (exit {}): {}",
                code.map_or("by signal".into(), |c| c.to_string()),
                first_error().unwrap_or_else(|| "no message".into())
            ))
        }
    }
    // "<command>: 90497.73 requests per second, p50=0.295 msec" (the last line after \r).
    text.rsplit(['\r', '\n'])
        .find(|l| l.contains("requests per second"))
        .and_then(|line| line.rsplit_once(": "))
        .and_then(|(_, figures)| figures.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| {
            format!(
                "no figure in redis-benchmark's output: {}",
                first_error().unwrap_or_else(|| "empty".into())
            )
        })
}

/// The exact call the store makes for one single-item check of `policy` with Redis' clock:
/// `EVALSHA <the single-algorithm batch script> 1 <key> '' 1 0 <item>`, the key drawn from
/// 100,000 names of the store's length. So `redis-benchmark` measures the same script, the same
/// arguments and the same key spread as the store's calls, without the store. The key names
/// are per algorithm (`f<code>:`): the store's names differ per policy, and a key left by the
/// previous algorithm's run (its value in another layout) would make the script raise an error,
/// which stops redis-benchmark.
fn same_script_command(policy: &Policy) -> Vec<String> {
    let kind = policy.kind();
    let quota = policy.quota();
    let (num, den) = quota.emission_interval();
    let (script, _) = scripts::batch_script(Some(kind));
    let mut cmd: Vec<String> = vec![
        "EVALSHA".into(),
        script.get_hash().into(),
        "1".into(),
        // 3 + 12 characters: one more than the store's 3 + 11.
        format!("f{}:__rand_int__", scripts::algorithm_code(kind)),
        String::new(),
        "1".into(),
        "0".into(),
        "1".into(),
    ];
    cmd.extend(
        [
            u64::from(scripts::algorithm_code(kind)),
            quota.limit(),
            quota.period(),
            quota.burst(),
            num,
            den,
            1,
        ]
        .map(|v| v.to_string()),
    );
    cmd
}

/// The exact call a lone sequential client's check makes (coalescing on, nothing else in
/// flight): `EVALSHA <the single-algorithm coalescing script> 1 <key> '' <ttl extra> 1
/// <policy> 1 0 0 1 1 1 <cost>`, keys as in [`same_script_command`] (same layout per
/// algorithm, so either run may find the other's keys). `redis-benchmark -c 1` with it is the
/// one-connection rate for this script without Floodgate's client side.
fn lone_check_command(policy: &Policy) -> Vec<String> {
    let kind = policy.kind();
    let quota = policy.quota();
    let (num, den) = quota.emission_interval();
    let (script, _) = scripts::multi_script(Some(kind));
    let mut cmd: Vec<String> = vec![
        "EVALSHA".into(),
        script.get_hash().into(),
        "1".into(),
        format!("f{}:__rand_int__", scripts::algorithm_code(kind)),
        String::new(),
    ];
    cmd.extend(
        [
            // ttl extra (ms), one policy
            0,
            1,
            u64::from(scripts::algorithm_code(kind)),
            quota.limit(),
            quota.period(),
            quota.burst(),
            num,
            den,
            // one batch: commit, no caller time, now 0, one item: key 1, policy 1, cost 1
            1,
            0,
            0,
            1,
            1,
            1,
            1,
        ]
        .map(|v| v.to_string()),
    );
    cmd
}

/// Measures the Redis store at `--store`.
///
/// # Errors
/// No `--store`, an unreachable server, or a failing check.
// Over 120 lines: the measured cases in order on one runtime, store and connection set, each a
// few lines of setup and one measurement; kept in sequence so each case reads next to the one
// it is compared with.
pub fn run(
    kinds: &[AlgorithmKind],
    args: &Options,
    progress: &Progress,
) -> anyhow::Result<Section> {
    let Some(url) = args.store.clone() else {
        bail!(
            "the redis bench needs --store redis://HOST:PORT (for example a local \
             `redis-server --save '' --appendonly no`)"
        );
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let time = Duration::from_secs_f64(args.http_seconds.clamp(0.1, 600.0));
    let total = args.requests;
    let mut section = Section::new(
        "redis",
        format!("Redis store at {url}: decisions per second"),
        &[
            "algorithm",
            "1 sequential client (checks/s)",
            "1 client p99 (us)",
            "redis-benchmark, same script, 1 connection (calls/s)",
            "1 client / redis-benchmark 1 connection",
            "64 concurrent clients (checks/s)",
            "64 clients p99 (us)",
            "MEMORY USAGE, 1 key after 1 request (B)",
            "64 clients, coalescing off (checks/s)",
            "Redis us per decision, 64 clients (coalescing off)",
            "decisions per script call, 64 clients",
            "Redis us per decision, 64 clients",
            "client CPU us per decision, 64 clients",
            "redis-benchmark, same script, 50 conn x pipeline 16 (calls/s)",
            "64 clients / redis-benchmark",
        ],
    );
    let hostport = url
        .trim_start_matches("redis://")
        .split('/')
        .next()
        .unwrap_or("127.0.0.1:6379")
        .rsplit('@')
        .next()
        .unwrap_or("127.0.0.1:6379")
        .to_string();
    let (host, port) = hostport
        .rsplit_once(':')
        .unwrap_or((hostport.as_str(), "6379"));
    rt.block_on(async {
        let mut config = RedisStoreConfig::standalone(url.clone());
        // As short as the default "fg:", so that MEMORY USAGE is the default name's.
        config.prefix = "fb:".into();
        config.timeout = Duration::from_secs(1);
        config.connect_timeout = Duration::from_secs(2);
        let store = Arc::new(RedisStore::new(config.clone(), Arc::new(SystemClock))?);
        store
            .startup_check()
            .await
            .with_context(|| format!("connecting to {url}"))?;
        config.coalesce = 0;
        let uncoalesced = Arc::new(RedisStore::new(config, Arc::new(SystemClock))?);
        uncoalesced.startup_check().await?;
        let mut con = redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        for &kind in kinds {
            // A quota no run reaches per key (about one request per key per second at most):
            // every check is admitted and writes state.
            let policy = Arc::new(Policy::new(kind, "1000/s".parse()?)?);
            progress.step(format!("redis: {kind}"));
            let (seq, seq_p99, _) = throughput(&store, &policy, 1, total / 5, time).await?;
            // The same script's one-connection rate, right after: the latency-bound ceiling of
            // one sequential client.
            let lone =
                redis_benchmark_command(host, port, 1, 1, 20_000, &lone_check_command(&policy));
            if let Err(why) = &lone {
                section.note(format!("{kind}: no one-connection redis-benchmark: {why}."));
            }
            let before = evalsha_stats(&mut con).await?;
            let cpu_before = process_cpu_us();
            let (c64, c64_p99, c64_checks) = throughput(&store, &policy, 64, total, time).await?;
            let cpu_after = process_cpu_us();
            let after = evalsha_stats(&mut con).await?;
            let client_us = match (cpu_before, cpu_after) {
                (Some(b), Some(a)) => a.saturating_sub(b) as f64 / c64_checks.max(1) as f64,
                _ => f64::NAN,
            };
            let (off, _, _) = throughput(&uncoalesced, &policy, 64, total, time).await?;
            let after_off = evalsha_stats(&mut con).await?;
            // With coalescing off one script call is one decision.
            let off_calls = after_off.0.saturating_sub(after.0);
            let off_us = after_off.1.saturating_sub(after.1) as f64 / off_calls.max(1) as f64;
            let per_call = c64_checks as f64 / after.0.saturating_sub(before.0).max(1) as f64;
            let c64_us = after.1.saturating_sub(before.1) as f64 / c64_checks.max(1) as f64;
            // The server's ceiling for the very script a single-item check runs, pipelined.
            let ceiling =
                redis_benchmark_command(host, port, 50, 16, 100_000, &same_script_command(&policy));
            if let Err(why) = &ceiling {
                section.note(format!("{kind}: no redis-benchmark ceiling: {why}."));
            }
            let one = Policy::new(kind, "1000/min".parse()?)?;
            let item = CheckItem {
                rule: "memory",
                policy: &one,
                key: "user:000001",
                cost: 1,
            };
            store.check(&[item]).await?;
            let bytes =
                memory_usage(&mut con, &store.key_name("memory", &one, "user:000001")).await?;
            section.row(vec![
                Value::from(kind.as_str()),
                num(seq, 0),
                num(seq_p99, 0),
                lone.as_ref().map_or(Value::Null, |&c| num(c, 0)),
                lone.as_ref().map_or(Value::Null, |&c| num(seq / c, 2)),
                num(c64, 0),
                num(c64_p99, 0),
                Value::from(bytes),
                num(off, 0),
                num(off_us, 1),
                num(per_call, 1),
                num(c64_us, 1),
                num(client_us, 1),
                ceiling.as_ref().map_or(Value::Null, |&c| num(c, 0)),
                ceiling.as_ref().map_or(Value::Null, |&c| num(c64 / c, 2)),
            ]);
        }
        if kinds.contains(&AlgorithmKind::SlidingLog) {
            let limit = args.limit.clamp(1, 10_000);
            let log = Policy::new(AlgorithmKind::SlidingLog, format!("{limit}/min").parse()?)?;
            let item = CheckItem {
                rule: "memory-full",
                policy: &log,
                key: "user:000001",
                cost: 1,
            };
            let mut admitted = 0;
            while admitted < limit {
                if store.check(&[item]).await?.allowed {
                    admitted += 1;
                }
            }
            let name = store.key_name("memory-full", &log, "user:000001");
            let bytes = memory_usage(&mut con, &name).await?;
            section.note(format!(
                "Sliding log holding {limit} requests (quota {limit}/min, one key): MEMORY USAGE \
                 {bytes} B ({:.1} B per remembered request). The source documents' sorted-set log \
                 at 1,000/min: 92,184 B per user.",
                bytes as f64 / limit as f64
            ));
        }
        anyhow::Ok(())
    })?;

    progress.step("redis: redis-benchmark".to_string());
    let peers = [
        ("SET with expiry, 1 connection", 1, 1),
        ("SET with expiry, 50 connections", 50, 1),
        ("SET with expiry, 50 connections, pipeline 16", 50, 16),
    ];
    let mut measured = Vec::new();
    let mut failed = Vec::new();
    for (name, c, p) in peers {
        let set: Vec<String> = ["SET", "fgbench-__rand_int__", "1", "PX", "60000"]
            .map(String::from)
            .into();
        match redis_benchmark_command(host, port, c, p, 100_000, &set) {
            Ok(rps) => measured.push(format!("{name}: {rps:.0}/s")),
            Err(why) => failed.push(format!("{name}: {why}")),
        }
    }
    if measured.is_empty() {
        section.note(format!(
            "No redis-benchmark figure for scale: {}.",
            failed.join("; ")
        ));
    } else {
        section.note(format!(
            "redis-benchmark against the same server, same run, for scale (100,000 requests of \
             `SET fgbench-<random> 1 PX 60000` over 100,000 keys, each expiring within a \
             minute): {}.",
            measured.join("; ")
        ));
        if !failed.is_empty() {
            section.note(format!(
                "redis-benchmark gave no figure for: {}.",
                failed.join("; ")
            ));
        }
    }
    section.note(format!(
        "Each algorithm: checks on {KEYS} keys `user:NNNNNN` (quota 1000/s, so every check is \
         admitted and writes), at most {} checks (sequential: a fifth of that) or {} s per run. \
         The 64 clients share the store's one multiplexed connection: concurrent calls are \
         pipelined and, with coalescing (the default), the checks waiting while 2 calls are out \
         go together in one script call (\"decisions per script call\"); \"coalescing off\" is \
         one call per check. \"Redis us per decision\" is INFO commandstats EVALSHA usec over \
         the run divided by its checks (Redis' own time in scripts, per decision); \"client CPU\" \
         is this process's CPU time (all threads, /proc/self/stat) over the run per check. The ceiling is redis-benchmark (50 connections, \
         pipeline 16) sending the exact call of a one-item check: EVALSHA of the same \
         single-algorithm script, same arguments, keys drawn from 100,000 names; it is the most \
         this server decides one check per call, without Floodgate (\"-\" where it gave no \
         figure; a note above says why). Decisions use Redis' own \
         clock (TIME). The source documents' one-client Lua \
         figures: fixed window 16,432/s, token bucket 14,699/s, sliding window 14,124/s, sliding \
         log 11,539/s.",
        total,
        time.as_secs_f64()
    ));
    Ok(section)
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_store::redis::testing::RedisServer;

    #[test]
    fn the_ceiling_keys_differ_per_algorithm() {
        let keys: Vec<String> = AlgorithmKind::ALL
            .iter()
            .map(|&k| {
                same_script_command(&Policy::new(k, "1000/s".parse().unwrap()).unwrap())[3].clone()
            })
            .collect();
        assert_eq!(keys[0], "f1:__rand_int__");
        let mut distinct = keys.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), keys.len(), "{keys:?}");
        // The store's name length plus one, as the store's "fb:" + 11.
        assert!(keys.iter().all(|k| k.len() == 15));
    }

    #[test]
    fn a_failing_redis_benchmark_says_why() {
        let server = RedisServer::start().unwrap();
        server.cli(&["SET", "fgtest:str", "hello"]).unwrap();
        let url = server.url();
        let hostport = url
            .trim_start_matches("redis://")
            .split('/')
            .next()
            .unwrap();
        let (host, port) = hostport.rsplit_once(':').unwrap();
        let incr = ["INCR", "fgtest:str"].map(String::from);
        let why = redis_benchmark_command(host, port, 1, 1, 1_000, &incr).unwrap_err();
        assert!(why.contains("ERR value is not an integer"), "{why}");
        let ok = ["SET", "fgtest:__rand_int__", "1", "PX", "1000"].map(String::from);
        assert!(redis_benchmark_command(host, port, 2, 1, 1_000, &ok).unwrap() > 0.0);
    }

    /// The one-connection ceiling's call is one the coalescing script accepts and decides
    /// (redis-benchmark stops at the first error reply, so any layout mistake fails here),
    /// for every algorithm, and it writes the key layout of the same-script ceiling's keys.
    #[test]
    fn the_lone_check_call_is_decided_by_the_coalescing_script() {
        let server = RedisServer::start().unwrap();
        let url = server.url();
        let hostport = url
            .trim_start_matches("redis://")
            .split('/')
            .next()
            .unwrap();
        let (host, port) = hostport.rsplit_once(':').unwrap();
        for kind in AlgorithmKind::ALL {
            let policy = Policy::new(kind, "1000/s".parse().unwrap()).unwrap();
            let lone = lone_check_command(&policy);
            let (_, source) = scripts::multi_script(Some(kind));
            assert_eq!(
                server.cli(&["SCRIPT", "LOAD", source]).unwrap().trim(),
                lone[1]
            );
            let (_, source) = scripts::batch_script(Some(kind));
            server.cli(&["SCRIPT", "LOAD", source]).unwrap();
            assert!(redis_benchmark_command(host, port, 1, 1, 200, &lone).unwrap() > 0.0);
            // Then the pipelined ceiling's script on the keys the lone calls wrote.
            let same = same_script_command(&policy);
            assert_eq!(lone[3], same[3], "{kind}");
            assert!(redis_benchmark_command(host, port, 1, 1, 200, &same).unwrap() > 0.0);
        }
    }
}
