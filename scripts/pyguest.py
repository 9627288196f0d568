#!/usr/bin/env python3
"""pyguest.py: packs this machine's Python, and what one script needs of it,
into an initramfs layer the gmig guest can run (docs/cuda.md, "Python in the
guest").

  python3 pyguest.py pack [--prefix /opt/py] [--base BASE.cpio] --out OUT.cpio
                     [--argv FILE] SCRIPT [ARG...]

The guest image has no Python. pack runs SCRIPT ARG... natively once, with
the interpreter that runs pack (sys.executable: a system Python or a venv's),
under the same bootstrap the guest will use, which at exit lists every file of
sys.modules and every shared object of /proc/self/maps (NVIDIA's libcuda.so*
and libnvidia-* left out: in the guest, gmig's libcuda.so.1 must be found).
Those files, the interpreter, its loader and libraries (libc too, so that a
host glibc newer than the guest's runs), the encodings the interpreter starts
with and SCRIPT are laid out under PREFIX in one canonical layout, whatever
the host's:

  PREFIX/bin/python3                  the interpreter
  PREFIX/lib/                         every shared object but extension modules
  PREFIX/lib/pythonX.Y/               the standard library's modules used
  PREFIX/lib/pythonX.Y/lib-dynload/   its extension modules used
  PREFIX/site/                        every other module (site-packages, PYTHONPATH)
  PREFIX/boot.py, PREFIX/SCRIPT

and written as a newc cpio archive (OUT, or BASE with it appended: Linux
unpacks concatenated archives in order). The guest runs, with no environment
of its own (argv only, so gmig.cuda=... can carry it):

  PREFIX/lib/ld-linux-x86-64.so.2 --library-path PREFIX/lib:/usr/lib/x86_64-linux-gnu:/lib/x86_64-linux-gnu
      PREFIX/bin/python3 -I PREFIX/boot.py PREFIX/SCRIPT ARG...

The interpreter finds its prefix from argv[0] (PREFIX/lib/pythonX.Y/os.py);
-I keeps the host's PYTHON* variables and user site out; boot.py puts
PREFIX/site on sys.path and runs SCRIPT as __main__. --argv FILE gets that
command as gmig.cuda's comma-separated PROGRAM,ARG,... (without SCRIPT's
ARGs). pack fails, with SCRIPT's output, when SCRIPT does not run natively,
or when a copy of the packed tree under a scratch prefix does not run it
(-I, the same bootstrap and argv, the library path plus LD_LIBRARY_PATH).
"""
import argparse
import importlib.util
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile

