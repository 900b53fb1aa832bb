"""The peer columns of a `kgen bench` JSON: python3 peer_table.py bench.json"""

import json
import sys

d = json.load(open(sys.argv[1]))
print("peer:", d.get("peer", {}).get("present"), d.get("peer", {}).get("why"), "copy", round(d["copy"]["gbps"]), "GB/s")
for e in d["results"]:
    p = e.get("peer", {})
    if "speed_cold" in p:
        print(f"{e['variant']:<22} N={e['tokens']:<8} kgen {p['kgen_cold_us']:8.2f} / {p['kgen_graph_us']:8.2f} us  "
              f"sglang {p['cold_us']:8.2f} / {p['graph_us']:8.2f} us  speed {p['speed_cold']:.2f} / "
              f"{p['speed_graph']:.2f}  bytes differing {p['bytes_differing']} of {p['bytes_compared']}")
    else:
        print(e.get("variant"), e.get("tokens"), "peer:", p, e.get("error", "")[:200])
