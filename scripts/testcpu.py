#!/usr/bin/env python3
"""testcpu.py: the CPU seconds each test of one Go package costs, on a busy machine.

    scripts/testcpu.py ./conformance /tmp/conf [go test flags, e.g. -run X -levels.all]

go test -json's Elapsed is wall-clock time: on a loaded machine it measures the
load, and a test with parallel subtests reports almost nothing. This script
compiles the package's test binary (go test -c), runs it under test2json in
the package's folder (as go test does) and every half second reads the CPU
time (user + system) of the binary and all its descendants: the live ones
from /proc and the finished ones from the parents' reaped-children times
(opt, llc, gcc, g++, qemu and python processes included). Each interval's
CPU time goes to the tests running in it (run or cont, not yet paused or
done), split evenly among the top-level tests running, and within a test
among its running depth-2 subtests.

It writes OUT.json (test2json's events) and OUT.txt: the package's total
(from getrusage, exact, and the sampled sum), then the top-level tests and
the depth-2 subtests by CPU seconds. Flags after OUT go to the test binary
with their -test. prefix added where go test would add it (-run, -count,
-timeout, -v, -parallel, -cpu, -short); others (the package's own flags,
-levels.all) pass as given. CI=true and the tool variables pass through
the environment. Linux only (/proc).
"""
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time

TESTFLAGS = {"run", "count", "timeout", "v", "parallel", "cpu", "short", "skip", "failfast"}


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    pkg, out = sys.argv[1], os.path.abspath(sys.argv[2])
    flags = []
    for a in sys.argv[3:]:
        name = a.lstrip("-").split("=")[0]
        flags.append("-test." + a.lstrip("-") if name in TESTFLAGS else a)
    if not any(f.startswith("-test.timeout") for f in flags):
        flags.append("-test.timeout=90m")
    tmp = tempfile.mkdtemp(prefix="testcpu-")
    binary = os.path.join(tmp, "pkg.test")
    subprocess.run(["go", "test", "-c", "-o", binary, pkg], check=True)
    pkgdir = subprocess.run(["go", "list", "-f", "{{.Dir}}", pkg], check=True, capture_output=True, text=True).stdout.strip()
    try:
        run(pkgdir, binary, out, flags)
    finally:
        os.remove(binary)
        os.rmdir(tmp)


def stat(pid):
    """utime, stime, cutime, cstime of pid in clock ticks, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    return [int(x) for x in s[s.rindex(")") + 2:].split()[11:15]]


def children(pid):
    kids = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/children") as f:
                kids += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return kids


def tree_ticks(pid):
    """CPU ticks of pid and its descendants, live and reaped, or None."""
    s = stat(pid)
    if s is None:
        return None
    total, stack = sum(s), children(pid)
    while stack:
        c = stack.pop()
        cs = stat(c)
        if cs:
            total += sum(cs)
        stack += children(c)
    return total


def run(pkgdir, binary, out, flags):
    hz = os.sysconf("SC_CLK_TCK")
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.Popen(["go", "tool", "test2json", "-t", binary, "-test.v=test2json"] + flags,
                         cwd=pkgdir, stdout=subprocess.PIPE, text=True)
    active, status, lock = {}, {}, threading.Lock()

    def reader():
        with open(out + ".json", "w") as log:
            for line in p.stdout:
                log.write(line)
                log.flush()  # OUT.json shows the progress
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                t, a = e.get("Test"), e.get("Action")
                if not t:
                    continue
                with lock:
                    if a in ("run", "cont"):
                        active[t] = True
                    elif a in ("pause", "pass", "fail", "skip"):
                        active.pop(t, None)
                        if a != "pause" and "/" not in t:
                            status[t] = a

    th = threading.Thread(target=reader)
    th.start()
    top, sub = collections.defaultdict(float), collections.defaultdict(float)
    last, sampled, lost, start = tree_ticks(p.pid) or 0, 0.0, 0.0, time.time()
    while p.poll() is None:
        time.sleep(0.5)
        cur = tree_ticks(p.pid)
        if cur is None:
            break
        d = (cur - last) / hz
        last, sampled = cur, sampled + d
        with lock:
            names = list(active)
        tops = sorted({n.split("/")[0] for n in names})
        if not tops:
            lost += d
            continue
        subs = sorted({"/".join(n.split("/")[:2]) for n in names if "/" in n})
        for n in tops:
            top[n] += d / len(tops)
            mine = [s for s in subs if s.split("/")[0] == n] or [n]
            for s in mine:
                sub[s] += d / len(tops) / len(mine)
    th.join()
    wall = time.time() - start
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = ru.ru_utime + ru.ru_stime - ru0.ru_utime - ru0.ru_stime
    with open(out + ".txt", "w") as f:
        f.write(f"# {pkgdir}: {' '.join(flags)}\n")
        f.write(f"# wall {wall:.0f} s; CPU {cpu:.1f} s (getrusage of the run); "
                f"sampled {sampled:.1f} s, {lost:.1f} s of it outside any test; exit {p.returncode}\n")
        f.write("## top-level tests, CPU s\n")
        for n, v in sorted(top.items(), key=lambda x: -x[1]):
            f.write(f"{v:9.1f} {status.get(n, '?'):4} {n}\n")
        f.write("## depth-2 subtests, CPU s\n")
        for n, v in sorted(sub.items(), key=lambda x: -x[1]):
            f.write(f"{v:9.1f} {n}\n")
    print(open(out + ".txt").read(), end="")
    sys.exit(p.returncode)


if __name__ == "__main__":
    main()
