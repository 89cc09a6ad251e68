# Anonymous private mappings the program makes itself: MADV_DONTNEED reads
# back zeros, mremap (resize) keeps the bytes, munmap and map again.
import mmap, sys
MB = 1 << 20
for round in range(3):
    m = mmap.mmap(-1, 32 * MB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for i in range(0, 32 * MB, 4096):
        m[i:i + 8] = (i + round).to_bytes(8, "little")
    m.madvise(mmap.MADV_DONTNEED, 8 * MB, 4 * MB)
    for i in range(0, 32 * MB, 4096):
        want = 0 if 8 * MB <= i < 12 * MB else i + round
        if int.from_bytes(m[i:i + 8], "little") != want:
            sys.exit(f"page at {i:#x}: wrong bytes after MADV_DONTNEED")
    m.resize(48 * MB)
    for i in range(0, 32 * MB, 4096):
        want = 0 if 8 * MB <= i < 12 * MB else i + round
        if int.from_bytes(m[i:i + 8], "little") != want:
            sys.exit(f"page at {i:#x}: wrong bytes after mremap")
    if any(m[32 * MB: 48 * MB: 4096]):
        sys.exit("grown part not zero")
    m.resize(16 * MB)
    m.close()
print("ok mappings")
