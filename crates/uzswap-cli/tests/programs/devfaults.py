# Memory written back while the swap device fails, under `uzswap run`.
# Phase 1 fills N MiB with random (incompressible) blocks, so most of them
# go to the swap file, and keeps 8 of them; the rest are freed, which
# empties the device's clusters (punched out of the file). It prints
# "ready PID" and waits for a line on stdin, meanwhile the test breaks the
# device (truncates the file). Phase 2 writes N
# MiB afresh and reads every block back. Prints "ok N" or exits 1 on any
# wrong byte; a page that cannot be read back ends it with SIGBUS.
import hashlib, os, sys
n = int(sys.argv[1])
MB = 1 << 20
blocks = [bytearray(os.urandom(MB)) for _ in range(n)]
kept = blocks[:8]
sums = [hashlib.sha256(b).digest() for b in kept]
del blocks
print("ready", os.getpid(), flush=True)
sys.stdin.readline()
fresh = [bytearray(os.urandom(MB)) for _ in range(n)]
fresh_sums = [hashlib.sha256(b).digest() for b in fresh]
for b, s in zip(fresh + kept, fresh_sums + sums):
    if hashlib.sha256(b).digest() != s:
        sys.exit("mismatch")
print("ok", n, flush=True)
