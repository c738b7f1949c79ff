#!/usr/bin/env python3
"""hub_server.py - a stand-in for the Hugging Face Hub on the loopback, for
the `dsr1 pull` end-to-end tests (tests/e2e/pull_*.sh). Never reaches out.

Serves every directory ROOT/ORG/NAME as the model repo ORG/NAME at one
commit (a sha1 of its file list), in the Hub's shape:
  GET /api/models/ORG/NAME/revision/REV[?blobs=true]  model info JSON
      (sha, siblings[] with rfilename, size, blobId, lfs {sha256, size})
  GET /ORG/NAME/resolve/REV/PATH   small files directly (ETag = git blob
      id); LFS files (*.safetensors, files >= 10 MiB) by a 302 to
      http://localhost:PORT/_lfs/SHA256 - another host name on the same
      loopback, as the Hub redirects to its CDN.
REV is "main" or the commit. Range requests (bytes=N- and N-M) get 206.

Faults, each for the first requests of a file only (so retries succeed):
  --drop PATH:BYTES       close the connection after BYTES of the body
  --stall PATH:BYTES      send BYTES, then go silent (30 s) - for kills
  --fail PATH:CODE:COUNT  answer CODE to the first COUNT requests (429
                          and 503 carry Retry-After: 1)
  --corrupt PATH          serve the bytes with one flipped (every time)
  --no-range PATH         ignore Range headers for PATH (answer 200, whole)
  --fake-size PATH:N      the model info claims N bytes
  --gated ORG/NAME        files need "Authorization: Bearer hf_good":
                          401 without it, 403 with another token
Unknown repos get 404 with X-Error-Code: RepoNotFound.

Every request is logged to --log as one line when it ends:
  host method path range=R status=S bytes=N auth=yes|no
(bytes = body bytes actually sent), so tests count what was downloaded.
The port (bound to 0 = any free one) goes to --port-file. The server
exits by itself after --timeout seconds.
"""
import argparse
import hashlib
import http.server
import json
import os
import socket
import sys
import threading
import time
import urllib.parse

LFS_MIN = 10 << 20


def git_blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    def __init__(self, root, name, fake_sizes):
        self.name = name
        self.files = {}  # path -> dict(abs, size, blob, lfs, sha256)
        base = os.path.join(root, name)
        for d, _, names in os.walk(base):
            for n in sorted(names):
                a = os.path.join(d, n)
                rel = os.path.relpath(a, base)
                with open(a, "rb") as f:
                    data = f.read()
                lfs = rel.endswith(".safetensors") or len(data) >= LFS_MIN
                self.files[rel] = dict(abs=a, size=len(data), blob=git_blob_id(data), lfs=lfs,
                                       sha256=hashlib.sha256(data).hexdigest() if lfs else None)
        listing = "".join("%s %s\n" % (p, f["blob"]) for p, f in sorted(self.files.items()))
        self.commit = hashlib.sha1(listing.encode()).hexdigest()
        self.fake_sizes = fake_sizes

    def info(self):
        sib = []
        for p, f in sorted(self.files.items()):
            size = self.fake_sizes.get(p, f["size"])
            s = dict(rfilename=p, size=size, blobId=f["blob"])
            if f["lfs"]:
                s["lfs"] = dict(sha256=f["sha256"], size=size, pointerSize=134)
            sib.append(s)
        return dict(id=self.name, modelId=self.name, sha=self.commit, siblings=sib, private=False)


class State:
    def __init__(self, a):
        self.a = a
        self.lock = threading.Lock()
        self.count = {}  # (fault, path) -> requests seen
        self.repos = {}
        for org in sorted(os.listdir(a.root)):
            od = os.path.join(a.root, org)
            for n in sorted(os.listdir(od)) if os.path.isdir(od) else []:
                name = org + "/" + n
                fs = {}
                for spec in a.fake_size:
                    p, v = spec.rsplit(":", 1)
                    fs[p] = int(v)
                self.repos[name] = Repo(a.root, name, fs)
        self.by_sha = {}
        for r in self.repos.values():
            for p, f in r.files.items():
                if f["lfs"]:
                    self.by_sha[f["sha256"]] = (r, p)
        self.log = open(a.log, "a", buffering=1)

    def first(self, fault, path, limit):
        """Whether this is one of the first `limit` requests of path for fault."""
        with self.lock:
            n = self.count.get((fault, path), 0)
            self.count[(fault, path)] = n + 1
            return n < limit

    def write_log(self, line):
        with self.lock:
            self.log.write(line + "\n")


