"""A fault-injecting HTTP proxy of the tests' own, in front of the S3 server: every
request is forwarded as it came (its Host header too, so SigV4 signatures still hold),
after --latency-ms, except that every --every-503'th request is answered
"503 SlowDown" without reaching the server and every --every-reset'th response is
cut after half its body with a TCP reset (at offsets of their own: request 6, 26, 46,
... and 50, 150, ... with 20 and 100). The schedule is fixed (request n gets the
same fault in every run), so a test can count the faults it met. One line per request
in --log: "<n> <method> <path> <fault or status> <range or ->".

    /usr/bin/python3 tests/s3/fault_proxy.py --upstream http://127.0.0.1:PORT [--latency-ms 50]
        [--every-503 20] [--every-reset 100] --log FILE
prints one JSON line {"endpoint"} once listening.
"""
import argparse
import asyncio
import json
import socket
import struct
import sys
from urllib.parse import urlparse

SLOWDOWN = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>"
            b"<Message>Please reduce your request rate.</Message></Error>")


async def read_head(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return head, lines[0], headers


class Proxy:
    def __init__(self, a):
        self.a = a
        u = urlparse(a.upstream)
        self.host, self.port = u.hostname, u.port
        self.n = 0
        self.log = open(a.log, "a", buffering=1)

    async def handle(self, reader, writer):
        try:
            while True:
                try:
                    head, request_line, headers = await read_head(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                body = b""
                if int(headers.get("content-length", "0")) > 0:
                    body = await reader.readexactly(int(headers["content-length"]))
                self.n += 1
                n = self.n
                method, path = request_line.split(" ")[:2]
                if self.a.latency_ms:
                    await asyncio.sleep(self.a.latency_ms / 1000)
                if self.a.every_503 and n % self.a.every_503 == self.a.every_503 // 3:
                    self.log.write("%d %s %s 503 %s\n" % (n, method, path, headers.get("range", "-").replace(" ", "")))
                    writer.write(b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: %d\r\n"
                                 b"\r\n" % len(SLOWDOWN) + SLOWDOWN)
                    await writer.drain()
                    continue
                # Forwarded on a connection of its own, the client's keep-alive kept.
                up_r, up_w = await asyncio.open_connection(self.host, self.port)
                lines = head.decode("latin-1").split("\r\n")
                lines = [l for l in lines if not l.lower().startswith("connection:")]
                out = "\r\n".join(lines[:-2]) + "\r\nConnection: close\r\n\r\n"
                up_w.write(out.encode("latin-1") + body)
                await up_w.drain()
                status_head, status_line, rheaders = await read_head(up_r)
                if method == "HEAD" or status_line.split(" ")[1] in ("204", "304"):
                    rbody = b""  # no body, whatever Content-Length says
                elif "content-length" in rheaders:
                    rbody = await up_r.readexactly(int(rheaders["content-length"]))
                else:
                    rbody = await up_r.read()
                up_w.close()
                reset = (self.a.every_reset and n % self.a.every_reset == self.a.every_reset // 2 and len(rbody) > 1
                         and method == "GET")
                self.log.write("%d %s %s %s %s\n" % (n, method, path, "reset" if reset else status_line.split(" ")[1],
                                                    headers.get("range", "-").replace(" ", "")))
                rlines = status_head.decode("latin-1").split("\r\n")
                rlines = [l for l in rlines if not l.lower().startswith("connection:")
                          and not l.lower().startswith("transfer-encoding:")]
                if "content-length" not in rheaders and method != "HEAD":
                    rlines.insert(1, "Content-Length: %d" % len(rbody))
                rout = "\r\n".join(rlines[:-2]) + "\r\n\r\n"
                if reset:
                    writer.write(rout.encode("latin-1") + rbody[:len(rbody) // 2])
                    await writer.drain()
                    # Time for the client to read the half that was sent (a reset drops
                    # what its kernel holds unread), then the reset.
                    await asyncio.sleep(0.1)
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()  # a reset mid-body
                    return
                writer.write(rout.encode("latin-1") + rbody)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--latency-ms", type=float, default=0)
    ap.add_argument("--every-503", type=int, default=0)
    ap.add_argument("--every-reset", type=int, default=0)
    ap.add_argument("--log", required=True)
    a = ap.parse_args()
    proxy = Proxy(a)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    print(json.dumps({"endpoint": "http://127.0.0.1:%d" % port}), flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
