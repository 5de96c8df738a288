"""A toy inventory service used by examples/bindings.toml."""
import json
import sys

DATA = {
    "berlin": [{"sku": "A-1", "count": 12}, {"sku": "B-7", "count": 3}],
    "lyon": [{"sku": "A-1", "count": 4}, {"sku": "C-2", "count": 40}],
    "porto": [{"sku": "B-7", "count": 0}, {"sku": "C-2", "count": 9}],
}

args = json.load(sys.stdin)
if sys.argv[1] == "list":
    json.dump(sorted(DATA), sys.stdout)
elif sys.argv[1] == "stock":
    w = args.get("warehouse")
    if w not in DATA:
        print(f"unknown warehouse {w!r}", file=sys.stderr)
        sys.exit(1)
    json.dump(DATA[w], sys.stdout)
