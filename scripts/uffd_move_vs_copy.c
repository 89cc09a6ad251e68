// Installing a 64 KiB chunk into a userfaultfd region: UFFDIO_COPY from a
// reused buffer (what uzswap does) against UFFDIO_MOVE of a staging range
// the data was written into (zero-copy for the data, but every page moved
// away must be faulted into the staging range again, and a move of pages
// of our own mm flushes the TLB of every CPU running it). Unless an
// argument is given, a second thread spins on CPU 1 so that those flushes
// have a CPU to reach, as a program's threads do.
//
//   cc -O2 -pthread -o uffd_move_vs_copy scripts/uffd_move_vs_copy.c
//   ./uffd_move_vs_copy            # with the spinning thread
//   ./uffd_move_vs_copy nospin     # alone
//
// Needs Linux 6.8+ (UFFD_FEATURE_MOVE) and the userfaultfd syscall (root,
// or vm.unprivileged_userfaultfd=1).
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#ifndef UFFDIO_MOVE
struct uffdio_move { __u64 dst, src, len, mode; __s64 move; };
#define _UFFDIO_MOVE (0x05)
#define UFFDIO_MOVE _IOWR(UFFDIO, _UFFDIO_MOVE, struct uffdio_move)
#define UFFD_FEATURE_MOVE (1<<10)
#endif
static volatile int stop;
static void *spin(void *a) { cpu_set_t s; CPU_ZERO(&s); CPU_SET(1,&s); sched_setaffinity(0,sizeof s,&s); volatile char *p=a; while(!stop) p[0]++; return 0; }
static double now(){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec/1e9;}
int main(int argc,char**argv){
  cpu_set_t s; CPU_ZERO(&s); CPU_SET(0,&s); sched_setaffinity(0,sizeof s,&s);
  int uffd=syscall(SYS_userfaultfd,O_CLOEXEC);
  struct uffdio_api api={.api=UFFD_API,.features=UFFD_FEATURE_MOVE}; if(ioctl(uffd,UFFDIO_API,&api)){perror("api");return 1;}
  size_t CH=65536, N=4096; size_t len=CH*N;
  char *dst=mmap(0,len,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE,-1,0);
  madvise(dst,len,MADV_NOHUGEPAGE);
  struct uffdio_register reg={.range={(uintptr_t)dst,len},.mode=UFFDIO_REGISTER_MODE_MISSING}; if(ioctl(uffd,UFFDIO_REGISTER,&reg)){perror("reg");return 1;}
  char *buf=malloc(CH); memset(buf,7,CH);
  char *stage=mmap(0,CH,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0); madvise(stage,CH,MADV_NOHUGEPAGE);
  char *hot=malloc(4096); pthread_t t; int sp=argc<2; if(sp) pthread_create(&t,0,spin,hot);
  usleep(10000);
  for(int round=0;round<3;round++){
  // COPY
  double t0=now();
  for(size_t i=0;i<N/2;i++){ memset(buf,(int)i,CH); struct uffdio_copy c={.dst=(uintptr_t)dst+i*CH,.src=(uintptr_t)buf,.len=CH,.mode=0}; if(ioctl(uffd,UFFDIO_COPY,&c)){perror("copy");return 1;} }
  double t1=now();
  // MOVE: populate staging, "decompress" into it, move
  for(size_t i=N/2;i<N;i++){ madvise(stage,CH,MADV_POPULATE_WRITE); memset(stage,(int)i,CH); struct uffdio_move m={.dst=(uintptr_t)dst+i*CH,.src=(uintptr_t)stage,.len=CH,.mode=0}; if(ioctl(uffd,UFFDIO_MOVE,&m)){perror("move");return 1;} }
  double t2=now();
  printf("copy %.2f us/chunk  move %.2f us/chunk\n",(t1-t0)/(N/2)*1e6,(t2-t1)/(N/2)*1e6);
  madvise(dst,len,MADV_DONTNEED);
  }
  stop=1; if(sp) pthread_join(t,0); return 0; }
