"""A check, a reservation and its settle, and a 429, with the client that openapi-python-client
generates from docs/openapi.json (issue 22; docs/any-language.md shows it).

Usage: python tour.py BASE_URL [API_TOKEN]   (the generated package `floodgate_client` on the path)
"""

import sys

from floodgate_client import AuthenticatedClient, Client
from floodgate_client.api.decisions import check, settle
from floodgate_client.models import CheckAnswer, CheckOne, SettleOne

base_url = sys.argv[1]
token = sys.argv[2] if len(sys.argv) > 2 else None
client = AuthenticatedClient(base_url=base_url, token=token) if token else Client(base_url=base_url)

# A check: one unit of "per-second" for alice.
r = check.sync_detailed(client=client, body=CheckOne(rule="per-second", key="alice"))
print("check:", r.status_code, "allowed", r.parsed.allowed, "remaining", r.parsed.remaining)

# A reservation of 5 units, settled with the 2 actually used: 3 are given back.
r = check.sync_detailed(
    client=client,
    body=CheckOne(rule="per-second", key="job-7", cost=5, reserve=True, max_wait_ms=0),
)
print("reserve:", r.status_code, "remaining", r.parsed.remaining,
      "expires in", r.parsed.reservation_expires_in_us, "us")
s = settle.sync_detailed(client=client, body=SettleOne(reservation=r.parsed.reservation, cost=2))
d = s.parsed.decisions[0]
print("settle:", s.status_code, "reserved", d.reserved, "actual", d.actual, "remaining", d.remaining)

# A 429: "per-minute" admits 2 a minute; the third is denied, with when to retry.
for _ in range(3):
    r = check.sync_detailed(client=client, body=CheckOne(rule="per-minute", key="bob"))
assert r.status_code == 429 and isinstance(r.parsed, CheckAnswer), r
print("denied:", r.status_code, "allowed", r.parsed.allowed,
      "retry_after_us", r.parsed.retry_after_us, "Retry-After", r.headers["retry-after"])
