// The first touch of a fresh 64 KiB chunk, then a write to each of its pages:
// UFFDIO_COPY from a zero buffer (what uzswap does), UFFDIO_ZEROPAGE (the
// shared zero page, copied on write by the kernel, a fault per page), and
// the kernel's own anonymous faults on memory no userfaultfd covers (4 KiB
// pages unless a 64 KiB mTHP size is enabled). Unless an argument is given,
// a second thread spins on CPU 1, as a program's other threads do: the
// zero page's copy-on-write replaces a present entry and flushes that CPU.
//
//   cc -O2 -pthread -o uffd_zeropage_vs_copy scripts/uffd_zeropage_vs_copy.c
//   ./uffd_zeropage_vs_copy            # with the spinning thread
//   ./uffd_zeropage_vs_copy nospin     # alone
//
// Needs the userfaultfd syscall (root, or vm.unprivileged_userfaultfd=1).
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile int stop;

static void *spin(void *a)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(1, &s);
	sched_setaffinity(0, sizeof s, &s);
	volatile char *p = a;
	while (!stop)
		p[0]++;
	return 0;
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(0, &s);
	sched_setaffinity(0, sizeof s, &s);
	int uffd = syscall(SYS_userfaultfd, O_CLOEXEC);
	struct uffdio_api api = { .api = UFFD_API, .features = 0 };
	if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api)) {
		perror("userfaultfd");
		return 1;
	}
	size_t CH = 65536, N = 4096, len = CH * N;
	char *dst = mmap(0, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	madvise(dst, len, MADV_NOHUGEPAGE);
	struct uffdio_register reg = {
		.range = { (uintptr_t)dst, len },
		.mode = UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP,
	};
	if (ioctl(uffd, UFFDIO_REGISTER, &reg)) {
		perror("register");
		return 1;
	}
	char *plain = mmap(0, len, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	char *zero = calloc(1, CH);
	char *hot = malloc(4096);
	pthread_t t;
	int spinning = argc < 2;
	if (spinning)
		pthread_create(&t, 0, spin, hot);
	usleep(10000);
	for (int round = 0; round < 4; round++) {
		double t0 = now();
		for (size_t i = 0; i < N / 2; i++) {
			struct uffdio_copy c = { .dst = (uintptr_t)dst + i * CH,
						 .src = (uintptr_t)zero, .len = CH };
			if (ioctl(uffd, UFFDIO_COPY, &c)) {
				perror("copy");
				return 1;
			}
			memset(dst + i * CH, (int)i | 1, CH);
		}
		double t1 = now();
		for (size_t i = N / 2; i < N; i++) {
			struct uffdio_zeropage z = {
				.range = { (uintptr_t)dst + i * CH, CH } };
			if (ioctl(uffd, UFFDIO_ZEROPAGE, &z)) {
				perror("zeropage");
				return 1;
			}
			memset(dst + i * CH, (int)i | 1, CH);
		}
		double t2 = now();
		for (size_t i = 0; i < N / 2; i++)
			memset(plain + i * CH, (int)i | 1, CH);
		double t3 = now();
		printf("copy+write %.2f  zeropage+write %.2f  kernel fault %.2f us/chunk\n",
		       (t1 - t0) / (N / 2) * 1e6, (t2 - t1) / (N / 2) * 1e6,
		       (t3 - t2) / (N / 2) * 1e6);
		madvise(dst, len, MADV_DONTNEED);
		madvise(plain, len, MADV_DONTNEED);
	}
	stop = 1;
	if (spinning)
		pthread_join(t, 0);
	return 0;
}
