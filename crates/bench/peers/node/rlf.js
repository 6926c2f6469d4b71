// One load run of rate-limiter-flexible's RateLimiterRedis (fixed window: its Lua INCRBY with
// TTL) over ioredis, for scripts/peers; the same closed loop and output as redis-peer.rs.
//   node rlf.js URL CLIENTS SECONDS KEYS     (CLIENTS 0: one decision on each of KEYS keys)
// Prints {"decisions", "seconds", "p50_us", "p99_us", "denied", "total"}.
'use strict';
const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');

async function main() {
  const [url, clientsArg, secondsArg, keysArg] = process.argv.slice(2);
  const clients = Number(clientsArg);
  const seconds = Number(secondsArg);
  const keys = BigInt(keysArg);
  const redis = new Redis(url, { enableAutoPipelining: false });
  const limiter = new RateLimiterRedis({
    storeClient: redis,
    keyPrefix: 'rlf',
    points: clients === 0 ? 1 : 1000000, // the probe: as the other drivers' probes
    duration: 60,
  });
  if (clients === 0) {
    // Probe: one decision on each of KEYS distinct keys (MEMORY USAGE per key).
    for (let n = 0n; n < keys; n++) await limiter.consume('user:' + String(n).padStart(6, '0'), 1);
    console.log(JSON.stringify({ total: Number(keys) }));
    redis.disconnect();
    return;
  }
  let next = 0n;
  let measuring = false;
  let stop = false;
  const latencies = [];
  let denied = 0;
  async function client() {
    while (!stop) {
      const n = next++;
      const key = 'user:' + String((n * 2654435761n) % keys).padStart(6, '0');
      const t = process.hrtime.bigint();
      let admitted = true;
      try {
        await limiter.consume(key, 1);
      } catch (e) {
        if (e instanceof Error) throw e;
        admitted = false; // a RateLimiterRes: denied
      }
      if (measuring) {
        latencies.push(Number((process.hrtime.bigint() - t) / 1000n));
        if (!admitted) denied++;
      }
    }
  }
  const tasks = [];
  for (let i = 0; i < clients; i++) tasks.push(client());
  await new Promise((r) => setTimeout(r, 200));
  measuring = true;
  const start = process.hrtime.bigint();
  await new Promise((r) => setTimeout(r, seconds * 1000));
  measuring = false;
  const elapsed = Number(process.hrtime.bigint() - start) / 1e9;
  stop = true;
  await Promise.all(tasks);
  latencies.sort((a, b) => a - b);
  const pct = (p) => latencies.length ? latencies[Math.round((latencies.length - 1) * p)] : 0;
  console.log(JSON.stringify({
    decisions: latencies.length, seconds: elapsed, p50_us: pct(0.5), p99_us: pct(0.99),
    denied, total: Number(next),
  }));
  redis.disconnect();
}

main().catch((e) => { console.error(e); process.exit(1); });
