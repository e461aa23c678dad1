#!/usr/bin/env python3
"""Writes one wheel of the ferry package from a staged folder (client/wheel/build.sh):
the folder holds ferry/ (the Python modules, ferry/_ferry*.so for one interpreter, and
ferry/bin with the daemons); this adds the .dist-info (METADATA from pyproject.toml,
WHEEL, the console scripts, RECORD with every file's hash) and zips it as
ferry-VERSION-TAG-TAG-linux_x86_64.whl. auditwheel then repairs it into a manylinux wheel.

  make_wheel.py --stage DIR --tag cp312 --out DIST
  make_wheel.py --add-libs WHEEL LIB...   adds shared libraries to a repaired wheel's
                                          ferry.libs (and to its RECORD)
"""
import argparse
import base64
import hashlib
import os
import re
import stat
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPTS = {"ferry-worker": "worker", "ferry-dispatcher": "dispatcher", "ferry-local": "local", "ferry-ctl": "ctl",
           "ferry-dispatcher-load": "dispatcher_load", "ferry-launch": "launch"}


def project():
    """name, version, summary, requires-python and dependencies from pyproject.toml (its
    [project] table; read with a few patterns, as Python 3.10 has no tomllib)."""
    text = open(os.path.join(ROOT, "pyproject.toml")).read()
    table = text.split("[project]", 1)[1].split("\n[", 1)[0]

    def value(key):
        m = re.search(r'^%s\s*=\s*"([^"]*)"' % key, table, re.M)
        return m.group(1) if m else None

    deps = re.search(r"^dependencies\s*=\s*\[([^\]]*)\]", table, re.M)
    return {"name": value("name"), "version": value("version"), "summary": value("description"),
            "requires_python": value("requires-python"),
            "dependencies": re.findall(r'"([^"]+)"', deps.group(1)) if deps else []}


def digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def add_libs(wheel, libs):
    """Rewrites `wheel` with `libs` (paths) added to ferry.libs, RECORD updated."""
    tmp = wheel + ".tmp"
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as dst:
        record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        record = src.read(record_name).decode().splitlines()
        record = [r for r in record if not r.startswith(record_name + ",")]
        for info in src.infolist():
            if info.filename != record_name:
                dst.writestr(info, src.read(info.filename))
        for lib in libs:
            data = open(lib, "rb").read()
            rel = "ferry.libs/" + os.path.basename(lib)
            info = zipfile.ZipInfo(rel, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 | stat.S_IFREG) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(info, data, compresslevel=9)
            record.append("%s,%s,%d" % (rel, digest(data), len(data)))
        record.append(record_name + ",,")
        dst.writestr(record_name, "\n".join(record) + "\n")
    os.replace(tmp, wheel)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stage")
    ap.add_argument("--tag", help="the interpreter's tag, e.g. cp312")
    ap.add_argument("--out")
    ap.add_argument("--add-libs", nargs="+", metavar=("WHEEL", "LIB"))
    a = ap.parse_args()
    if a.add_libs:
        add_libs(a.add_libs[0], a.add_libs[1:])
        return
    if not (a.stage and a.tag and a.out):
        ap.error("--stage, --tag and --out are required")
    p = project()
    dist_info = "%s-%s.dist-info" % (p["name"], p["version"])
    meta = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + p["version"], "Summary: " + p["summary"],
            "License-File: LICENSE"]
    if p["requires_python"]:
        meta.append("Requires-Python: " + p["requires_python"])
    meta += ["Requires-Dist: " + d for d in p["dependencies"]]
    readme = open(os.path.join(ROOT, "README.md")).read()
    files = {
        dist_info + "/METADATA": ("\n".join(meta) + "\nDescription-Content-Type: text/markdown\n\n" + readme).encode(),
        dist_info + "/WHEEL": ("Wheel-Version: 1.0\nGenerator: ferry make_wheel.py\nRoot-Is-Purelib: false\n"
                               "Tag: %s-%s-linux_x86_64\n" % (a.tag, a.tag)).encode(),
        dist_info + "/entry_points.txt": ("[console_scripts]\n" + "".join(
            "%s = ferry._daemons:%s\n" % (s, f) for s, f in sorted(SCRIPTS.items()))).encode(),
        dist_info + "/top_level.txt": b"ferry\n",
        dist_info + "/LICENSE": open(os.path.join(ROOT, "LICENSE"), "rb").read(),
    }
    os.makedirs(a.out, exist_ok=True)
    name = os.path.join(a.out, "%s-%s-%s-%s-linux_x86_64.whl" % (p["name"], p["version"], a.tag, a.tag))
    record = []
    with zipfile.ZipFile(name, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for folder, _, names in sorted(os.walk(a.stage)):
            for n in sorted(names):
                full = os.path.join(folder, n)
                rel = os.path.relpath(full, a.stage).replace(os.sep, "/")
                if "__pycache__" in rel:
                    continue
                data = open(full, "rb").read()
                info = zipfile.ZipInfo(rel, date_time=(2026, 1, 1, 0, 0, 0))
                info.external_attr = (os.stat(full).st_mode & 0o777 | stat.S_IFREG) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(info, data, compresslevel=9)
                record.append("%s,%s,%d" % (rel, digest(data), len(data)))
        for rel, data in files.items():
            z.writestr(rel, data)
            record.append("%s,%s,%d" % (rel, digest(data), len(data)))
        record.append(dist_info + "/RECORD,,")
        z.writestr(dist_info + "/RECORD", "\n".join(record) + "\n")
    print(name)


if __name__ == "__main__":
    main()
