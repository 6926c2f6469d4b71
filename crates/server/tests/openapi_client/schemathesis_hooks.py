"""schemathesis hooks of tests/serve_openapi.rs (issue 22).

The document it fuzzes is narrowed to the configuration (`floodgate openapi --config`): each
rule's `cost` is at most its capacity. What JSON Schema cannot state is a sum: the costs of one
rule and key across `descriptors` are decided together, so together they must fit that rule's
capacity too (else a 400 naming the descriptor, rightly). Bodies that break only that are not
sent as valid ones; the capacities are read from the narrowed document itself. Nor can it bound
a key in bytes (256; `maxLength` counts characters): a key of at most 256 characters but more
bytes is a 400 naming it, rightly, and is not sent as valid either. The hook is on
whole cases (`filter_case`), which every phase runs, the coverage phase too (it runs no body
hooks; its boundary case repeats one descriptor `maxItems` times). Negative cases are kept:
their 400 is the answer the check wants.
"""

import json
import os

import schemathesis

with open(os.environ["FLOODGATE_OPENAPI"], encoding="utf-8") as f:
    _DOC = json.load(f)
_CAPACITY = {
    clause["if"]["properties"]["rule"]["const"]: clause["then"]["properties"]["cost"]["maximum"]
    for clause in _DOC["components"]["schemas"]["Descriptor"].get("allOf", [])
}


@schemathesis.hook
def filter_case(context, case):
    meta = getattr(case, "meta", None)
    if meta is not None and not meta.generation.mode.is_positive:
        return True
    body = case.body
    if not isinstance(body, dict):
        return True
    items = body.get("descriptors")
    items = items if isinstance(items, list) else []
    if _too_long(body.get("key")) or any(
        isinstance(item, dict) and _too_long(item.get("key")) for item in items
    ):
        return False
    totals = {}
    for item in items:
        if not isinstance(item, dict):
            return True
        cost = item.get("cost", 1)
        # JSON Schema's `integer` is any whole number, `2.0` too (served as 2).
        if isinstance(cost, bool) or not isinstance(cost, (int, float)) or cost != int(cost):
            return True
        key = (item.get("rule"), item.get("key"))
        totals[key] = totals.get(key, 0) + int(cost)
    return all(
        total <= _CAPACITY.get(rule, total) for (rule, _), total in totals.items()
    )


def _too_long(key):
    """A key within `maxLength` (characters) but above the API's 256 bytes."""
    return isinstance(key, str) and len(key.encode("utf-8", "surrogatepass")) > 256
