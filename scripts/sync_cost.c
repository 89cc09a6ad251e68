/* What glibc's synchronisation calls cost under uzswap run, on objects in
 * the heap (region memory): lock and unlock of an uncontended mutex,
 * pthread_cond_signal with no waiter, sem_post + sem_wait, a read lock and
 * unlock (each N times), and a condition-variable ping-pong between two
 * threads (N/100 rounds). Prints ns per call (us per round for the
 * ping-pong).
 * Build: cc -O1 -pthread -o synccost scripts/sync_cost.c
 * Run:   uzswap run --budget 1G --handler signal -- ./synccost [N] */
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
struct o { pthread_mutex_t m; pthread_cond_t c; sem_t s; pthread_rwlock_t rw; long turn; } *o;
static int rounds;
static void *pp(void *x) { long me = (long)x;
  for (int i = 0; i < rounds; i++) { pthread_mutex_lock(&o->m); while (o->turn != me) pthread_cond_wait(&o->c, &o->m);
    o->turn = !me; pthread_cond_signal(&o->c); pthread_mutex_unlock(&o->m); } return NULL; }
int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 10000000;
  o = malloc(sizeof *o); pthread_mutex_init(&o->m, NULL); pthread_cond_init(&o->c, NULL); sem_init(&o->s, 0, 0); pthread_rwlock_init(&o->rw, NULL);
  double t = now(); for (int i = 0; i < n; i++) { pthread_mutex_lock(&o->m); pthread_mutex_unlock(&o->m); }
  printf("mutex %.1f ns\n", (now() - t) / n * 1e9);
  t = now(); for (int i = 0; i < n; i++) pthread_cond_signal(&o->c);
  printf("cond_signal %.1f ns\n", (now() - t) / n * 1e9);
  t = now(); for (int i = 0; i < n; i++) { sem_post(&o->s); sem_wait(&o->s); }
  printf("sem %.1f ns\n", (now() - t) / n * 1e9);
  t = now(); for (int i = 0; i < n; i++) { pthread_rwlock_rdlock(&o->rw); pthread_rwlock_unlock(&o->rw); }
  printf("rwlock %.1f ns\n", (now() - t) / n * 1e9);
  rounds = n / 100; pthread_t a, b; t = now();
  pthread_create(&a, NULL, pp, (void *)0); pthread_create(&b, NULL, pp, (void *)1); pthread_join(a, NULL); pthread_join(b, NULL);
  printf("pingpong %.2f us\n", (now() - t) / rounds * 1e6);
  return 0; }
