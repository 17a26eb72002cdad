#!/usr/bin/env python3
"""Writes an OCI image archive of one layer holding a static busybox, for
`ctr images import` on a host with no registry: mkimage.py BUSYBOX NAME OUT.tar"""
import hashlib, io, json, sys, tarfile, time

busybox, name, out = sys.argv[1:4]
applets = ["sh", "sleep", "cat", "echo", "grep", "awk", "stat", "readlink", "dd", "yes", "true", "id", "ls", "head", "tr", "mkdir"]
layer = io.BytesIO()
with tarfile.open(fileobj=layer, mode="w") as t:
    for d in ["bin", "tmp", "etc"]:
        ti = tarfile.TarInfo(d); ti.type = tarfile.DIRTYPE; ti.mode = 0o1777 if d == "tmp" else 0o755
        t.addfile(ti)
    t.add(busybox, "bin/busybox")
    for a in applets:
        ti = tarfile.TarInfo("bin/" + a); ti.type = tarfile.LNKTYPE; ti.linkname = "bin/busybox"; ti.mode = 0o755; t.addfile(ti)
    for f, body in [("etc/passwd", b"root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n"),
                    ("etc/group", b"root:x:0:\nnogroup:x:65534:\n")]:
        ti = tarfile.TarInfo(f); ti.size = len(body); t.addfile(ti, io.BytesIO(body))
layer = layer.getvalue()

def blob(data):
    return "sha256:" + hashlib.sha256(data).hexdigest(), data

ldig, _ = blob(layer)
config = json.dumps({"architecture": "amd64", "os": "linux",
    "config": {"Cmd": ["sh"], "Env": ["PATH=/bin"]},
    "rootfs": {"type": "layers", "diff_ids": [ldig]}}).encode()
cdig, _ = blob(config)
manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cdig, "size": len(config)},
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": ldig, "size": len(layer)}]}).encode()
mdig, _ = blob(manifest)
index = json.dumps({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
    "digest": mdig, "size": len(manifest), "annotations": {"io.containerd.image.name": name}}]}).encode()
with tarfile.open(out, "w") as t:
    for path, data in [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index)] + \
            [("blobs/sha256/" + d.split(":")[1], b) for d, b in [(ldig, layer), (cdig, config), (mdig, manifest)]]:
        ti = tarfile.TarInfo(path); ti.size = len(data); ti.mtime = int(time.time()); t.addfile(ti, io.BytesIO(data))
