/* System calls that read or write a structure, an address or a pair of
 * descriptors in the caller's memory, each given memory that was evicted
 * (written, then pushed out by 64 MiB written under a 16 MiB budget) or
 * never touched (fresh heap memory: no page until written). Each structure
 * sits in a 64 KiB chunk of its own, so that a call bringing one in leaves
 * the others evicted. Every result is checked against the same call made
 * on the stack. Prints "ok syscall_structs", or the first call that
 * failed or returned something else, and exits 1. Where the kernel's
 * faults inside system calls are not served (user mode only, signal
 * mode), each of these failed with EFAULT. Then the calls that take a
 * path, their names and values in evicted memory, in a directory of their
 * own under /tmp; ioctl and fcntl requests, their structures evicted,
 * between the two; then thread names, capabilities, mincore, copy_file_range,
 * signalfd, eventfd_read, a memfd's name, timers, signal masks, a signal waited for, a splice's offset,
 * CPU-time clocks, thread affinity, scheduling parameters, process_vm_readv/writev, vmsplice,
 * futimes/lutimes/futimesat, mq_notify,
 * System V and POSIX messages and semaphores. Usage: syscall_structs EXE (a readable file for
 * sendfile: the program itself). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <net/if.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <sys/inotify.h>
#include <sys/shm.h>
#include <grp.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/timerfd.h>
#include <sys/times.h>
#include <mqueue.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <termios.h>
#include <time.h>
#include <utime.h>
#include <unistd.h>

#define CHUNK 65536
static char *area, *fresh;
static int next_slot, next_fresh;

/* A chunk of its own in the area written before the evicting pass. */
static void *slot(void) { return area + CHUNK * next_slot++ + 64; }
/* A chunk of its own never written. */
static void *untouched(void) { return fresh + CHUNK * next_fresh++ + 64; }

static int fail(const char *what) {
    printf("%s: %s\n", what, errno ? strerror(errno) : "wrong result");
    return 1;
}
#define CHECK(what, cond) do { errno = 0; if (!(cond)) return fail(what); } while (0)

static void evict(void) {
    static char *big;
    static size_t n = 64 << 20;
    static int round;
    if (!big) big = malloc(n);
    round++;
    for (size_t i = 0; i < n; i += 64) big[i] = (char)(i + round);
}

/* Thread names (prctl, pthread), capabilities, saved ids, a round-robin
 * interval, supplementary groups, epoll_pwait2's events, shmctl's and msgctl's
 * structures, mincore's vector, copy_file_range's
 * offsets, signalfd's mask, an eventfd's count, a memfd's name, timers, signal masks, a signal waited for, a splice's offset, System V and POSIX
 * messages and semaphores: each structure or message in a chunk of its
 * own, evicted before its call. Where the kernel lacks System V IPC or
 * POSIX message queues (ENOSYS) that part is left out. */
/* glibc's own, not in its headers. */
int capget(cap_user_header_t, cap_user_data_t);

