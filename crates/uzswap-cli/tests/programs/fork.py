# A parent whose memory is mostly evicted forks; the child checks every
# byte it inherited, and also execs a program that checks its own memory.
import hashlib, os, sys
n = int(sys.argv[1])
data = [bytes([(i * 7) % 256]) * 4096 + i.to_bytes(8, "little") for i in range(n)]
want = hashlib.sha256(b"".join(data)).hexdigest()
pid = os.fork()
if pid == 0:
    ok = hashlib.sha256(b"".join(data)).hexdigest() == want
    os._exit(0 if ok else 3)
_, st = os.waitpid(pid, 0)
if os.waitstatus_to_exitcode(st) != 0:
    sys.exit("forked child saw different bytes")
pid = os.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, "-c", "import sys; sys.exit(0 if sum(range(10**6)) == 499999500000 else 4)"])
_, st = os.waitpid(pid, 0)
if os.waitstatus_to_exitcode(st) != 0:
    sys.exit("fork+exec child failed")
if hashlib.sha256(b"".join(data)).hexdigest() != want:
    sys.exit("parent's bytes changed")
print("ok fork")
