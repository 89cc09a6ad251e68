/* A program that closes what it did not open, as daemons and shells do:
 * after filling a heap several times the budget, it closes every
 * descriptor from 3 up (by one of five ways, argv[1]), then checks every
 * word. Under uzswap run the library's own descriptors (the userfaultfd,
 * the swap file) must survive this: evicted pages have to read back.
 * Prints "ok" or the count of wrong words, and what the closes returned.
 *   closers loop|range|from|dup|none MiB
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	const char *how = argc > 1 ? argv[1] : "none";
	size_t n = (size_t)(argc > 2 ? atoi(argv[2]) : 64) << 20;
	unsigned long *p = malloc(n);
	if (!p)
		return 2;
	size_t words = n / sizeof *p;
	for (size_t i = 0; i < words; i++)
		p[i] = i * 2654435761u + 17;
	int failed = 0;
	if (!strcmp(how, "loop")) {
		for (int fd = 3; fd < 1024; fd++)
			close(fd);
	} else if (!strcmp(how, "range")) {
		failed = close_range(3, ~0U, 0) != 0;
	} else if (!strcmp(how, "from")) {
		closefrom(3);
	} else if (!strcmp(how, "dup")) {
		/* A shell's `exec N>&2` for every N: onto ours, EBUSY. */
		for (int fd = 3; fd < 1024; fd++)
			if (dup2(2, fd) < 0 && errno != EBUSY)
				failed = 1;
		for (int fd = 3; fd < 1024; fd++)
			close(fd);
	}
	size_t bad = 0;
	for (size_t i = 0; i < words; i++)
		if (p[i] != i * 2654435761u + 17)
			bad++;
	if (bad || failed) {
		printf("%zu wrong words, closes failed: %d\n", bad, failed);
		return 1;
	}
	printf("ok\n");
	return 0;
}
