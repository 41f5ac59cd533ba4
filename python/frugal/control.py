"""The client of frugal's control channel (src/control.c): a program running on frugal with the
ledger or a profile on (or FRUGAL_CONTROL=1) answers on a UNIX socket `<dir>/<pid>.sock`, <dir>
being `$XDG_RUNTIME_DIR/frugal` when the program's environment had XDG_RUNTIME_DIR (an absolute
path) at start, else `/tmp/frugal-<euid>`. One request a connection: the client sends one line
(`ledger`, `profile`, `options`, `collect`) and reads one JSON document until EOF.

`request(pid, "ledger")` finds the socket, asks, and returns the parsed answer; what goes wrong
is a ControlError whose message says what to do about it. Also here: what /proc says about the
process (its command line, executable, working directory, start time), for the reports."""

from __future__ import annotations

import errno
import json
import os
import shlex
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

REQUESTS = ("ledger", "profile", "options", "collect")
DEFAULT_TIMEOUT = 10.0
HOW_TO_ENABLE = ("start it with LD_PRELOAD=/path/to/libfrugal.so and FRUGAL_CONTROL=1 (with the ledger, "
                 "FRUGAL_STATS_FILE=PATH, or a profile, FRUGAL_PROFILE=DIR, beside it for classes and call sites)")


class ControlError(Exception):
    """A request that could not be answered; str() says why and what to do."""


class NoSuchProcess(ControlError):
    pass


class ProcessExited(NoSuchProcess):
    """The process was there and is gone (it exited while we asked)."""


class NoChannel(ControlError):
    pass


class Refused(ControlError):
    pass


class Timeout(ControlError):
    pass


class RequestError(ControlError):
    """The program answered {"error": ...}: e.g. a profile asked of a program without one."""


# ---- the process, from /proc -------------------------------------------------------------------


def alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").is_dir() and not zombie(pid)


def zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].startswith(("Z", "X"))


def environ_of(pid: int) -> dict[str, str] | None:
    """The process's environment as it started (/proc/PID/environ); None when unreadable. A
    program that sets its process title (redis, nginx) may have written over part of it."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    env = {}
    for item in raw.split(b"\0"):
        k, eq, v = item.partition(b"=")
        if eq:
            env[k.decode(errors="replace")] = v.decode(errors="replace")
    return env


def euid_of(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[2])
    except (OSError, ValueError, IndexError):
        pass
    return None


def loads_frugal(pid: int) -> bool | None:
    """Whether libfrugal is mapped in the process; None when /proc/PID/maps is unreadable."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return None
    return "libfrugal" in maps


def socket_dirs(pid: int) -> list[Path]:
    """Where the process's socket may be, most likely first: the rule of src/control.c
    applied to the process's environment, to ours, and the per-uid directory of its effective
    uid and of ours."""
    dirs: list[Path] = []
    for env in (environ_of(pid), os.environ):
        xdg = (env or {}).get("XDG_RUNTIME_DIR", "")
        if xdg.startswith("/"):
            dirs.append(Path(xdg) / "frugal")
    for uid in (euid_of(pid), os.geteuid()):
        if uid is not None:
            dirs.append(Path(f"/tmp/frugal-{uid}"))
    return list(dict.fromkeys(dirs))


def find_socket(pid: int) -> Path:
    """The control socket of pid, or a ControlError saying why there is none."""
    if not alive(pid):
        raise NoSuchProcess(f"no process with pid {pid}")
    for d in socket_dirs(pid):
        p = d / f"{pid}.sock"
        if p.exists():
            return p
    raise NoChannel(no_channel_message(pid))


def no_channel_message(pid: int) -> str:
    name = process_info(pid).name or "?"
    where = ", ".join(str(d / f"{pid}.sock") for d in socket_dirs(pid))
    env = environ_of(pid) or {}
    mapped = loads_frugal(pid)
    if mapped is False:
        why = "it does not run on frugal (libfrugal.so is not loaded)"
    elif env.get("FRUGAL_CONTROL") == "0":
        why = "it runs on frugal with FRUGAL_CONTROL=0, which turns the channel off"
    elif mapped:
        why = "it runs on frugal without the control channel (FRUGAL_CONTROL=1 was not set)"
    else:
        why = "it does not run on frugal, or runs without the control channel"
    return f"process {pid} ({name}) has no frugal control channel (no {where}): {why}; {HOW_TO_ENABLE}"


# ---- one request ---------------------------------------------------------------------------------


def request(pid: int | None, what: str, sock: Path | str | None = None, timeout: float = DEFAULT_TIMEOUT,
            retries: int = 1) -> dict:
    """Ask the process `what` (ledger, profile, options, collect) and return the JSON answer.
    pid may be None when sock (an explicit socket path) is given. An answer that is not whole
    JSON (the program exec'd or was rebuilt mid-answer) is asked again `retries` times."""
    if sock is None:
        if pid is None:
            raise ControlError("give a pid or a socket path")
        path = find_socket(pid)
    else:
        path = Path(sock)
        if not path.exists():
            if pid is not None and not alive(pid):
                raise NoSuchProcess(f"no process with pid {pid}")
            raise NoChannel(f"no socket at {path}")
    for attempt in range(retries + 1):
        raw = exchange(path, what, timeout, pid)
        try:
            doc = json.loads(raw)
        except ValueError as e:
            if pid is not None and not alive(pid):
                raise ProcessExited(f"process {pid} exited while answering {what!r}") from None
            if attempt < retries:
                time.sleep(0.05)
                continue
            shown = raw[:200].decode(errors="replace")
            raise ControlError(f"{path}: the answer to {what!r} is not JSON ({e}; {len(raw)} bytes: {shown!r})") from None
        if isinstance(doc, dict) and "error" in doc:
            message = str(doc["error"])
            if message.startswith("refused"):
                raise Refused(f"{path}: {message}: only the user the program runs as may ask it")
            raise RequestError(message)
        return doc
    raise AssertionError("unreachable")


