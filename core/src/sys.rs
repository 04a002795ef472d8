//! The few Linux calls the loop makes: clocks, epoll, an absolute timerfd, non-blocking
//! reads with the kernel's receive stamp (`SO_TIMESTAMPNS`) and writes.

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::RawFd;

/// Wall-clock time in ns (`CLOCK_REALTIME`, as Python's `time.time_ns()`).
#[inline]
pub fn realtime_ns() -> i64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// CPU time of the whole process in ns (as Python's `time.process_time()`).
pub fn process_cpu_ns() -> i64 {
    clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// Monotonic time in ns.
pub fn monotonic_ns() -> i64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

#[inline]
fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = MaybeUninit::<libc::timespec>::uninit();
    // SAFETY: clock_gettime writes a timespec into valid memory.
    unsafe { libc::clock_gettime(clock, ts.as_mut_ptr()) };
    let ts = unsafe { ts.assume_init() };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// An epoll instance (closed on drop).
pub struct Epoll {
    fd: RawFd,
}

pub const IN: u32 = libc::EPOLLIN as u32;
pub const OUT: u32 = libc::EPOLLOUT as u32;
pub const ERR_HUP: u32 = (libc::EPOLLERR | libc::EPOLLHUP | libc::EPOLLRDHUP) as u32;

impl Epoll {
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain syscall.
        let fd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        Ok(Epoll { fd })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut event = libc::epoll_event { events, u64: token };
        // SAFETY: event is a valid epoll_event for the duration of the call.
        check(unsafe { libc::epoll_ctl(self.fd, op, fd, &mut event) }).map(|_| ())
    }

    pub fn add(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)
    }

    pub fn modify(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, token)
    }

    pub fn delete(&self, fd: RawFd) {
        let mut event = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: as above; a failure (fd already gone) is of no consequence.
        unsafe { libc::epoll_ctl(self.fd, libc::EPOLL_CTL_DEL, fd, &mut event) };
    }

    /// Wait up to `timeout_ms` (0: poll); returns the number of events filled in.
    pub fn wait(&self, events: &mut [libc::epoll_event], timeout_ms: i32) -> usize {
        // SAFETY: events is a valid buffer of events.len() entries.
        let n = unsafe {
            libc::epoll_wait(self.fd, events.as_mut_ptr(), events.len() as i32, timeout_ms)
        };
        if n < 0 {
            0 // EINTR: the caller loops
        } else {
            n as usize
        }
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: we own the fd.
        unsafe { libc::close(self.fd) };
    }
}

/// A `CLOCK_REALTIME` timerfd armed at absolute deadlines (ns), as the Python engine's.
pub struct Timer {
    pub fd: RawFd,
}

impl Timer {
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain syscall.
        let fd = check(unsafe {
            libc::timerfd_create(libc::CLOCK_REALTIME, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC)
        })?;
        Ok(Timer { fd })
    }

    pub fn arm_at(&self, deadline_ns: i64) {
        let deadline = deadline_ns.max(1);
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec {
                tv_sec: deadline / 1_000_000_000,
                tv_nsec: deadline % 1_000_000_000,
            },
        };
        // SAFETY: spec is valid; the old value is not asked for.
        unsafe {
            libc::timerfd_settime(self.fd, libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut())
        };
    }

    /// Consume an expiry (the fd is readable).
    pub fn acknowledge(&self) {
        let mut expirations = 0u64;
        // SAFETY: reads 8 bytes into a u64.
        unsafe { libc::read(self.fd, (&mut expirations as *mut u64).cast(), 8) };
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        // SAFETY: we own the fd.
        unsafe { libc::close(self.fd) };
    }
}

/// Ask the kernel to stamp every read of `fd` with its receive time.
pub fn enable_receive_stamps(fd: RawFd) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: on is a valid c_int.
    check(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd we were given.
    let flags = check(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    check(unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) }).map(|_| ())
}

/// What one read returned.
pub enum Read {
    /// `n` bytes, and the kernel's receive stamp of the read's last segment (0: none).
    Data(usize, i64),
    /// Nothing to read now.
    WouldBlock,
    /// The peer closed its side.
    Closed,
    Failed(io::Error),
}

/// One `recvmsg` into `buf`, with the `SCM_TIMESTAMPNS` stamp when the socket has one.
pub fn read_stamped(fd: RawFd, buf: &mut [u8]) -> Read {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut control = [0u64; 8]; // 64 bytes, aligned: room for one timespec message
    // SAFETY: msghdr is plain data; every pointer in it refers to live buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<[u64; 8]>() as _;
    // SAFETY: as above.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        let err = io::Error::last_os_error();
        return match err.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Read::WouldBlock,
            _ => Read::Failed(err),
        };
    }
    if n == 0 {
        return Read::Closed;
    }
    Read::Data(n as usize, stamp_of(&msg))
}

fn stamp_of(msg: &libc::msghdr) -> i64 {
    // SAFETY: the CMSG macros walk the control buffer recvmsg filled in.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const libc::timespec);
                return ts.tv_sec * 1_000_000_000 + ts.tv_nsec;
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    0
}

/// What one write did.
pub enum Wrote {
    Bytes(usize),
    WouldBlock,
    Failed(io::Error),
}

pub fn write(fd: RawFd, data: &[u8]) -> Wrote {
    // SAFETY: data is a valid slice; MSG_NOSIGNAL: a closed peer is an error, not SIGPIPE.
    let n = unsafe { libc::send(fd, data.as_ptr().cast(), data.len(), libc::MSG_NOSIGNAL) };
    if n >= 0 {
        return Wrote::Bytes(n as usize);
    }
    let err = io::Error::last_os_error();
    match err.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Wrote::WouldBlock,
        _ => Wrote::Failed(err),
    }
}

/// Write all of `data` to a file (blocking), retrying short writes.
pub fn write_file(fd: RawFd, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        // SAFETY: data is a valid slice.
        let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        data = &data[n as usize..];
    }
    Ok(())
}

pub fn truncate(fd: RawFd, len: u64) {
    // SAFETY: plain syscall; failure leaves the file as it is.
    unsafe { libc::ftruncate(fd, len as libc::off_t) };
}

pub fn close(fd: RawFd) {
    // SAFETY: the caller owns fd.
    unsafe { libc::close(fd) };
}

/// Sleep until the wall clock reads `deadline_ns` (absolute `CLOCK_REALTIME`, as the
/// schedule's times; returns early on a signal).
pub fn sleep_until_realtime(deadline_ns: i64) {
    let ts = libc::timespec {
        tv_sec: deadline_ns / 1_000_000_000,
        tv_nsec: deadline_ns % 1_000_000_000,
    };
    // SAFETY: plain syscall with a valid timespec.
    unsafe {
        libc::clock_nanosleep(libc::CLOCK_REALTIME, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut())
    };
}

/// Let this thread's sleeps end at their deadline: a thread under normal scheduling gets
/// 50 µs of timer slack by default, which `clock_nanosleep` (unlike a timerfd) adds to its
/// wake-up; real-time threads get none anyway. Best effort: an error leaves the default.
pub fn clear_timer_slack() {
    let (one, zero): (libc::c_ulong, libc::c_ulong) = (1, 0);
    // SAFETY: plain prctl on the calling thread; 1 ns is the smallest slack it accepts.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, one, zero, zero, zero) };
}

/// Give the CPU to another runnable thread of the same priority, if any.
pub fn yield_cpu() {
    // SAFETY: plain syscall.
    unsafe { libc::sched_yield() };
}
