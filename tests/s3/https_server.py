"""An HTTPS file server with Range support, for the tests' https:// shards (Python's
http.server answers no Range). Serves a folder on loopback with a self-signed
certificate made here with openssl; prints one JSON line {"url", "ca", "log"} once
listening, then serves until killed. Each request is one line of `log`.

    /usr/bin/python3 tests/s3/https_server.py --root DIR --workdir DIR
"""
import argparse
import http.server
import json
import os
import re
import ssl
import subprocess
import sys
import threading


class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        with self.server.log_lock, open(self.server.log_path, "a") as f:
            f.write("%s %s\n" % (self.command, self.path))

    def send_head(self):
        path = self.translate_path(self.path)
        if not os.path.isfile(path):
            self.send_error(404, "not found")
            return None
        size = os.path.getsize(path)
        start, end = 0, size - 1
        ranged = False
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if m:
            start = int(m.group(1))
            end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % size)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            ranged = True
        f = open(path, "rb")
        f.seek(start)
        self.send_response(206 if ranged else 200)
        self.send_header("Content-Type", "application/x-tar")
        self.send_header("Accept-Ranges", "bytes")
        if ranged:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        self.remaining = end - start + 1
        return f

    def copyfile(self, source, outputfile):
        left = self.remaining
        while left > 0:
            chunk = source.read(min(left, 1 << 16))
            if not chunk:
                break
            outputfile.write(chunk)
            left -= len(chunk)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    key, cert = os.path.join(a.workdir, "key.pem"), os.path.join(a.workdir, "cert.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    root = os.path.abspath(a.root)

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True

    server = Server(("127.0.0.1", 0), lambda *args: Handler(*args, directory=root))
    server.log_path = os.path.join(a.workdir, "requests.log")
    server.log_lock = threading.Lock()
    open(server.log_path, "w").close()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print(json.dumps({"url": "https://127.0.0.1:%d" % server.server_address[1], "ca": cert,
                      "log": server.log_path}), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