def exchange(path: Path, what: str, timeout: float, pid: int | None) -> bytes:
    """Connect, send one line, read until EOF."""
    deadline = time.monotonic() + timeout
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        try:
            s.connect(str(path))
        except PermissionError:
            raise Refused(f"{path}: permission denied: the program runs as another user; ask as that user "
                          "(the channel answers only its own user)") from None
        except ConnectionRefusedError:
            if pid is not None and not alive(pid):
                raise ProcessExited(f"process {pid} exited") from None
            raise NoChannel(f"{path} is there but nobody listens on it: a socket left by a process that is gone, "
                            "or the program's channel thread has ended") from None
        except FileNotFoundError:
            if pid is not None and not alive(pid):
                raise ProcessExited(f"process {pid} exited") from None
            raise NoChannel(f"{path} went away") from None
        s.sendall(what.encode() + b"\n")
        chunks = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout()
            s.settimeout(left)
            data = s.recv(1 << 16)
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks)
    except socket.timeout:
        raise Timeout(f"{path}: no whole answer to {what!r} within {timeout:g} s (the program may be stopped, or "
                      "the channel busy with another client)") from None
    except (ConnectionResetError, BrokenPipeError) as e:
        if pid is not None and not alive(pid):
            raise ProcessExited(f"process {pid} exited while answering {what!r}") from None
        raise ControlError(f"{path}: connection lost ({e.strerror or e})") from None
    except OSError as e:
        if e.errno in (errno.ENOTSOCK, errno.ECONNREFUSED):
            raise NoChannel(f"{path}: not a listening socket ({e.strerror})") from None
        raise
    finally:
        s.close()


def fetch_profile(pid: int | None, sock: Path | str | None = None, timeout: float = DEFAULT_TIMEOUT) -> dict | None:
    """The profile now, or None when the program runs without one."""
    try:
        return request(pid, "profile", sock, timeout)
    except RequestError as e:
        if "no profile" in str(e):
            return None
        raise


# ---- the process as /proc shows it -----------------------------------------------------------------


@dataclass
class ProcessInfo:
    pid: int
    name: str | None = None  # comm
    argv: list[str] = field(default_factory=list)
    exe: Path | None = None  # /proc/PID/exe's target (may end in " (deleted)")
    cwd: Path | None = None
    started: float | None = None  # epoch seconds
    uptime_s: float | None = None
    rss: int | None = None
    hwm: int | None = None  # peak RSS (VmHWM)
    minflt: int | None = None
    majflt: int | None = None
    utime_s: float | None = None
    stime_s: float | None = None
    threads: int | None = None

    def as_json(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()}

    def command(self) -> str:
        """The command line as /proc shows it now. A program that set its process title in
        argv's memory (redis: "redis-server *:6379" and empty arguments) shows the title."""
        argv = [a for a in self.argv if a]
        if not argv:
            return self.name or "?"
        if "" in self.argv[:-1] or (len(argv) == 1 and " " in argv[0]):
            return " ".join(argv)  # a title, and the empty arguments it left behind: shown as it reads
        return shlex.join(argv)

    def program(self) -> Path | None:
        """The executable to name the main program's frames with: its path, if still there."""
        if self.exe is not None and self.exe.is_file():
            return self.exe
        return None


def process_info(pid: int) -> ProcessInfo:
    info = ProcessInfo(pid)
    proc = Path(f"/proc/{pid}")
    try:
        info.name = (proc / "comm").read_text().strip()
    except OSError:
        pass
    try:
        info.argv = [a.decode(errors="replace") for a in (proc / "cmdline").read_bytes().split(b"\0")[:-1]]
    except OSError:
        pass
    for attr, link in (("exe", "exe"), ("cwd", "cwd")):
        try:
            setattr(info, attr, Path(os.readlink(proc / link)))
        except OSError:
            pass
    try:
        stat = (proc / "stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()
        tick = os.sysconf("SC_CLK_TCK")
        info.minflt, info.majflt = int(fields[7]), int(fields[9])
        info.utime_s, info.stime_s = int(fields[11]) / tick, int(fields[12]) / tick
        info.threads = int(fields[17])
        start_s = int(fields[19]) / tick
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        info.uptime_s = max(uptime - start_s, 0.0)
        info.started = time.time() - info.uptime_s
    except (OSError, ValueError, IndexError):
        pass
    try:
        for line in (proc / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                info.rss = int(line.split()[1]) * 1024
            elif line.startswith("VmHWM:"):
                info.hwm = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return info
