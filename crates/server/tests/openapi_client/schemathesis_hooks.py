"""schemathesis hooks of tests/serve_openapi.rs (issue 22).

The document it fuzzes is narrowed to the configuration (`floodgate openapi --config`): each
rule's `cost` is at most its capacity. What JSON Schema cannot state is a sum: the costs of one
rule and key across `descriptors` are decided together, so together they must fit that rule's
capacity too (else a 400 naming the descriptor, rightly). Bodies that break only that are not
sent as valid ones; the capacities are read from the narrowed document itself.
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
def filter_body(context, body):
    if not isinstance(body, dict) or not isinstance(body.get("descriptors"), list):
        return True
    totals = {}
    for item in body["descriptors"]:
        if not isinstance(item, dict):
            return True
        cost = item.get("cost", 1)
        if not isinstance(cost, int) or isinstance(cost, bool):
            return True
        key = (item.get("rule"), item.get("key"))
        totals[key] = totals.get(key, 0) + cost
    return all(
        total <= _CAPACITY.get(rule, total) for (rule, _), total in totals.items()
    )
