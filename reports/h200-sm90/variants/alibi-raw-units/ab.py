"""A/B table of one bundled variant across runs base1 / head / base2 of the variants benchmark.
usage: ab.py IMPL DIR_BASE1 DIR_HEAD DIR_BASE2 [PARAM]"""
import json, sys
impl, runs = sys.argv[1], sys.argv[2:5]
param = int(sys.argv[5]) if len(sys.argv) > 5 else None
def load(d):
    out = {}
    for l in open(f"{d}/benchmark.jsonl"):
        r = json.loads(l)
        if r.get("status") != "ok": continue
        key = (r["dtype"], r["head_dim"], r["seq_len"], r["direction"])
        if r["impl"] == "bundled causal": out[key + ("plain",)] = r["median_ms"]
        elif r["impl"] == impl and (param is None or r.get("param") == param): out[key + ("x",)] = r["median_ms"]
    return out
b1, h, b2 = map(load, runs)
print(f"| dtype | D | S | dir | {impl} ms base1 / head / base2 | head vs mean base | plain ms base1 / head / base2 | {impl} / plain base1 / head / base2 |")
print("|---|---|---|---|---|---|---|---|")
for key in sorted(k[:4] for k in h if k[4] == "x"):
    x = [r[key + ("x",)] for r in (b1, h, b2)]; p = [r[key + ("plain",)] for r in (b1, h, b2)]
    change = x[1] / ((x[0] + x[2]) / 2) - 1
    print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {x[0]:.2f} / {x[1]:.2f} / {x[2]:.2f} | {change*100:+.1f} % | "
          f"{p[0]:.2f} / {p[1]:.2f} / {p[2]:.2f} | {x[0]/p[0]:.3f} / {x[1]/p[1]:.3f} / {x[2]/p[2]:.3f} |")