# BOOT is PREFIX/boot.py; pack runs the same file natively with
# GMIG_PYGUEST_TRACE=FILE, where it also lists what the script used.
BOOT = '''\
"""The guest's Python bootstrap (scripts/pyguest.py): SITE on sys.path,
argv[1] run as __main__ with the rest as its arguments."""
import os
import runpy
import sys

SITE = {site!r}


_opened = set()


def _audit(event, args):
    if event == "open" and args and isinstance(args[0], str):
        _opened.add(os.path.abspath(args[0]))


def _trace(path):
    files = ["O " + f for f in _opened]
    for m in list(sys.modules.values()):
        f = getattr(m, "__file__", None)
        if isinstance(f, str):
            files.append("M " + f)
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/"):
                files.append("L " + parts[5].rstrip("\\n"))
    with open(path, "w") as out:
        out.write("\\n".join(files) + "\\n")


if os.environ.get("GMIG_PYGUEST_TRACE"):
    import atexit
    atexit.register(_trace, os.environ["GMIG_PYGUEST_TRACE"])
    sys.addaudithook(_audit)
sys.path.insert(0, SITE)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''

# The encodings the interpreter may start with in the guest (no locale
# there: C, so UTF-8 mode), whether or not the host's run used them.
ENCODINGS = ("__init__", "aliases", "utf_8", "ascii", "latin_1")

# Shared objects the guest must not take from the host: NVIDIA's driver
# library (gmig's libcuda.so.1 stands in for it) and what it loads.
SKIP_PREFIXES = ("libcuda.so", "libcudadebugger.so", "libnvidia-")


def fail(msg):
    print(f"pyguest: {msg}", file=sys.stderr)
    sys.exit(1)


def is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


class Layout:
    """Where each host file goes under the prefix."""

    def __init__(self, prefix, script):
        self.prefix = prefix
        ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
        self.pylib = f"{prefix}/lib/{ver}"
        paths = sysconfig.get_paths()
        self.stdlib = os.path.abspath(paths["stdlib"])
        self.dynload = os.path.abspath(os.path.join(paths["platstdlib"], "lib-dynload"))
        dest = sysconfig.get_config_var("DESTSHARED")
        if dest and os.path.isdir(dest):
            self.dynload = os.path.abspath(dest)
        # Every other directory modules came from: sys.path's, the script's.
        std = {os.path.realpath(self.stdlib), os.path.realpath(self.dynload)}
        self.sites = {os.path.abspath(p) for p in sys.path if p and os.path.isdir(p)}
        self.sites.add(os.path.dirname(os.path.abspath(script)))
        self.sites = {p for p in self.sites if os.path.realpath(p) not in std}
        self.files = {}  # destination -> host file
        self.links = {}  # destination -> what the link holds

    def add(self, dst, src):
        old = self.files.get(dst)
        if old is not None and os.path.realpath(old) != os.path.realpath(src):
            fail(f"{src} and {old} would both be {dst}")
        self.files[dst] = src

    def module(self, path, required=True):
        """A module's file (and its cached bytecode, where the host has it),
        or a file the script opened under the interpreter's directories (a
        package's data, its distribution's metadata); False when it is
        under none of them and not required."""
        real = os.path.realpath(path)
        roots = [(self.dynload, self.pylib + "/lib-dynload"), (self.stdlib, self.pylib)]
        roots += [(s, self.prefix + "/site") for s in self.sites]
        # The path as Python names it first (Debian's stdlib sitecustomize.py
        # is a link into /etc), then the file's own.
        best = None
        for name in (os.path.abspath(path), real):
            for root, dst in roots:
                for r in {root, os.path.realpath(root)}:
                    if name.startswith(r + os.sep) and (best is None or len(r) > len(best[0])):
                        best = (r, dst, name)
            if best is not None:
                break
        if best is None:
            if required:
                fail(f"module file {path} is under none of the interpreter's directories")
            return False
        root, dst, name = best
        self.add(f"{dst}/{os.path.relpath(name, root)}", real)
        if name.endswith(".py"):
            try:
                pyc = importlib.util.cache_from_source(name)
            except NotImplementedError:
                return True
            if os.path.isfile(pyc):
                self.add(f"{dst}/{os.path.relpath(pyc, root)}", pyc)
        return True

    def shared(self, path):
        """A shared object the process mapped (not a module), under its
        file's name and, as links, the shorter names beside it that lead to
        it (/proc/self/maps names libffi.so.8.1.2; the loader wants its
        soname, libffi.so.8)."""
        real = os.path.realpath(path)
        base = os.path.basename(real)
        self.add(f"{self.prefix}/lib/{base}", real)
        for alias in aliases(base):
            if os.path.realpath(os.path.join(os.path.dirname(path), alias)) == real:
                self.links[f"{self.prefix}/lib/{alias}"] = base


def aliases(base):
    """The shorter names of a shared object's file: libffi.so.8.1.2 gives
    libffi.so, libffi.so.8 and libffi.so.8.1."""
    j = base.find(".so")
    out = []
    if j < 0:
        return out
    j += 3
    while j > 0:
        if base[:j] != base:
            out.append(base[:j])
        j = base.find(".", j + 1)
    return out


def trace(script, args, boot):
    """Runs script natively under boot; returns the files it listed."""
    with tempfile.NamedTemporaryFile("r", suffix=".trace") as listing:
        env = dict(os.environ, GMIG_PYGUEST_TRACE=listing.name)
        p = subprocess.run([sys.executable, boot, script, *args], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out = p.stdout.strip().splitlines()
        for line in out[-3:]:
            print(f"  native: {line}")
        if p.returncode != 0:
            print("\n".join(out[-20:]), file=sys.stderr)
            fail(f"{script} does not run natively with {sys.executable} (status {p.returncode}): "
                 "nothing to pack (is cuda-python installed? pip install cuda-python)")
        return listing.read().split("\n")


def closure(prefix, script, listed, boot_src):
    lay = Layout(prefix, script)
    exe = os.path.realpath(sys.executable)
    lay.add(f"{prefix}/bin/python3", exe)
    modules = set()
    for entry in listed:
        kind, _, path = entry.partition(" ")
        if kind == "M" and os.path.isfile(path):
            modules.add(os.path.realpath(path))
            lay.module(path)
    # Other files the script opened (data, metadata) where they lie under
    # the interpreter's directories; the rest (/proc, /dev, /etc) is the
    # guest's own.
    nopened = 0
    for entry in listed:
        kind, _, path = entry.partition(" ")
        real = os.path.realpath(path)
        if kind == "O" and real not in modules and os.path.isfile(real) and real != os.path.realpath(script):
            nopened += lay.module(real, required=False)
    nshared = 0
    for entry in listed:
        kind, _, path = entry.partition(" ")
        if kind != "L" or path.endswith(" (deleted)") or not os.path.isfile(path):
            continue
        real = os.path.realpath(path)
        base = os.path.basename(path)
        if real in modules or real == exe or real == os.path.realpath(script) or not is_elf(real):
            continue
        if base.startswith(SKIP_PREFIXES) or os.path.basename(real).startswith(SKIP_PREFIXES):
            continue
        if lay.files.get(f"{prefix}/lib/{base}") is None:
            nshared += 1
        lay.shared(path)
    # What the interpreter starts with, used natively or not.
    lay.module(os.path.join(lay.stdlib, "os.py"))
    for e in ENCODINGS:
        f = os.path.join(lay.stdlib, "encodings", e + ".py")
        if os.path.isfile(f):
            lay.module(f)
    if not any(d.startswith(f"{prefix}/lib/ld-linux") for d in lay.files):
        fail("no ld-linux in the native run's maps")
    lay.add(f"{prefix}/{os.path.basename(script)}", os.path.realpath(script))
    return lay, len(modules), nshared, nopened


class Newc:
    """A newc ("070701") cpio archive, the format the kernel's initramfs reads."""

    def __init__(self, out):
        self.out = out
        self.ino = 1
        self.dirs = set()

    def entry(self, name, mode, data=b"", mtime=0):
        n = name.encode() + b"\0"
        fields = [self.ino, mode, 0, 0, 2 if stat.S_ISDIR(mode) else 1, int(mtime), len(data), 0, 0, 0, 0, len(n), 0]
        self.ino += 1
        self.out.write(b"070701" + b"".join(b"%08X" % v for v in fields) + n)
        self.out.write(b"\0" * (-(110 + len(n)) % 4))
        self.out.write(data)
        self.out.write(b"\0" * (-len(data) % 4))

    def mkdirs(self, path):
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d not in self.dirs:
                self.dirs.add(d)
                self.entry(d, stat.S_IFDIR | 0o755)

    def file(self, name, src=None, data=None, mode=0o644, mtime=0):
        if src is not None:
            st = os.stat(src)
            with open(src, "rb") as f:
                data = f.read()
            mode, mtime = (0o755 if st.st_mode & 0o111 else 0o644), st.st_mtime
        self.mkdirs(os.path.dirname(name))
        self.entry(name.strip("/"), stat.S_IFREG | mode, data, mtime)

    def symlink(self, name, target):
        self.mkdirs(os.path.dirname(name))
        self.entry(name.strip("/"), stat.S_IFLNK | 0o777, target.encode())

    def close(self):
        self.entry("TRAILER!!!", 0)
        self.out.write(b"\0" * (-self.out.tell() % 512))


def guest_argv(prefix, lay, script):
    loader = sorted(d for d in lay.files if d.startswith(f"{prefix}/lib/ld-linux"))[0]
    libpath = f"{prefix}/lib:/usr/lib/x86_64-linux-gnu:/lib/x86_64-linux-gnu"
    return [loader, "--library-path", libpath, f"{prefix}/bin/python3", "-I",
            f"{prefix}/boot.py", f"{prefix}/{os.path.basename(script)}"]


def check(lay, prefix, script, args):
    """Runs script from a copy of the packed tree under a scratch prefix,
    natively: what the guest lacks of Python's own (a module, a data file,
    the interpreter's prefix) fails here first. Shared objects the copy
    lacks may still come from this machine's loader cache: those the guest
    finds out."""
    with tempfile.TemporaryDirectory(prefix="pyguest-check-") as tmp:
        for dst, src in lay.files.items():
            os.makedirs(os.path.dirname(tmp + dst[len(prefix):]), exist_ok=True)
            shutil.copy2(src, tmp + dst[len(prefix):])
        for dst, target in lay.links.items():
            if not os.path.lexists(tmp + dst[len(prefix):]):
                os.symlink(target, tmp + dst[len(prefix):])
        with open(f"{tmp}/boot.py", "w") as f:
            f.write(BOOT.format(site=tmp + "/site"))
        argv = [w.replace(prefix, tmp, 1) if w.startswith(prefix) else w for w in guest_argv(prefix, lay, script)]
        # The library path as the guest's, plus this machine's
        # LD_LIBRARY_PATH (where a libcuda.so.1 may be).
        argv[2] = f"{tmp}/lib:" + os.environ.get("LD_LIBRARY_PATH", "")
        env = {k: v for k, v in os.environ.items() if k != "GMIG_PYGUEST_TRACE" and not k.startswith("PYTHON")}
        p = subprocess.run(argv + list(args), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            print(p.stdout[-3000:], file=sys.stderr)
            fail(f"the packed tree does not run {os.path.basename(script)} (status {p.returncode}), "
                 f"copied to {tmp} and run there: {' '.join(argv + list(args))}")
        last = (p.stdout.strip().splitlines() or ["(no output)"])[-1]
        print(f"pyguest: check: the packed tree, copied under another prefix, runs it: {last}")


def pack(a):
    script = os.path.abspath(a.script)
    if not os.path.isfile(script):
        fail(f"{a.script}: no such file")
    boot_src = BOOT.format(site=a.prefix + "/site")
    with tempfile.TemporaryDirectory() as tmp:
        boot = os.path.join(tmp, "boot.py")
        with open(boot, "w") as f:
            f.write(boot_src)
        listed = trace(script, a.args, boot)
    lay, nmod, nshared, nopened = closure(a.prefix, script, listed, boot_src)
    argv = guest_argv(a.prefix, lay, script)
    check(lay, a.prefix, script, a.args)
    if any("," in w or " " in w for w in argv + a.args):
        fail(f"a word of {argv} has a comma or a space: gmig.cuda cannot carry it")
    total = 0
    with open(a.out, "wb") as out:
        if a.base:
            with open(a.base, "rb") as base:
                while chunk := base.read(1 << 20):
                    out.write(chunk)
            out.write(b"\0" * (-out.tell() % 4))
        start = out.tell()
        w = Newc(out)
        for dst in sorted(lay.files):
            w.file(dst, src=lay.files[dst])
        for dst in sorted(set(lay.links) - set(lay.files)):
            w.symlink(dst, lay.links[dst])
        w.file(f"{a.prefix}/boot.py", data=boot_src.encode())
        w.close()
        total = out.tell() - start
    if a.argv:
        with open(a.argv, "w") as f:
            f.write(",".join(argv) + "\n")
    print(f"pyguest: {sys.executable} (Python {sys.version.split()[0]}, prefix {sys.prefix}): "
          f"{len(lay.files) + 1} files and {len(lay.links)} links, {total / (1 << 20):.1f} MiB ({nmod} modules, {nshared} shared objects, {nopened} other files opened) "
          f"under {a.prefix} in {a.out}" + (f" (appended to {a.base})" if a.base else ""))
    print(f"pyguest: the guest runs {' '.join(argv)} {' '.join(a.args)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="pack what SCRIPT needs into an initramfs layer")
    p.add_argument("--prefix", default="/opt/py", help="where the layer puts everything in the guest")
    p.add_argument("--base", help="an initramfs to copy first (the guest image)")
    p.add_argument("--out", required=True, help="the archive written")
    p.add_argument("--argv", help="write the guest's command here, comma-separated (gmig.cuda's form)")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    if not a.prefix.startswith("/") or "," in a.prefix:
        fail(f"--prefix {a.prefix}: want an absolute path without commas")
    pack(a)


if __name__ == "__main__":
    main()
