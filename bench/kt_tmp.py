import json,sys,collections
d=collections.defaultdict(list)
for f in sys.argv[1:]:
    j=json.load(open(f))
    ev=j["traceEvents"] if isinstance(j,dict) else j
    for e in ev:
        if e.get("name","").startswith("launch ") and "kernel_ns" in e.get("args",{}):
            d[(e["name"][7:], str(e["args"].get("grid")))].append(e["args"]["kernel_ns"])
for k,v in d.items():
    v.sort(); print(f"{k[0]:20s} grid={k[1]} n={len(v)} median_us={v[len(v)//2]/1e3:.1f}")
