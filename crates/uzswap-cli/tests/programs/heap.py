# A program of about 256 MiB of Python objects: builds a dict and lists,
# reads a skewed subset, and prints a digest of everything it reads.
import hashlib, sys
n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
d = {i: ("v%d-" % i) * 12 for i in range(n)}
l = [bytes([i % 251]) * 64 for i in range(n // 2)]
h = hashlib.sha256()
for i in range(0, n, 3):
    h.update(d[(i * 7919) % n].encode())
for k in range(0, n // 2, 5):
    h.update(l[k])
print(h.hexdigest(), len(d), len(l))
