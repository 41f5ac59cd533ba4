#!/usr/bin/env python3
"""resp_check.py PORT write|verify SEED — the deterministic writer and checker of the redis test.

`write` stores N_KEYS strings (1 B to 64 KiB, sizes and bytes derived from SEED and the key),
N_LISTS lists and N_HASHES hashes under the prefix frugal:check:, pipelined over one socket;
`verify` reads every one back and compares. Speaks RESP directly (no client library), so the
test needs nothing beyond python3 and redis-server."""
import hashlib
import socket
import sys

N_KEYS, N_LISTS, N_HASHES, BATCH = 20000, 200, 200, 500


def value(seed: str, name: str) -> bytes:
    h = hashlib.sha256(f"{seed}/{name}".encode()).digest()
    # Mostly small values, some medium, a few up to 64 KiB: every allocator size band.
    band = h[0] % 16
    size = 1 + int.from_bytes(h[1:4], "little") % (64 if band < 10 else 4096 if band < 15 else 65536)
    return (h * (size // len(h) + 1))[:size]


def command(*args: bytes) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.buf = b""

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind == b"*":
            return [self.reply() for _ in range(int(rest))]
        raise RuntimeError(f"bad reply {line!r}")

    def pipeline(self, cmds: list[bytes]) -> list:
        self.sock.sendall(b"".join(cmds))
        return [self.reply() for _ in cmds]


def batches(items: list, n: int = BATCH):
    for i in range(0, len(items), n):
        yield items[i:i + n]


def main() -> int:
    port, mode, seed = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    c = Conn(port)
    keys = [f"frugal:check:k{i}" for i in range(N_KEYS)]
    lists = [f"frugal:check:l{i}" for i in range(N_LISTS)]
    hashes = [f"frugal:check:h{i}" for i in range(N_HASHES)]
    list_items = {k: [value(seed, f"{k}/{j}") for j in range(1 + i % 50)] for i, k in enumerate(lists)}
    hash_items = {k: {f"f{j}".encode(): value(seed, f"{k}/{j}") for j in range(1 + i % 40)}
                  for i, k in enumerate(hashes)}
    if mode == "write":
        for b in batches(keys):
            c.pipeline([command(b"SET", k.encode(), value(seed, k)) for k in b])
        for k, items in list_items.items():
            c.pipeline([command(b"DEL", k.encode()), command(b"RPUSH", k.encode(), *items)])
        for k, fields in hash_items.items():
            flat = [x for kv in fields.items() for x in kv]
            c.pipeline([command(b"DEL", k.encode()), command(b"HSET", k.encode(), *flat)])
        print(f"resp_check: wrote {len(keys)} strings, {len(lists)} lists, {len(hashes)} hashes (seed {seed})")
        return 0
    bad = 0
    for b in batches(keys):
        for k, got in zip(b, c.pipeline([command(b"GET", k.encode()) for k in b])):
            if got != value(seed, k):
                bad += 1
                if bad <= 5:
                    print(f"resp_check: {k}: got {None if got is None else len(got)} bytes, wrong")
    for k, items in list_items.items():
        if c.pipeline([command(b"LRANGE", k.encode(), b"0", b"-1")])[0] != items:
            bad += 1
            print(f"resp_check: list {k} differs")
    for k, fields in hash_items.items():
        got = c.pipeline([command(b"HGETALL", k.encode())])[0]
        if dict(zip(got[::2], got[1::2])) != fields:
            bad += 1
            print(f"resp_check: hash {k} differs")
    total = len(keys) + len(lists) + len(hashes)
    print(f"resp_check: verified {total} keys (seed {seed}): {bad} wrong or missing")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