static void *sleeper(void *arg) {
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

static int timers_and_messages(void) {
    char *a = malloc(CHUNK * 64 + CHUNK);
    a = (char *)(((uintptr_t)a + CHUNK - 1) & ~(uintptr_t)(CHUNK - 1));
    memset(a, 0, CHUNK * 64);
    int n = 0;
#define MORE(T) ((T *)(a + CHUNK * n++ + 64))
    struct tms *t = MORE(struct tms);
    struct itimerval *iv = MORE(struct itimerval), *ov = MORE(struct itimerval);
    struct itimerspec *its = MORE(struct itimerspec), *ots = MORE(struct itimerspec);
    loff_t *off = MORE(loff_t);
    sigset_t *set = MORE(sigset_t);
    siginfo_t *si = MORE(siginfo_t);
    struct timespec *ts = MORE(struct timespec);
    struct msgbuf_ { long mtype; char text[64]; } *msg = MORE(struct msgbuf_), *got = MORE(struct msgbuf_);
    struct sembuf *sb = MORE(struct sembuf);
    char *mq_out = MORE(char), *mq_in = MORE(char);
    sigset_t *mask = MORE(sigset_t), *was = MORE(sigset_t);
    char *comm = MORE(char), *comm_out = MORE(char), *other = MORE(char), *other_out = MORE(char);
    char *memfd_name = MORE(char), *mq_name = MORE(char);
    struct sigevent *sev = MORE(struct sigevent);
    timer_t *made = MORE(timer_t);
    struct mq_attr *mq_at = MORE(struct mq_attr), *mq_now = MORE(struct mq_attr);
    struct __user_cap_header_struct *cap_h = MORE(struct __user_cap_header_struct);
    struct __user_cap_data_struct *cap_d = MORE(struct __user_cap_data_struct);
    unsigned char *vec = MORE(unsigned char);
    loff_t *cin = MORE(loff_t), *cout = MORE(loff_t);
    sigset_t *sfd_mask = MORE(sigset_t);
    eventfd_t *count = MORE(eventfd_t);
    struct msqid_ds *mq_ds = MORE(struct msqid_ds);
    struct shmid_ds *shm_ds = MORE(struct shmid_ds);
    uid_t *ru = MORE(uid_t), *eu = MORE(uid_t), *su = MORE(uid_t);
    struct timespec *rr = MORE(struct timespec);
    struct epoll_event *evs = MORE(struct epoll_event);
    gid_t *gl = MORE(gid_t);
    struct timespec *cpu = MORE(struct timespec), *res = MORE(struct timespec);
    cpu_set_t *aff = MORE(cpu_set_t), *aff_out = MORE(cpu_set_t);
    struct sched_param *sp = MORE(struct sched_param), *sp_out = MORE(struct sched_param);
    char *vm_dst = MORE(char), *vm_src = MORE(char);
    struct iovec *vm_iov = MORE(struct iovec), *vm_remote = MORE(struct iovec);
    char *spliced = MORE(char);
    struct iovec *sp_iov = MORE(struct iovec);
    struct sigevent *mq_sev = MORE(struct sigevent);
#undef MORE
    iv->it_value.tv_sec = 100;
    its->it_value.tv_sec = 100;
    sigemptyset(set);
    sigaddset(set, SIGUSR1);
    ts->tv_sec = 1;
    msg->mtype = 1;
    strcpy(msg->text, "hello");
    sb->sem_op = 1;
    strcpy(mq_in, "mq-hello");
    strcpy(comm, "uz-structs");
    strcpy(other, "uz-other");
    evict();
    CHECK("prctl PR_SET_NAME", prctl(PR_SET_NAME, comm) == 0);
    evict();
    CHECK("prctl PR_GET_NAME", prctl(PR_GET_NAME, comm_out) == 0 && !strcmp(comm_out, "uz-structs"));
    pthread_t th;
    CHECK("pthread_create", pthread_create(&th, NULL, sleeper, NULL) == 0);
    evict();
    CHECK("pthread_setname_np", pthread_setname_np(th, other) == 0);
    evict();
    CHECK("pthread_getname_np", pthread_getname_np(th, other_out, 16) == 0 && !strcmp(other_out, "uz-other"));
    pthread_cancel(th);
    pthread_join(th, NULL);
    evict();
    CHECK("times", times(t) != (clock_t)-1 && t->tms_utime + t->tms_stime > 0);
    evict();
    CHECK("setitimer", setitimer(ITIMER_VIRTUAL, iv, ov) == 0);
    evict();
    CHECK("getitimer", getitimer(ITIMER_VIRTUAL, ov) == 0 && ov->it_value.tv_sec > 0);
    iv->it_value.tv_sec = 0;
    setitimer(ITIMER_VIRTUAL, iv, NULL);
    int tfd = timerfd_create(CLOCK_MONOTONIC, 0);
    evict();
    CHECK("timerfd_settime", timerfd_settime(tfd, 0, its, ots) == 0);
    evict();
    CHECK("timerfd_gettime", timerfd_gettime(tfd, ots) == 0 && ots->it_value.tv_sec > 0);
    close(tfd);
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    CHECK("capget", syscall(SYS_capget, &h, d) == 0);
    cap_h->version = _LINUX_CAPABILITY_VERSION_3;
    evict();
    CHECK("capget", capget(cap_h, cap_d) == 0 && !memcmp(cap_d, d, sizeof d));
    evict();
    CHECK("mincore", mincore(a, 4 * CHUNK, vec) == 0);
    FILE *src = tmpfile(), *dst = tmpfile();
    fputs("0123456789", src);
    fflush(src);
    *cin = 3;
    evict();
    CHECK("copy_file_range", copy_file_range(fileno(src), cin, fileno(dst), cout, 4, 0) == 4 &&
                                 *cin == 7 && *cout == 4);
    fclose(src);
    fclose(dst);
    sigemptyset(sfd_mask);
    sigaddset(sfd_mask, SIGUSR2);
    evict();
    int sfd = signalfd(-1, sfd_mask, 0);
    CHECK("signalfd", sfd >= 0);
    close(sfd);
    int efd = eventfd(5, 0);
    evict();
    CHECK("eventfd_read", eventfd_read(efd, count) == 0 && *count == 5);
    close(efd);
    evict();
    CHECK("getresuid", getresuid(ru, eu, su) == 0 && *ru == getuid() && *eu == geteuid());
    evict();
    CHECK("sched_rr_get_interval", sched_rr_get_interval(0, rr) == 0);
    *gl = getgid();
    evict();
    /* glibc makes it in every thread, uzswap's too: the list must not be
     * read there from region memory. An unprivileged user is refused first. */
    errno = 0;
    int sg = setgroups(1, gl), sg_err = errno;
    CHECK("setgroups", sg == 0 || sg_err == EPERM);
    /* CPU-time clocks are read by a system call (the others in the vDSO,
     * in user space). */
    evict();
    CHECK("clock_gettime CPUTIME", clock_gettime(CLOCK_PROCESS_CPUTIME_ID, cpu) == 0 &&
                                       cpu->tv_sec + cpu->tv_nsec > 0);
    evict();
    CHECK("clock_getres CPUTIME", clock_getres(CLOCK_THREAD_CPUTIME_ID, res) == 0 &&
                                      res->tv_sec + res->tv_nsec > 0);
    cpu_set_t here;
    CHECK("sched_getaffinity", sched_getaffinity(0, sizeof here, &here) == 0);
    evict();
    CHECK("pthread_getaffinity_np", pthread_getaffinity_np(pthread_self(), sizeof *aff, aff) == 0 &&
                                        CPU_EQUAL(aff, &here));
    *aff_out = here;
    evict();
    CHECK("pthread_setaffinity_np", pthread_setaffinity_np(pthread_self(), sizeof *aff_out, aff_out) == 0);
    sp->sched_priority = 0;
    evict();
    CHECK("sched_setscheduler", sched_setscheduler(0, SCHED_OTHER, sp) == 0);
    evict();
    CHECK("sched_setparam", sched_setparam(0, sp) == 0);
    evict();
    CHECK("sched_getparam", sched_getparam(0, sp_out) == 0 && sp_out->sched_priority == 0);
    /* process_vm_readv/writev on this process: the local buffers and both
     * vectors in evicted chunks. */
    strcpy(vm_src, "vm-bytes");
    vm_iov->iov_base = vm_dst;
    vm_iov->iov_len = 9;
    vm_remote->iov_base = vm_src;
    vm_remote->iov_len = 9;
    evict();
    CHECK("process_vm_readv", process_vm_readv(getpid(), vm_iov, 1, vm_remote, 1, 0) == 9 &&
                                  !strcmp(vm_dst, "vm-bytes"));
    strcpy(vm_src, "vm-other");
    vm_iov->iov_base = vm_src;
    vm_remote->iov_base = vm_dst;
    evict();
    CHECK("process_vm_writev", process_vm_writev(getpid(), vm_iov, 1, vm_remote, 1, 0) == 9 &&
                                   !strcmp(vm_dst, "vm-other"));
    int vp[2];
    CHECK("pipe", pipe(vp) == 0);
    strcpy(spliced, "spliced");
    sp_iov->iov_base = spliced;
    sp_iov->iov_len = 8;
    evict();
    char back[8];
    CHECK("vmsplice", vmsplice(vp[1], sp_iov, 1, 0) == 8 && read(vp[0], back, 8) == 8 &&
                          !strcmp(back, "spliced"));
    close(vp[0]);
    close(vp[1]);
    int ep = epoll_create1(0), ev_pipe[2];
    CHECK("pipe", pipe(ev_pipe) == 0);
    struct epoll_event want = {.events = EPOLLIN, .data.u32 = 77};
    epoll_ctl(ep, EPOLL_CTL_ADD, ev_pipe[0], &want);
    write(ev_pipe[1], "x", 1);
    evict();
    CHECK("epoll_pwait2", epoll_pwait2(ep, evs, 1, ts, NULL) == 1 && evs->data.u32 == 77);
    close(ep);
    close(ev_pipe[0]);
    close(ev_pipe[1]);
    int shm = shmget(IPC_PRIVATE, 4096, 0600);
    if (shm >= 0) {
        evict();
        CHECK("shmctl IPC_STAT", shmctl(shm, IPC_STAT, shm_ds) == 0 && shm_ds->shm_segsz == 4096);
        shmctl(shm, IPC_RMID, NULL);
    } else {
        CHECK("shmget", errno == ENOSYS);
    }
    sev->sigev_notify = SIGEV_NONE;
    evict();
    CHECK("timer_create", timer_create(CLOCK_MONOTONIC, sev, made) == 0);
    timer_t tm = *made;
    strcpy(memfd_name, "uz-structs");
    evict();
    int mfd = memfd_create(memfd_name, 0);
    CHECK("memfd_create", mfd >= 0);
    close(mfd);
    evict();
    CHECK("timer_settime", timer_settime(tm, 0, its, ots) == 0);
    evict();
    CHECK("timer_gettime", timer_gettime(tm, ots) == 0 && ots->it_value.tv_sec > 0);
    timer_delete(tm);
    int q[2];
    CHECK("pipe", pipe(q) == 0);
    FILE *tmp = tmpfile();
    fputs("0123456789", tmp);
    fflush(tmp);
    *off = 2;
    evict();
    CHECK("splice", splice(fileno(tmp), off, q[1], NULL, 4, 0) == 4 && *off == 6);
    fclose(tmp);
    close(q[0]);
    close(q[1]);
    sigemptyset(mask);
    sigaddset(mask, SIGUSR2);
    evict();
    CHECK("sigprocmask", sigprocmask(SIG_BLOCK, mask, was) == 0 && !sigismember(was, SIGUSR2));
    evict();
    CHECK("pthread_sigmask", pthread_sigmask(SIG_UNBLOCK, mask, was) == 0 && sigismember(was, SIGUSR2));
    sigprocmask(SIG_BLOCK, set, NULL);
    raise(SIGUSR1);
    evict();
    CHECK("sigtimedwait", sigtimedwait(set, si, ts) == SIGUSR1 && si->si_signo == SIGUSR1);
    int mq = msgget(IPC_PRIVATE, 0600);
    if (mq >= 0) {
        evict();
        CHECK("msgsnd", msgsnd(mq, msg, 6, 0) == 0);
        evict();
        CHECK("msgrcv", msgrcv(mq, got, 64, 0, IPC_NOWAIT) == 6 && !strcmp(got->text, "hello"));
        evict();
        CHECK("msgctl IPC_STAT", msgctl(mq, IPC_STAT, mq_ds) == 0 && mq_ds->msg_qnum == 0);
        msgctl(mq, IPC_RMID, NULL);
        int sem = semget(IPC_PRIVATE, 1, 0600);
        CHECK("semget", sem >= 0);
        evict();
        CHECK("semop", semop(sem, sb, 1) == 0 && semctl(sem, 0, GETVAL) == 1);
        semctl(sem, 0, IPC_RMID);
    } else {
        CHECK("msgget", errno == ENOSYS);
    }
    snprintf(mq_name, 64, "/uzswap-structs-%d", (int)getpid());
    mq_at->mq_maxmsg = 4;
    mq_at->mq_msgsize = 256;
    evict();
    mqd_t m = mq_open(mq_name, O_CREAT | O_RDWR | O_NONBLOCK, 0600, mq_at);
    if (m != (mqd_t)-1) {
        evict();
        CHECK("mq_getattr", mq_getattr(m, mq_now) == 0 && mq_now->mq_msgsize == 256);
        mq_sev->sigev_notify = SIGEV_NONE;
        evict();
        CHECK("mq_notify", mq_notify(m, mq_sev) == 0 && mq_notify(m, NULL) == 0);
        struct mq_attr at = *mq_now;
        evict();
        CHECK("mq_send", mq_send(m, mq_in, 9, 0) == 0);
        evict();
        CHECK("mq_receive", at.mq_msgsize <= CHUNK - 64 &&
                                mq_receive(m, mq_out, at.mq_msgsize, NULL) == 9 && !strcmp(mq_out, "mq-hello"));
        mq_close(m);
        mq_unlink(mq_name);
    } else {
        CHECK("mq_open", errno == ENOSYS);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: syscall_structs EXE\n"); return 2; }
    area = malloc(CHUNK * 64 + CHUNK);
    fresh = malloc(CHUNK * 16 + CHUNK);
    area = (char *)(((uintptr_t)area + CHUNK - 1) & ~(uintptr_t)(CHUNK - 1));
    fresh = (char *)(((uintptr_t)fresh + CHUNK - 1) & ~(uintptr_t)(CHUNK - 1));
    memset(area, 0, CHUNK * 64);

    struct sockaddr_in *bind_sa = slot(), *name_sa = slot(), *conn_sa = slot(), *acc_sa = slot(),
                       *peer_sa = slot();
    socklen_t *name_len = slot(), *acc_len = slot(), *peer_len = slot(), *opt_len = slot();
    int *one = slot(), *opt = slot(), *sv = slot(), *p2 = slot(), *status = slot();
    struct rusage *ru = slot(), *ru2 = slot();
    struct statfs *sf = slot(), *fsf = slot();
    struct statvfs *svf = slot();
    struct rlimit *rl_set = slot(), *rl_old = slot();
    struct timespec *ts = slot(), *rem = slot(), *times = slot();
    cpu_set_t *mask = slot();
    struct epoll_event *ev = slot();
    off_t *off = slot();
    gid_t *groups = slot();
    struct sysinfo *si = slot();
    int *fds = untouched();
    struct utsname *u = untouched();
    struct rlimit *rl = untouched();

    bind_sa->sin_family = AF_INET;
    bind_sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    *name_len = *acc_len = *peer_len = sizeof(struct sockaddr_in);
    *opt_len = sizeof(int);
    *one = 1;
    struct rlimit now;
    getrlimit(RLIMIT_NOFILE, &now);
    *rl_set = now;
    ts->tv_nsec = 1000;
    times[0].tv_nsec = times[1].tv_nsec = UTIME_OMIT;
    ev->events = EPOLLIN;
    evict();

    int l = socket(AF_INET, SOCK_STREAM, 0);
    CHECK("bind", bind(l, (struct sockaddr *)bind_sa, sizeof *bind_sa) == 0);
    CHECK("listen", listen(l, 4) == 0);
    CHECK("getsockname", getsockname(l, (struct sockaddr *)name_sa, name_len) == 0 && name_sa->sin_port != 0);
    *conn_sa = *name_sa;
    evict();
    int c = socket(AF_INET, SOCK_STREAM, 0);
    CHECK("connect", connect(c, (struct sockaddr *)conn_sa, sizeof *conn_sa) == 0);
    int a = accept(l, (struct sockaddr *)acc_sa, acc_len);
    CHECK("accept", a >= 0 && acc_sa->sin_family == AF_INET && *acc_len == sizeof *acc_sa);
    CHECK("getpeername", getpeername(c, (struct sockaddr *)peer_sa, peer_len) == 0 &&
                             peer_sa->sin_port == name_sa->sin_port);
    CHECK("setsockopt", setsockopt(c, SOL_SOCKET, SO_KEEPALIVE, one, sizeof *one) == 0);
    CHECK("getsockopt", getsockopt(c, SOL_SOCKET, SO_KEEPALIVE, opt, opt_len) == 0 && *opt == 1);
    evict();

    char b = 0;
    CHECK("pipe", pipe(fds) == 0 && write(fds[1], "p", 1) == 1 && read(fds[0], &b, 1) == 1 && b == 'p');
    CHECK("pipe2", pipe2(p2, O_CLOEXEC) == 0 && write(p2[1], "q", 1) == 1 && read(p2[0], &b, 1) == 1 && b == 'q');
    CHECK("socketpair", socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0 && write(sv[0], "s", 1) == 1 &&
                            read(sv[1], &b, 1) == 1 && b == 's');
    int ep = epoll_create1(0);
    CHECK("epoll_ctl", epoll_ctl(ep, EPOLL_CTL_ADD, fds[0], ev) == 0);
    evict();

    pid_t pid = fork();
    if (pid == 0) _exit(7);
    CHECK("waitpid", waitpid(pid, status, 0) == pid && WIFEXITED(*status) && WEXITSTATUS(*status) == 7);
    pid = fork();
    if (pid == 0) _exit(9);
    CHECK("wait4", wait4(pid, status, 0, ru) == pid && WEXITSTATUS(*status) == 9);
    CHECK("getrusage", getrusage(RUSAGE_SELF, ru2) == 0 && ru2->ru_maxrss > 0);
    evict();

    struct utsname us;
    uname(&us);
    CHECK("uname", uname(u) == 0 && !strcmp(u->sysname, us.sysname) && !strcmp(u->release, us.release));
    CHECK("statfs", statfs("/", sf) == 0 && sf->f_bsize > 0);
    CHECK("fstatfs", fstatfs(l, fsf) == 0 && fsf->f_type != 0);
    CHECK("statvfs", statvfs("/", svf) == 0 && svf->f_bsize > 0);
    CHECK("getrlimit", getrlimit(RLIMIT_NOFILE, rl) == 0 && rl->rlim_cur == now.rlim_cur);
    CHECK("setrlimit", setrlimit(RLIMIT_NOFILE, rl_set) == 0);
    CHECK("prlimit", prlimit(0, RLIMIT_NOFILE, NULL, rl_old) == 0 && rl_old->rlim_max == now.rlim_max);
    CHECK("sysinfo", sysinfo(si) == 0 && si->uptime > 0);
    evict();

    CHECK("nanosleep", nanosleep(ts, rem) == 0);
    cpu_set_t m;
    sched_getaffinity(0, sizeof m, &m);
    CHECK("sched_getaffinity", sched_getaffinity(0, sizeof *mask, mask) == 0 && CPU_COUNT(mask) == CPU_COUNT(&m));
    int ng = getgroups(0, NULL);
    CHECK("getgroups", getgroups(ng, groups) == ng);
    int f = open(argv[1], O_RDONLY);
    *off = 0;
    evict();
    CHECK("sendfile", f >= 0 && sendfile(p2[1], f, off, 4) == 4 && *off == 4);
    CHECK("utimensat", utimensat(AT_FDCWD, argv[1], times, 0) == 0);

    /* ioctl and fcntl: a request's structure in evicted memory, sized by
     * the request (encoded, or legacy), and the buffer SIOCGIFCONF's
     * structure names. */
    int *nread = slot(), *ptn = slot();
    struct winsize *ws_set = slot(), *ws = slot();
    struct flock *lk = slot(), *lk_get = slot();
    struct f_owner_ex *owner = slot();
    struct ifconf *ifc = slot();
    char *ifbuf = slot();
    struct termios *tio = slot();
    ws_set->ws_row = 33;
    ws_set->ws_col = 101;
    lk->l_type = F_RDLCK;
    lk->l_whence = SEEK_SET;
    lk->l_len = 1;
    *lk_get = *lk;
    ifc->ifc_len = 1024;
    ifc->ifc_buf = ifbuf;
    int pm = posix_openpt(O_RDWR | O_NOCTTY);
    CHECK("posix_openpt", pm >= 0 && grantpt(pm) == 0 && unlockpt(pm) == 0);
    unsigned int n_now = 0;
    CHECK("TIOCGPTN on the stack", ioctl(pm, TIOCGPTN, &n_now) == 0);
    int ps = open(ptsname(pm), O_RDWR | O_NOCTTY);
    CHECK("open the pty", ps >= 0);
    struct termios t_now;
    CHECK("TCGETS on the stack", ioctl(ps, TCGETS, &t_now) == 0);
    int is = socket(AF_INET, SOCK_DGRAM, 0);
    evict();
    CHECK("ioctl FIONREAD", ioctl(p2[0], FIONREAD, nread) == 0 && *nread == 4);
    CHECK("ioctl TIOCGPTN", ioctl(pm, TIOCGPTN, ptn) == 0 && (unsigned)*ptn == n_now);
    CHECK("ioctl TIOCSWINSZ", ioctl(ps, TIOCSWINSZ, ws_set) == 0);
    CHECK("ioctl TIOCGWINSZ", ioctl(ps, TIOCGWINSZ, ws) == 0 && ws->ws_row == 33 && ws->ws_col == 101);
    CHECK("ioctl TCGETS", ioctl(ps, TCGETS, tio) == 0 && tio->c_lflag == t_now.c_lflag);
    CHECK("ioctl SIOCGIFCONF", ioctl(is, SIOCGIFCONF, ifc) == 0 && ifc->ifc_len > 0 &&
                                   ifc->ifc_len % sizeof(struct ifreq) == 0 &&
                                   ((struct ifreq *)ifbuf)->ifr_name[0] != 0);
    CHECK("fcntl F_SETLK", fcntl(f, F_SETLK, lk) == 0);
    CHECK("fcntl F_GETLK", fcntl(f, F_GETLK, lk_get) == 0 && lk_get->l_type == F_UNLCK);
    CHECK("fcntl F_GETOWN_EX", fcntl(f, F_GETOWN_EX, owner) == 0);
    close(is);
    close(ps);
    close(pm);

    /* Paths, attribute names and values. */
    char *dir = slot(), *file = slot(), *fifo = slot(), *hard = slot(), *sym = slot(),
         *xname = slot(), *xval = slot(), *list = slot(), *entropy = slot();
    struct timeval *tv = slot();
    struct utimbuf *ub = slot();
    strcpy(dir, "/tmp/uzswap-structs-XXXXXX");
    CHECK("mkdtemp", mkdtemp(dir) != NULL);
    snprintf(file, 128, "%s/file", dir);
    snprintf(fifo, 128, "%s/fifo", dir);
    snprintf(hard, 128, "%s/hard", dir);
    snprintf(sym, 128, "%s/sym", dir);
    strcpy(xname, "user.uzswap");
    strcpy(xval, "value");
    int fd = open(file, O_CREAT | O_WRONLY, 0600);
    CHECK("open", fd >= 0);
    gettimeofday(&tv[0], NULL);
    tv[1] = tv[0];
    ub->actime = ub->modtime = tv[0].tv_sec;
    int in = inotify_init1(0);
    evict();
    CHECK("chown", chown(file, getuid(), getgid()) == 0);
    CHECK("lchown", lchown(file, getuid(), getgid()) == 0);
    CHECK("fchownat", fchownat(AT_FDCWD, file, getuid(), getgid(), 0) == 0);
    CHECK("fchmodat", fchmodat(AT_FDCWD, file, 0640, 0) == 0);
    CHECK("linkat", linkat(AT_FDCWD, file, AT_FDCWD, hard, 0) == 0);
    CHECK("symlinkat", symlinkat(file, AT_FDCWD, sym) == 0);
    CHECK("mkfifo", mkfifo(fifo, 0600) == 0);
    CHECK("utimes", utimes(file, tv) == 0);
    CHECK("utime", utime(file, ub) == 0);
    evict();
    CHECK("futimes", futimes(fd, tv) == 0);
    evict();
    CHECK("lutimes", lutimes(file, tv) == 0);
    evict();
    CHECK("futimesat", futimesat(AT_FDCWD, file, tv) == 0);
    CHECK("inotify_add_watch", inotify_add_watch(in, dir, IN_CREATE) >= 0);
    /* The file system may not take user attributes: any answer but EFAULT. */
    errno = 0;
    int set = setxattr(file, xname, xval, 5, 0);
    CHECK("setxattr", set == 0 || errno != EFAULT);
    errno = 0;
    ssize_t got = getxattr(file, xname, list, 64);
    CHECK("getxattr", set != 0 ? errno != EFAULT : got == 5 && !memcmp(list, "value", 5));
    errno = 0;
    CHECK("listxattr", listxattr(file, list, 256) >= 0 || errno != EFAULT);
    CHECK("getentropy", getentropy(entropy, 32) == 0);
    unlink(sym);
    unlink(hard);
    unlink(fifo);
    unlink(file);
    rmdir(dir);
    if (timers_and_messages())
        return 1;
    printf("ok syscall_structs\n");
    return 0;
}
