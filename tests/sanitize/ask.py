"""Asks a control channel for its ledger and a collect, over and over while the process runs;
prints how many answers came (run.sh's TSan run). Stops when the process is gone, its socket
has been missing for a second, or after 10 minutes. Usage: ask.py SOCKET PID"""
import json
import os
import socket
import sys
import time

path, pid = sys.argv[1], int(sys.argv[2])
answers = 0
start = last_seen = time.monotonic()
while time.monotonic() - start < 600:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        break
    if os.path.exists(path):
        last_seen = time.monotonic()
    elif time.monotonic() - last_seen > 1 and answers > 0:
        break
    for request in (b"ledger\n", b"collect\n"):
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(path)
                s.sendall(request)
                data = b"".join(iter(lambda: s.recv(65536), b""))
            json.loads(data)
            answers += 1
        except (OSError, ValueError):
            pass
    time.sleep(0.02)
print(answers)
