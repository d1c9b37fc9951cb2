"""Node-to-node TCP latency and throughput for `appliance diagnose`, sent to the nodes on ssh's
standard input (Python 3.8+, standard library only: the nodes need no iperf3).
  python3 - serve PORT CONNECTIONS   accept that many tests (ping-pong, stream in or out), then exit
  python3 - test HOST PORT SECONDS   one ping-pong (median RTT), one stream (Mb/s); key=value lines
  python3 - pairs PORT SECONDS HOST...  each HOST in turn, a ping-pong, a stream to it and one
                                     from it (three connections): `pair_rtt_ms=HOST MS`,
                                     `pair_mbps=HOST MBPS` (out) and `pair_rx_mbps=HOST MBPS` lines
A single TCP stream: it measures the path's goodput, which is what a bottlenecked link shows."""

import socket
import statistics
import sys
import time

CHUNK = b"\0" * (256 * 1024)


def serve(port: int, connections: int) -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(16)
    srv.settimeout(120)
    print("listening=1", flush=True)
    for _ in range(connections):
        conn, _ = srv.accept()
        with conn:
            mode = conn.recv(1)
            if mode == b"r":  # stream to the client until it hangs up
                try:
                    while True:
                        conn.sendall(CHUNK)
                except OSError:
                    continue
            while True:
                data = conn.recv(1 << 20)
                if not data:
                    break
                if mode == b"p":
                    conn.sendall(data)
            if mode == b"s":
                conn.sendall(b"k")


def ping_pong(host: str, port: int) -> float:
    """The median of 50 one-byte round trips on one connection, in ms."""
    with socket.create_connection((host, port), timeout=30) as c:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.sendall(b"p")
        rtts = []
        for _ in range(50):
            t0 = time.perf_counter()
            c.sendall(b"x")
            c.recv(1)
            rtts.append(time.perf_counter() - t0)
    return statistics.median(rtts) * 1000


def stream(host: str, port: int, seconds: float) -> float:
    """One stream of SECONDS, in Mb/s, counted once the server has read every byte."""
    with socket.create_connection((host, port), timeout=30) as c:
        c.sendall(b"s")
        sent, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            c.sendall(CHUNK)
            sent += len(CHUNK)
        c.shutdown(socket.SHUT_WR)
        c.recv(1)  # the server has read every byte
        elapsed = time.perf_counter() - t0
    return sent * 8 / elapsed / 1e6


def receive(host: str, port: int, seconds: float) -> float:
    """What the server streams back for SECONDS, in Mb/s."""
    with socket.create_connection((host, port), timeout=30) as c:
        c.sendall(b"r")
        got, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            data = c.recv(1 << 20)
            if not data:
                break
            got += len(data)
        elapsed = time.perf_counter() - t0
    return got * 8 / elapsed / 1e6


def test(host: str, port: int, seconds: float) -> None:
    print(f"net_rtt_ms={ping_pong(host, port):.3f}")
    print(f"net_mbps={stream(host, port, seconds):.1f}")


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]), int(sys.argv[3]))
    elif sys.argv[1] == "pairs":
        for peer in sys.argv[4:]:
            print(f"pair_rtt_ms={peer} {ping_pong(peer, int(sys.argv[2])):.3f}", flush=True)
            print(f"pair_mbps={peer} {stream(peer, int(sys.argv[2]), float(sys.argv[3])):.1f}", flush=True)
            print(
                f"pair_rx_mbps={peer} {receive(peer, int(sys.argv[2]), float(sys.argv[3])):.1f}", flush=True
            )
    else:
        test(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
