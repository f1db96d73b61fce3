"""The local sandbox's seccomp filter: default deny, in the spirit of the container runtimes'
default profiles, compiled by libseccomp (Debian's ``python3-seccomp``) and handed to bwrap.

Every system call not named here fails with ``EPERM``. Among those refused: the kernel keyring
(``keyctl``, ``add_key``, ``request_key``), new namespaces (``unshare``, ``setns``, and ``clone``
with a namespace flag; ``clone3`` answers ``ENOSYS`` so that the C library falls back to
``clone``, whose flags the filter can read), ``io_uring``, ``AF_VSOCK`` sockets, ``bpf``,
``perf_event_open``, ``ptrace``, ``process_vm_readv``/``writev``, ``userfaultfd``, mounts, module
loading, clocks, swap and reboot. A system call of another ABI (32-bit calls from a 64-bit
process) kills the process (libseccomp's default for a foreign architecture).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile

ALLOWED = tuple(
    """
    accept accept4 access alarm arch_prctl bind brk cachestat capget capset chdir chmod chown
    clock_getres clock_gettime clock_nanosleep close close_range connect copy_file_range creat
    dup dup2 dup3 epoll_create epoll_create1 epoll_ctl epoll_pwait epoll_pwait2 epoll_wait
    eventfd eventfd2 execve execveat exit exit_group faccessat faccessat2 fadvise64 fallocate
    fchdir fchmod fchmodat fchmodat2 fchown fchownat fcntl fdatasync fgetxattr flistxattr flock
    fork fremovexattr fsetxattr fstat fstatfs fsync ftruncate futex futex_requeue futex_wait
    futex_waitv futex_wake futimesat getcpu getcwd getdents getdents64 getegid geteuid getgid
    getgroups getitimer getpeername getpgid getpgrp getpid getppid getpriority getrandom
    getresgid getresuid getrlimit get_robust_list getrusage getsid getsockname getsockopt
    gettid gettimeofday getuid getxattr inotify_add_watch inotify_init inotify_init1
    inotify_rm_watch io_cancel io_destroy io_getevents io_pgetevents io_setup io_submit ioctl
    ioprio_get ioprio_set kill landlock_add_rule landlock_create_ruleset landlock_restrict_self
    lchown lgetxattr link linkat listen listxattr llistxattr lremovexattr lseek lsetxattr lstat
    madvise map_shadow_stack membarrier memfd_create mincore mkdir mkdirat mknod mknodat mlock
    mlock2 mlockall mmap mprotect mq_getsetattr mq_notify mq_open mq_timedreceive mq_timedsend
    mq_unlink mremap msgctl msgget msgrcv msgsnd msync munlock munlockall munmap nanosleep
    newfstatat open openat openat2 pause pidfd_open pidfd_send_signal pipe pipe2 pkey_alloc
    pkey_free pkey_mprotect poll ppoll prctl pread64 preadv preadv2 prlimit64 pselect6 pwrite64
    pwritev pwritev2 read readahead readlink readlinkat readv recvfrom recvmmsg recvmsg
    removexattr rename renameat renameat2 restart_syscall rmdir rseq rt_sigaction rt_sigpending
    rt_sigprocmask rt_sigqueueinfo rt_sigreturn rt_sigsuspend rt_sigtimedwait rt_tgsigqueueinfo
    sched_get_priority_max sched_get_priority_min sched_getaffinity sched_getattr
    sched_getparam sched_getscheduler sched_rr_get_interval sched_setaffinity sched_setattr
    sched_setparam sched_setscheduler sched_yield seccomp select semctl semget semop semtimedop
    sendfile sendmmsg sendmsg sendto set_robust_list set_tid_address setfsgid setfsuid setgid
    setgroups setitimer setpgid setpriority setregid setresgid setresuid setreuid setrlimit
    setsid setsockopt setuid setxattr shmat shmctl shmdt shmget shutdown sigaltstack signalfd
    signalfd4 socketpair splice stat statfs statx symlink symlinkat sync sync_file_range syncfs
    sysinfo tee tgkill time timer_create timer_delete timer_getoverrun timer_gettime
    timer_settime timerfd_create timerfd_gettime timerfd_settime times tkill truncate umask
    uname unlink unlinkat utime utimensat utimes vfork vmsplice wait4 waitid write writev
    """.split()
)
"""System calls allowed with any arguments."""

AF_VSOCK = 40
NAMESPACE_FLAGS = 0x7E020000
"""CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET."""
PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
"""``personality`` only reads the persona or sets Linux with the usual flags."""

COMPILER = """\
import errno, json, os, sys
import seccomp
spec = json.loads(sys.argv[1])
rules = seccomp.SyscallFilter(defaction=seccomp.ERRNO(errno.EPERM))
for name in spec["allowed"]:
    rules.add_rule(seccomp.ALLOW, name)
rules.add_rule(seccomp.ALLOW, "socket", seccomp.Arg(0, seccomp.NE, spec["vsock"]))
rules.add_rule(seccomp.ALLOW, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, spec["namespaces"], 0))
rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
for persona in spec["personalities"]:
    rules.add_rule(seccomp.ALLOW, "personality", seccomp.Arg(0, seccomp.EQ, persona))
with open(sys.argv[2], "wb") as out:
    rules.export_bpf(out)
"""


class FilterUnavailable(RuntimeError):
    """No interpreter here has libseccomp's bindings; the message says what each one answered."""


@functools.cache
def compiled_filter() -> bytes:
    """The filter as the BPF program ``bwrap --seccomp`` reads; raises ``FilterUnavailable``."""
    spec = json.dumps(
        {
            "allowed": ALLOWED,
            "vsock": AF_VSOCK,
            "namespaces": NAMESPACE_FLAGS,
            "personalities": PERSONALITIES,
        }
    )
    answers: list[str] = []
    with tempfile.TemporaryDirectory(prefix="society-seccomp-") as scratch:
        out = os.path.join(scratch, "filter.bpf")
        for python in _interpreters():
            found = subprocess.run(
                [python, "-I", "-c", COMPILER, spec, out],
                capture_output=True,
                timeout=60,
                check=False,
            )
            if found.returncode == 0 and os.path.getsize(out) > 0:
                with open(out, "rb") as program:
                    return program.read()
            last = found.stderr.decode(errors="replace").strip().splitlines()
            answers.append(f"{python}: {last[-1] if last else f'exit {found.returncode}'}")
    raise FilterUnavailable("; ".join(answers))


def _interpreters() -> list[str]:
    """This interpreter, then the system's (where Debian installs ``python3-seccomp``)."""
    found = [sys.executable]
    for name in ("/usr/bin/python3", shutil.which("python3")):
        if name and os.path.exists(name) and name not in found:
            found.append(name)
    return found
