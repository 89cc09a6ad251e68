# System calls that read and write program memory while most of it is
# evicted: write/read, pwrite/pread, writev/readv, send/recv, and a
# subprocess started with an environment set long before (the strings,
# heap memory, evicted: its exec failed with EFAULT where the kernel's
# faults are not served). Every call must succeed and every byte must come
# back. Prints "ok N" or fails.
import os, socket, subprocess, sys, tempfile
MB = 1 << 20
for i in range(64):
    os.environ["UZ_VAR_%d" % i] = chr(97 + i % 26) * 300
# Buffers made first are evicted by the time the calls below use them
# (CPython's os.preadv and os.pwritev call preadv2 and pwritev2).
targets = [bytearray(b"\xaa") * MB for _ in range(8)]
blocks = [bytes([(b * 31 + i) % 256 for i in range(256)]) * (MB // 256) for b in range(int(sys.argv[1]))]
calls = 0
def check(got, want, what):
    if got != want:
        sys.exit(f"mismatch after {what}")
with tempfile.TemporaryFile() as f:
    fd = f.fileno()
    for k, b in enumerate(blocks):
        assert os.pwrite(fd, b, k * MB) == MB; calls += 1
    for k, b in enumerate(blocks):
        buf = bytearray(MB)
        got = os.preadv(fd, [buf], k * MB); calls += 1
        check(got, MB, "preadv"); check(bytes(buf), b, "preadv data")
        check(os.pread(fd, MB, k * MB), b, "pread"); calls += 1
    for k, b in enumerate(blocks[:8]):
        check(os.pwritev(fd, [b[: MB // 2], b[MB // 2 :]], k * MB), MB, "pwritev"); calls += 1
    for k, t in enumerate(targets):
        check(os.preadv(fd, [t], k * MB), MB, "preadv into evicted memory"); calls += 1
        check(bytes(t), blocks[k], "preadv into evicted memory data")
    os.lseek(fd, 0, 0)
    for b in blocks[:8]:
        check(os.writev(fd, [b[: MB // 2], b[MB // 2 :]]), MB, "writev"); calls += 1
    os.lseek(fd, 0, 0)
    for b in blocks[:8]:
        bufs = [bytearray(MB // 2), bytearray(MB // 2)]
        check(os.readv(fd, bufs), MB, "readv"); calls += 1
        check(bytes(bufs[0] + bufs[1]), b, "readv data")
r, w = os.pipe()
for b in blocks[:16]:
    done = 0
    while done < 65536:
        done += os.write(w, b[done:65536]); calls += 1
    got = b""
    while len(got) < 65536:
        got += os.read(r, 65536 - len(got)); calls += 1
    check(got, b[:65536], "pipe")
a, c = socket.socketpair()
for b in blocks[:16]:
    a.sendall(b[:100000]); calls += 1
    got = bytearray()
    while len(got) < 100000:
        chunk = bytearray(100000 - len(got))
        n = c.recv_into(chunk); calls += 1
        got += chunk[:n]
    check(bytes(got), b[:100000], "socket")
sh = 'test "$UZ_VAR_63" = "$(printf %0300d 0 | tr 0 l)" && echo sub-ok'
check(subprocess.run(["/bin/sh", "-c", sh], capture_output=True).stdout, b"sub-ok\n", "subprocess"); calls += 1
print("ok", calls)
