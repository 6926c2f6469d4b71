"""One load run of Python `limits` on Redis for scripts/peers: the same closed loop and output
as redis-peer.rs.

    python limits_peer.py STRATEGY URL CLIENTS SECONDS KEYS

CLIENTS 0 probes: one decision on each of KEYS distinct keys (MEMORY USAGE per key).
STRATEGY: moving_window, fixed_window or sliding_window_counter. One client uses the
synchronous API (redis-py, as Flask-Limiter does); more use the asyncio API
(`async+redis://`, redis-py's asyncio client) with CLIENTS tasks on one storage.
Prints {"decisions", "seconds", "p50_us", "p99_us", "denied", "total"}.
"""

import asyncio
import json
import sys
import time

from limits import parse, storage, strategies
from limits.aio import strategies as aio_strategies

STRATEGIES = {
    "moving_window": (strategies.MovingWindowRateLimiter, aio_strategies.MovingWindowRateLimiter),
    "fixed_window": (strategies.FixedWindowRateLimiter, aio_strategies.FixedWindowRateLimiter),
    "sliding_window_counter": (
        strategies.SlidingWindowCounterRateLimiter,
        aio_strategies.SlidingWindowCounterRateLimiter,
    ),
}
QUOTA = parse("1000000/minute")
# The probe's: the same for every driver, a state that outlives the probe.
PROBE_QUOTA = parse("1/minute")


def key_of(n, keys):
    return "user:%06d" % ((n * 2654435761) % keys)


def report(latencies, elapsed, denied, total):
    latencies.sort()

    def pct(p):
        return latencies[round((len(latencies) - 1) * p)] if latencies else 0

    print(json.dumps({
        "decisions": len(latencies), "seconds": elapsed, "p50_us": pct(0.5),
        "p99_us": pct(0.99), "denied": denied, "total": total,
    }))


def sequential(strategy, url, seconds, keys):
    limiter = STRATEGIES[strategy][0](storage.storage_from_string(url))
    n = 0
    warm_end = time.perf_counter() + 0.2
    while time.perf_counter() < warm_end:
        limiter.hit(QUOTA, strategy, key_of(n, keys))
        n += 1
    latencies, denied = [], 0
    start = time.perf_counter()
    end = start + seconds
    while True:
        t = time.perf_counter()
        if t >= end:
            break
        ok = limiter.hit(QUOTA, strategy, key_of(n, keys))
        n += 1
        latencies.append(int((time.perf_counter() - t) * 1e6))
        denied += not ok
    report(latencies, time.perf_counter() - start, denied, n)


async def concurrent(strategy, url, clients, seconds, keys):
    store = storage.storage_from_string("async+" + url, implementation="redispy")
    limiter = STRATEGIES[strategy][1](store)
    state = {"next": 0, "measuring": False, "stop": False, "denied": 0}
    latencies = []

    async def client():
        while not state["stop"]:
            n = state["next"]
            state["next"] += 1
            t = time.perf_counter()
            ok = await limiter.hit(QUOTA, strategy, key_of(n, keys))
            if state["measuring"]:
                latencies.append(int((time.perf_counter() - t) * 1e6))
                state["denied"] += not ok

    tasks = [asyncio.create_task(client()) for _ in range(clients)]
    await asyncio.sleep(0.2)
    state["measuring"] = True
    start = time.perf_counter()
    await asyncio.sleep(seconds)
    state["measuring"] = False
    elapsed = time.perf_counter() - start
    state["stop"] = True
    await asyncio.gather(*tasks)
    report(latencies, elapsed, state["denied"], state["next"])


def main():
    strategy, url, clients, seconds, keys = sys.argv[1:6]
    clients, seconds, keys = int(clients), float(seconds), int(keys)
    if clients == 0:
        # Probe: one decision on each of KEYS distinct keys (MEMORY USAGE per key).
        limiter = STRATEGIES[strategy][0](storage.storage_from_string(url))
        for n in range(keys):
            limiter.hit(PROBE_QUOTA, strategy, "user:%06d" % n)
        print(json.dumps({"total": keys}))
    elif clients == 1:
        sequential(strategy, url, seconds, keys)
    else:
        asyncio.run(concurrent(strategy, url, clients, seconds, keys))


if __name__ == "__main__":
    main()