def faults(specs, path):
    for s in specs:
        p, rest = s.split(":", 1)
        if p == path:
            yield rest


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def finish_log(self, status, sent):
        st = self.server.state
        st.write_log("%s %s %s range=%s status=%d bytes=%d auth=%s" % (
            self.headers.get("Host", "-"), self.command, self.path,
            self.headers.get("Range", "-").replace(" ", ""), status, sent,
            "yes" if self.headers.get("Authorization") else "no"))

    def reply(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.finish_log(status, len(body))

    def error(self, status, code, msg):
        self.reply(status, json.dumps(dict(error=msg)).encode(),
                   [("X-Error-Code", code), ("Content-Type", "application/json")])

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        st = self.server.state
        u = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(x) for x in u.path.split("/")[1:]]
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "revision":
            return self.api(parts[2] + "/" + parts[3], "/".join(parts[5:]))
        if len(parts) >= 2 and parts[0] == "_lfs" and parts[1] in st.by_sha:
            repo, path = st.by_sha[parts[1]]
            return self.serve(repo, path)
        if len(parts) >= 5 and parts[2] == "resolve":
            return self.resolve(parts[0] + "/" + parts[1], parts[3], "/".join(parts[4:]))
        self.error(404, "EntryNotFound", "no such route")

    def find(self, name, rev):
        r = self.server.state.repos.get(name)
        if not r:
            self.error(404, "RepoNotFound", "Repository not found")
            return None
        if rev not in ("main", r.commit):
            self.error(404, "RevisionNotFound", "Invalid rev id: " + rev)
            return None
        return r

    def api(self, name, rev):
        r = self.find(name, rev)
        if r:
            self.reply(200, json.dumps(r.info()).encode(), [("Content-Type", "application/json")])

    def resolve(self, name, rev, path):
        st = self.server.state
        r = self.find(name, rev)
        if not r:
            return
        if name in st.a.gated:
            auth = self.headers.get("Authorization")
            if not auth:
                return self.error(401, "GatedRepo", "Access to model %s is restricted." % name)
            if auth != "Bearer hf_good":
                return self.error(403, "GatedRepo", "Access to model %s is restricted and you "
                                  "are not in the authorized list." % name)
        f = r.files.get(path)
        if not f:
            return self.error(404, "EntryNotFound", "Entry not found")
        for spec in faults(st.a.fail, path):
            code, count = spec.split(":")
            if st.first("fail:" + spec, path, int(count)):
                h = [("Retry-After", "1")] if code in ("429", "503") else []
                return self.reply(int(code), b"try later", h)
        common = [("X-Repo-Commit", r.commit)]
        if f["lfs"]:
            port = self.server.server_address[1]
            return self.reply(302, b"", common + [
                ("Location", "http://localhost:%d/_lfs/%s" % (port, f["sha256"])),
                ("X-Linked-Etag", '"%s"' % f["sha256"]), ("X-Linked-Size", str(f["size"])),
                ("ETag", '"%s"' % f["blob"])])
        self.serve(r, path, common + [("ETag", '"%s"' % f["blob"])])

    def serve(self, repo, path, headers=()):
        st = self.server.state
        f = repo.files[path]
        size, start, end = f["size"], 0, f["size"]
        rng = self.headers.get("Range")
        status = 200
        if rng and rng.startswith("bytes=") and path not in st.a.no_range:
            a, _, b = rng[6:].partition("-")
            start = int(a)
            end = min(int(b) + 1, size) if b else size
            if start >= size:
                return self.reply(416, b"", [("Content-Range", "bytes */%d" % size)])
            status = 206
        drop = stall = None
        for spec in faults(st.a.drop, path):
            if st.first("drop", path, 1):
                drop = int(spec)
        for spec in faults(st.a.stall, path):
            if st.first("stall", path, 1):
                stall = int(spec)
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(end - start))
        if status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end - 1, size))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        sent = 0
        if self.command == "HEAD":
            return self.finish_log(status, 0)
        corrupt = path in st.a.corrupt
        limit = drop if drop is not None else stall if stall is not None else end - start
        try:
            with open(f["abs"], "rb") as fh:
                fh.seek(start)
                if not corrupt and drop is None and stall is None:  # the fast path
                    self.wfile.flush()
                    sent = self.connection.sendfile(fh, start, end - start)
                while sent < min(limit, end - start):
                    chunk = fh.read(min(1 << 20, min(limit, end - start) - sent))
                    if corrupt and start + sent <= size // 2 < start + sent + len(chunk):
                        i = size // 2 - start - sent
                        chunk = chunk[:i] + bytes([chunk[i] ^ 0xFF]) + chunk[i + 1:]
                    self.wfile.write(chunk)
                    sent += len(chunk)
            self.wfile.flush()
            if stall is not None:  # logged now: the client is killed meanwhile
                self.finish_log(status, sent)
                sent = -1
                time.sleep(30)
            if drop is not None or stall is not None:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
        if sent >= 0:
            self.finish_log(status, sent)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--drop", action="append", default=[])
    ap.add_argument("--stall", action="append", default=[])
    ap.add_argument("--fail", action="append", default=[])
    ap.add_argument("--corrupt", action="append", default=[])
    ap.add_argument("--no-range", action="append", default=[])
    ap.add_argument("--fake-size", action="append", default=[])
    ap.add_argument("--gated", action="append", default=[])
    a = ap.parse_args()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    srv.state = State(a)
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(tmp, a.port_file)
    t = threading.Timer(a.timeout, lambda: os._exit(0))
    t.daemon = True
    t.start()
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
