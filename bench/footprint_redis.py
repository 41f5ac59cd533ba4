"""footprint_redis.py — docs/lab.md experiment 5's redis workload: starts redis-server on a free
loopback port, stores --keys strings of mixed sizes, deletes every other one, reads the server's
RSS and its own count of bytes in use (INFO's used_memory) after each step, and always stops
the server. The lab samples the server's RSS from outside meanwhile (it watches the process
named redis-server). Speaks RESP over one socket, pipelined, with nothing beyond the standard
library. Prints one JSON record.

Debian's redis-server links libjemalloc, which would serve malloc before libc does: with nothing
preloaded (the lab's "glibc"), libc is preloaded into the server so that glibc's malloc serves
it, and the server's own jemalloc must then have allocated next to nothing (checked)."""
import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time

BATCH = 1000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def libc_path() -> str:
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if os.path.basename(path) == "libc.so.6":
                return path
    raise RuntimeError("libc.so.6 is not mapped")


def rss_of(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


class Redis:
    """One pipelined connection; replies are read back as the exact bytes expected."""

    def __init__(self, port: int, server: subprocess.Popen) -> None:
        deadline = time.monotonic() + 10
        while True:
            try:
                self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start (exit code {server.poll()})")
                time.sleep(0.02)
        self.buf = b""

    def read(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("redis-server closed the connection")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def pipeline(self, commands: list[bytes], reply: bytes) -> None:
        """Send the commands; every one must answer `reply`."""
        for i in range(0, len(commands), BATCH):
            batch = commands[i:i + BATCH]
            self.sock.sendall(b"".join(batch))
            got = self.read(len(reply) * len(batch))
            if got != reply * len(batch):
                raise RuntimeError(f"unexpected reply: {got[:80]!r}")

    def info(self, section: bytes) -> dict[str, str]:
        self.sock.sendall(command(b"INFO", section))
        head = b""
        while not head.endswith(b"\r\n"):
            head += self.read(1)
        body = self.read(int(head[1:-2]) + 2).decode()
        return dict(line.split(":", 1) for line in body.splitlines() if ":" in line)

    def used(self) -> int:
        return int(self.info(b"memory")["used_memory"])


def value_size(rng: random.Random) -> int:
    """Mostly small values, some medium, a few of several KiB: 390 B on average."""
    band = rng.random()
    return rng.randint(8, 64) if band < 0.7 else rng.randint(65, 1024) if band < 0.95 else rng.randint(1025, 8192)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=200_000)
    args = ap.parse_args()
    server_bin = shutil.which("redis-server")
    if not server_bin:
        print("redis-server not installed (apt-get install redis-server)", file=sys.stderr)
        return 2
    env = dict(os.environ)
    glibc = not env.get("LD_PRELOAD")
    if glibc:
        env["LD_PRELOAD"] = libc_path()
    work = tempfile.mkdtemp(prefix="frugal-redis-")
    port = free_port()
    server = subprocess.Popen([server_bin, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                               "--appendonly", "no", "--dir", work, "--logfile", os.path.join(work, "redis.log"),
                               "--daemonize", "no"], env=env, stdout=subprocess.DEVNULL)
    try:
        r = Redis(port, server)
        rng = random.Random(20261122)
        pool = rng.randbytes(1 << 14)
        sets = []
        for i in range(args.keys):
            size = value_size(rng)
            start = rng.randrange(len(pool) - size)
            sets.append(command(b"SET", b"key:%d" % i, pool[start:start + size]))
        r.pipeline(sets, b"+OK\r\n")
        del sets
        used_full, rss_full = r.used(), rss_of(server.pid)
        r.pipeline([command(b"DEL", b"key:%d" % i) for i in range(0, args.keys, 2)], b":1\r\n")
        mem = r.info(b"memory")
        used_half, rss_half = int(mem["used_memory"]), rss_of(server.pid)
        # With libc preloaded, redis still asks its jemalloc for statistics: the bytes that
        # jemalloc allocated must be a small part of redis's own count, else jemalloc served.
        jemalloc = int(mem.get("allocator_allocated", 0))
        if glibc and jemalloc > used_half // 10:
            raise RuntimeError(f"the server's own jemalloc served ({jemalloc} bytes), not glibc")
        r.sock.sendall(command(b"SHUTDOWN", b"NOSAVE"))
        server.wait(timeout=10)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"final": True, "keys": args.keys, "deleted": (args.keys + 1) // 2, "glibc_preloaded": glibc,
                      "used_after_fill": used_full, "rss_after_fill": rss_full,
                      "used_after_delete": used_half, "rss_after_delete": rss_half}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
