"""Raw-socket helpers for t/serve.bats' Python clients (127.0.0.1 only): the server's /metrics gauges, its
resident memory, and one whole answer read off a keep-alive connection."""
import socket


def read_all(s):
    """every byte s gives until the peer closes it"""
    d = b""
    while True:
        b = s.recv(65536)
        if not b:
            return d
        d += b


def metric(port, k):
    """the value of the gauge ogakit_K on 127.0.0.1:port, as text"""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
    d = read_all(s)
    s.close()
    return [l.split()[1] for l in d.decode().splitlines() if l.startswith("ogakit_" + k + " ")][0]


def rss_kb(pid):
    return int(open("/proc/%s/status" % pid).read().split("VmRSS:")[1].split()[0])


def answer(s):
    """(status text, body bytes) of the next answer on s: its head and Content-Length bytes (or what came
    before the peer closed); ("none", b"") when nothing came"""
    d = b""
    while b"\r\n\r\n" not in d or len(d.split(b"\r\n\r\n", 1)[1]) < (
            int(d.split(b"Content-Length: ")[1].split(b"\r\n")[0]) if b"Content-Length: " in d else 0):
        b = s.recv(65536)
        if not b:
            break
        d += b
    head, _, payload = d.partition(b"\r\n\r\n")
    return (head.split(b" ")[1].decode() if head else "none"), payload
