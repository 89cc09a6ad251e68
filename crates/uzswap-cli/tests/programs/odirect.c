/* Direct reads (O_DIRECT) into heap buffers while another thread streams
 * through a larger heap, so that the evictor runs all the time. A direct
 * read has the device write the buffer's pages by DMA, past the page
 * tables: an eviction of the buffer's chunk during the read would store
 * its old bytes and the read's data would be lost. Every read is checked,
 * and a buffer read before is checked again later.
 *
 * usage: odirect DIR BUFFERS READS STREAM_MIB
 * prints "ok READS", "skip: WHY" (no O_DIRECT on DIR's file system), or
 * says what was lost and exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLK (64 << 10)
#define FILE_BLOCKS 256

static volatile int stop;
static char *stream;
static size_t stream_len;

static void *streamer(void *arg)
{
	(void)arg;
	unsigned long x = 0;
	while (!stop)
		for (size_t i = 0; i < stream_len && !stop; i += 4096)
			stream[i] = (char)x++;
	return NULL;
}

/* Block k's bytes: its number and each word's offset. */
static void block(char *b, int k)
{
	for (int i = 0; i < BLK; i += 8)
		*(uint64_t *)(b + i) = ((uint64_t)k << 32) | (unsigned)i;
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: odirect DIR BUFFERS READS STREAM_MIB\n");
		return 2;
	}
	int nbuf = atoi(argv[2]), reads = atoi(argv[3]);
	stream_len = (size_t)atoi(argv[4]) << 20;
	char path[4096];
	snprintf(path, sizeof path, "%s/odirect.data", argv[1]);
	int w = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
	static char tmp[BLK];
	for (int k = 0; k < FILE_BLOCKS; k++) {
		block(tmp, k);
		if (w < 0 || write(w, tmp, BLK) != BLK) {
			perror("writing the file");
			return 2;
		}
	}
	fsync(w);
	close(w);
	int fd = open(path, O_RDONLY | O_DIRECT);
	if (fd < 0) {
		printf("skip: O_DIRECT: %s\n", strerror(errno));
		unlink(path);
		return 0;
	}
	char **buf = malloc(nbuf * sizeof *buf);
	int *holds = malloc(nbuf * sizeof *holds);
	for (int b = 0; b < nbuf; b++) {
		if (posix_memalign((void **)&buf[b], 4096, BLK))
			return 2;
		block(buf[b], 100000 + b);
		holds[b] = 100000 + b;
	}
	stream = malloc(stream_len);
	memset(stream, 1, stream_len);
	pthread_t t;
	pthread_create(&t, NULL, streamer, NULL);
	long wrong = 0, wrong_later = 0;
	unsigned long x = 88172645463325252ull;
	for (int r = 0; r < reads; r++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		int b = x % nbuf, k = (x >> 20) % FILE_BLOCKS;
		ssize_t got = pread(fd, buf[b], BLK, (off_t)k * BLK);
		if (got != BLK) {
			if (r == 0 && got < 0 && errno == EINVAL) {
				printf("skip: O_DIRECT read: %s\n", strerror(errno));
				unlink(path);
				return 0;
			}
			fprintf(stderr, "read %d: %zd (%s)\n", r, got, strerror(errno));
			return 1;
		}
		block(tmp, k);
		if (memcmp(buf[b], tmp, BLK)) {
			if (wrong++ < 3)
				fprintf(stderr, "read %d into buffer %d: block %d wanted, block %d there\n",
					r, b, k, (int)(*(uint64_t *)buf[b] >> 32));
		}
		holds[b] = k;
		int c = (x >> 40) % nbuf;
		block(tmp, holds[c]);
		if (memcmp(buf[c], tmp, BLK))
			wrong_later++;
	}
	stop = 1;
	pthread_join(t, NULL);
	unlink(path);
	if (wrong || wrong_later) {
		printf("lost: %ld of %d reads wrong, %ld later checks wrong\n", wrong, reads, wrong_later);
		return 1;
	}
	printf("ok %d\n", reads);
	return 0;
}
