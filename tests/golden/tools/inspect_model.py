import sys
from gguf import GGUFReader, GGUFValueType
r = GGUFReader(sys.argv[1])
print(f"# file: {sys.argv[1]}")
print(f"# gguf reader: gguf-py (pip gguf) ; tensors: {len(r.tensors)} ; kv pairs: {len(r.fields)}")
print("\n## metadata")
def val(f):
    t = f.types[0] if f.types else None
    if t == GGUFValueType.ARRAY:
        n = len(f.data)
        et = f.types[1] if len(f.types) > 1 else None
        items = []
        for idx in f.data[:20]:
            p = f.parts[idx]
            if et == GGUFValueType.STRING:
                items.append(bytes(p).decode('utf-8', errors='replace'))
            else:
                items.append(p.tolist()[0] if len(p) == 1 else p.tolist())
        return f"ARRAY[{et.name if et else '?'}] len={n} first20={items!r}"
    if t == GGUFValueType.STRING:
        s = bytes(f.parts[-1]).decode('utf-8', errors='replace')
        if len(s) > 400: s = s[:400] + f"...<{len(s)} chars total>"
        return f"STRING {s!r}"
    v = f.parts[-1].tolist()
    return f"{t.name} {v[0] if len(v)==1 else v}"
for k, f in r.fields.items():
    print(f"{k} = {val(f)}")
print("\n## tensors (name, type, shape [ne0, ne1, ...], n_elements, n_bytes, offset)")
from collections import Counter
c = Counter()
for t in r.tensors:
    c[t.tensor_type.name] += 1
    print(f"{t.name}\t{t.tensor_type.name}\t{list(int(x) for x in t.shape)}\t{t.n_elements}\t{t.n_bytes}\t{t.data_offset}")
print("\n## tensor type counts:", dict(c))
