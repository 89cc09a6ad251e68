// C++'s synchronisation on heap objects that a third thread pages out
// over and over (MADV_PAGEOUT): std::mutex and std::condition_variable,
// std::shared_mutex, std::counting_semaphore, std::barrier, and C++20's
// atomic wait and notify (libstdc++ waits on a futex through syscall(2)).
// Two threads pass turns through them for ROUNDS rounds. Where the
// kernel's faults are not served, a wait's futex call on an evicted page
// failed with EFAULT, and libstdc++ threw std::system_error ("Bad
// address") or glibc ended the process. Prints "ok cxx_waits".
// Usage: cxx_waits ROUNDS
#include <atomic>
#include <barrier>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <latch>
#include <mutex>
#include <semaphore>
#include <shared_mutex>
#include <thread>
#include <sys/mman.h>
struct Obj {
  std::mutex m; std::condition_variable c; std::shared_mutex rw;
  std::atomic<int> turn{0}; std::counting_semaphore<2> a{0}, b{0};
  long shared = 0, written = 0; std::atomic<int> flag{0};
};
int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 20000;
  char *block = (char *)malloc(1 << 20);
  void *at = (void *)(((unsigned long)block + 65535) & ~65535UL);
  Obj *o = new (at) Obj;
  std::atomic<bool> done{false};
  std::barrier bar(2);
  std::thread pager([&] { while (!done) madvise(at, 65536, MADV_PAGEOUT); });
  auto side = [&](int me) {
    for (int i = 0; i < rounds; i++) {
      if (me) { o->a.release(); o->b.acquire(); } else { o->a.acquire(); o->b.release(); }
      { std::unique_lock l(o->m); o->c.wait(l, [&] { return o->turn.load() == me; }); o->turn = !me; o->shared++; o->c.notify_all(); }
      if (me) { std::unique_lock w(o->rw); o->written++; } else { std::shared_lock r(o->rw); (void)o->written; }
      // C++20 atomic wait/notify (a futex through syscall(2))
      if (me) { o->flag.store(i + 1); o->flag.notify_one(); } else { int v; while ((v = o->flag.load()) < i + 1) o->flag.wait(v); }
      if (i % 64 == 0) bar.arrive_and_wait();
    }
  };
  std::thread t0(side, 0), t1(side, 1);
  t0.join(); t1.join(); done = true; pager.join();
  bool ok = o->shared == 2L * rounds && o->written == rounds;
  std::printf("%s cxx_waits\n", ok ? "ok" : "BAD");
  return !ok;
}
