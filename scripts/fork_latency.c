/* What a fork costs under uzswap run: fills MIB MiB (compressible, every
 * page distinct), forks N times; each child exits at once, or with TOUCH
 * first reads one word of every page. Prints the mean time of fork() in
 * the parent and of the child's life, and checks every word afterwards.
 * Build: cc -O2 -o forklat scripts/fork_latency.c
 * Run:   uzswap run --budget 64M -- ./forklat 1024 5 [1] */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  size_t mb=atoi(argv[1]); int n=atoi(argv[2]); int touch=argc>3?atoi(argv[3]):0;
  size_t len=mb<<20; uint64_t*a=mmap(0,len,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  for(size_t i=0;i<len/8;i++) a[i]=i/64*0x9e3779b97f4a7c15ULL;
  double tf=0, tw=0;
  for(int k=0;k<n;k++){
    double t0=now(); pid_t p=fork(); double t1=now();
    if(p==0){ uint64_t s=0; if(touch) for(size_t i=0;i<len/8;i+=512) s+=a[i]; _exit(s==1?3:0);}
    int st; waitpid(p,&st,0); double t2=now(); tf+=t1-t0; tw+=t2-t1;
    if(!WIFEXITED(st)||WEXITSTATUS(st)) {printf("child failed\n");return 1;}
  }
  uint64_t bad=0; for(size_t i=0;i<len/8;i++) bad+= a[i]!=i/64*0x9e3779b97f4a7c15ULL;
  printf("fork %.2f ms child %.2f ms bad %lu\n", tf/n*1e3, tw/n*1e3, bad);
  return 0;
}
