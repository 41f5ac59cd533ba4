"""alloc_heavy.py — an allocation-heavy, deterministic Python workload for the LD_PRELOAD
comparison: dicts, lists, sets, strings, bytes and a JSON round trip, with objects built and
dropped in waves so freed memory is reused. Prints counts and a SHA-256 digest of what it
built; the output must be the same on any correct allocator."""
import hashlib
import json
import random


def words(rng: random.Random, n: int) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choices(letters, k=rng.randint(1, 40))) for _ in range(n)]


def wave(rng: random.Random, digest: "hashlib._Hash", i: int) -> int:
    vocab = words(rng, 2000)
    table: dict[str, list[int]] = {}
    for j in range(30000):
        key = vocab[j % len(vocab)] + str(j % 977)
        table.setdefault(key, []).append(j * i)
    nested = {k: {"v": v, "s": k * 3, "t": tuple(v[:5])} for k, v in table.items()}
    text = json.dumps({k: {"v": d["v"], "s": d["s"]} for k, d in nested.items()}, sort_keys=True)
    back = json.loads(text)
    assert len(back) == len(nested)
    blob = b"".join(k.encode() * 7 for k in sorted(back))
    big = [bytearray(rng.randint(1, 300_000)) for _ in range(8)]
    joined = "|".join(sorted(set(vocab) ^ set(words(rng, 500))))
    digest.update(text.encode())
    digest.update(hashlib.sha256(blob).digest())
    digest.update(joined.encode())
    digest.update(str(sum(len(b) for b in big)).encode())
    return len(text) + len(blob) + len(joined)


def main() -> None:
    rng = random.Random(1234)
    digest = hashlib.sha256()
    total = 0
    keep: list[object] = []
    for i in range(12):
        total += wave(rng, digest, i)
        keep.append([str(x) * (x % 13) for x in range(5000)])
        if len(keep) > 4:
            keep.pop(0)
    print(f"bytes built: {total}")
    print(f"digest: {digest.hexdigest()}")


if __name__ == "__main__":
    main()
