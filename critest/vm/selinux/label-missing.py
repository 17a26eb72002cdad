#!/usr/bin/env python3
"""Labels the files setfiles left without a security.selinux attribute.

Usage: label-missing.py ROOT. setfiles, run in the image's chroot on a host without
SELinux, skips some paths without a word (/tmp, /usr/local, the /bin symlink, ...);
each of them gets the label matchpathcon gives in the chroot.
"""
import os
import stat
import subprocess
import sys

root = sys.argv[1].rstrip("/")
missing = []
for d, dirs, files in os.walk(root):
    if d == root + "/proc":
        dirs[:] = []
        continue
    for p in [d] + [os.path.join(d, n) for n in files + [x for x in dirs if os.path.islink(os.path.join(d, x))]]:
        try:
            os.getxattr(p, "security.selinux", follow_symlinks=False)
        except OSError:
            missing.append(p)
kinds = {stat.S_IFDIR: "dir", stat.S_IFLNK: "lnk_file", stat.S_IFREG: "file", stat.S_IFCHR: "chr_file",
         stat.S_IFBLK: "blk_file", stat.S_IFIFO: "fifo_file", stat.S_IFSOCK: "sock_file"}
for p in missing:
    rel = p[len(root):] or "/"
    mode = stat.S_IFMT(os.lstat(p).st_mode)
    out = subprocess.run(["chroot", root, "matchpathcon", "-n", "-m", kinds[mode], rel],
                         capture_output=True, text=True, check=True).stdout.strip()
    if out == "<<none>>":
        continue  # the policy labels it at run time (/run is a tmpfs)
    os.setxattr(p, "security.selinux", out.encode() + b"\0", follow_symlinks=False)
    print(f"label-missing: {rel} {out}", file=sys.stderr)
