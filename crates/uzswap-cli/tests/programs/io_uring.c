/* Reads a file into a heap larger than the budget through io_uring, made
 * with raw system calls through libc's syscall(2) as libuv and the Rust
 * io-uring crate make them, and checks every byte. Where io_uring_setup
 * is refused (ENOSYS, EPERM: a kernel without it, a container's seccomp
 * profile, uzswap where the kernel's faults are not served) it falls back
 * to pread, as such programs do. Prints "ok io_uring" or "ok fallback".
 * With "raw", io_uring_setup is made with the syscall instruction itself,
 * as liburing makes it (x86_64; elsewhere through syscall(2) as well).
 *
 * usage: io_uring MIB [raw] */
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define BLK (64 << 10)

static struct ring {
	int fd;
	unsigned *stail, *smask, *sarr, *chead, *ctail, *cmask;
	struct io_uring_sqe *sqes;
	struct io_uring_cqe *cqes;
} r;

static long setup(unsigned entries, struct io_uring_params *p, int raw)
{
#if defined(__x86_64__)
	if (raw) {
		long ret;
		__asm__ volatile("syscall"
				 : "=a"(ret)
				 : "0"((long)__NR_io_uring_setup), "D"((long)entries), "S"(p)
				 : "rcx", "r11", "memory");
		if (ret < 0 && ret > -4096) {
			errno = (int)-ret;
			return -1;
		}
		return ret;
	}
#endif
	(void)raw;
	return syscall(__NR_io_uring_setup, entries, p);
}

static int ring_init(int raw)
{
	struct io_uring_params p;
	memset(&p, 0, sizeof p);
	r.fd = setup(8, &p, raw);
	if (r.fd < 0)
		return -1;
	size_t sl = p.sq_off.array + p.sq_entries * sizeof(unsigned);
	size_t cl = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
	char *sq = mmap(0, sl, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r.fd,
			IORING_OFF_SQ_RING);
	char *cq = mmap(0, cl, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r.fd,
			IORING_OFF_CQ_RING);
	r.sqes = mmap(0, p.sq_entries * sizeof *r.sqes, PROT_READ | PROT_WRITE,
		      MAP_SHARED | MAP_POPULATE, r.fd, IORING_OFF_SQES);
	if (sq == MAP_FAILED || cq == MAP_FAILED || r.sqes == MAP_FAILED) {
		perror("mmap ring");
		exit(1);
	}
	r.stail = (unsigned *)(sq + p.sq_off.tail);
	r.smask = (unsigned *)(sq + p.sq_off.ring_mask);
	r.sarr = (unsigned *)(sq + p.sq_off.array);
	r.chead = (unsigned *)(cq + p.cq_off.head);
	r.ctail = (unsigned *)(cq + p.cq_off.tail);
	r.cmask = (unsigned *)(cq + p.cq_off.ring_mask);
	r.cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
	return 0;
}

/* One read of BLK bytes at offset 0 of f into buf, through the ring. */
static int ring_read(int f, char *buf)
{
	unsigned t = *r.stail, i = t & *r.smask;
	struct io_uring_sqe *e = &r.sqes[i];
	memset(e, 0, sizeof *e);
	e->opcode = IORING_OP_READ;
	e->fd = f;
	e->addr = (uint64_t)(uintptr_t)buf;
	e->len = BLK;
	r.sarr[i] = i;
	__atomic_store_n(r.stail, t + 1, __ATOMIC_RELEASE);
	if (syscall(__NR_io_uring_enter, r.fd, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0) {
		perror("io_uring_enter");
		exit(1);
	}
	unsigned h = *r.chead;
	while (h == __atomic_load_n(r.ctail, __ATOMIC_ACQUIRE))
		;
	int res = r.cqes[h & *r.cmask].res;
	__atomic_store_n(r.chead, h + 1, __ATOMIC_RELEASE);
	return res;
}

int main(int argc, char **argv)
{
	size_t n = (size_t)(argc > 1 ? atoi(argv[1]) : 64) << 20;
	int uring = ring_init(argc > 2 && !strcmp(argv[2], "raw")) == 0;
	if (!uring && errno != ENOSYS && errno != EPERM) {
		perror("io_uring_setup");
		return 1;
	}
	char path[] = "/tmp/uzswap-io_uring-XXXXXX";
	int f = mkstemp(path);
	if (f < 0) {
		perror("mkstemp");
		return 1;
	}
	unlink(path);
	static char src[BLK];
	for (size_t i = 0; i < BLK; i++)
		src[i] = (char)(i * 7 + 3);
	if (write(f, src, BLK) != BLK) {
		perror("write");
		return 1;
	}
	/* Written first, so that by the reads most of it was evicted. */
	char *heap = malloc(n);
	for (size_t i = 0; i < n; i += 4096)
		memset(heap + i, (int)(i >> 12), 4096);
	size_t reads = 0;
	for (int pass = 0; pass < 2; pass++)
		for (size_t off = pass * BLK; off + BLK <= n; off += 2 * BLK) {
			long got = uring ? ring_read(f, heap + off) : pread(f, heap + off, BLK, 0);
			if (got != BLK) {
				fprintf(stderr, "read %zu at %zu: %ld (%s)\n", reads, off, got,
					got < 0 ? strerror(uring ? (int)-got : errno) : "short");
				return 1;
			}
			if (memcmp(heap + off, src, BLK)) {
				fprintf(stderr, "read %zu at %zu: wrong bytes\n", reads, off);
				return 1;
			}
			reads++;
		}
	printf("ok %s\n", uring ? "io_uring" : "fallback");
	return 0;
}
