"""footprint_py.py — docs/lab.md experiment 5's python3 workload: waves of dicts, lists and strings
built and dropped, as a script that loads records, indexes them, serialises them and moves on.
A twentieth of every wave survives into a long-lived cache, so freed memory is scattered among
live objects, the case that keeps an allocator's pages resident. Deterministic (seeded);
prints one JSON record."""
import argparse
import json
import random


def wave(rng: random.Random, n: int, cache: dict) -> int:
    words = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 12))) for _ in range(512)]
    records = {}
    for i in range(n):
        r = rng.getrandbits(32)  # one draw per record: the work is allocating, not drawing
        j = r % 480
        records[f"{words[j]}{i}"] = {"id": i, "tags": words[j:j + 1 + r % 6],
                                     "text": " ".join(words[j:j + 1 + (r >> 8) % 32]),
                                     "scores": [x * 0.5 for x in range((r >> 16) % 20)]}
    by_tag: dict[str, list[str]] = {}
    for name, rec in records.items():
        for t in rec["tags"]:
            by_tag.setdefault(t, []).append(name)
    text = json.dumps(records)
    back = json.loads(text)
    for name in list(back)[::20]:
        cache[name] = back[name]
    return len(text) + sum(len(v) for v in by_tag.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--waves", type=int, default=8)
    ap.add_argument("--records", type=int, default=40000, help="records per wave")
    args = ap.parse_args()
    rng = random.Random(20261122)
    cache: dict = {}
    total = sum(wave(rng, args.records, cache) for _ in range(args.waves))
    print(json.dumps({"final": True, "waves": args.waves, "records": args.records,
                      "cached": len(cache), "checksum": total}))


if __name__ == "__main__":
    main()
