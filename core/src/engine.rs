//! One worker's hot path on one thread: the open-loop publish loop of
//! `workload/publish_loop.py` and the receive path of the lean clients, over sockets whose
//! sessions the Python clients established, writing the records of `records/writer.py`.
//!
//! Each iteration: send what is due (at most `BATCH` messages or `BUDGET_NS` of work, as the
//! Python loop), write each publisher's batch with one call, then wait in `epoll` — until a
//! read, or the timerfd armed `margin` before the next due time — and handle at most
//! `MAX_EVENTS` readiness events before the schedule is looked at again. The last
//! microseconds before a due time are busy-waited (bounded as in Python). Receives are
//! stamped with the kernel's receive time (`SO_TIMESTAMPNS`) or the clock after the read.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::proto::{Protocol, Sink};
use crate::records::{delivery_latency, FileCounters, RecordFile, SEND_FAILED, SEND_OK};
use crate::schedule::{Schedule, WakeMargin};
use crate::sys::{self, Epoll, Read, Timer, Wrote};

const BATCH: u32 = 64;
const BUDGET_NS: i64 = 200_000;
const MIN_SLEEP_NS: i64 = 20_000;
const MAX_EVENTS: usize = 64;
const IDLE_WAIT_MS: i32 = 50;
const RECORD_FLUSH_NS: i64 = 200_000_000;
/// With kernel receive stamps, reads are collected at most this often while they keep
/// coming and no send is due sooner: the stamp is the kernel's, so holding a read back
/// changes no timestamp, and one wake-up serves many connections instead of one
/// (docs/performance.md). Not once this long passed without a read, and not while a
/// connection holds part of a frame (`Engine::holds_reads`).
const RECEIVE_HOLD_NS: i64 = 1_000_000;
const READ_BYTES: usize = 256 * 1024;
const TIMER_TOKEN: u64 = u64::MAX;
/// The first keepalive tick comes this soon after the core takes the connections over:
/// the lending client may have written nothing for up to one keepalive already (it pings
/// after one idle tick), and the broker allows 1.5 keepalives, so waiting the usual half
/// keepalive could let the broker drop an idle subscriber before its first ping.
const FIRST_KEEPALIVE_NS: i64 = 1_000_000_000;
pub const HEADER_SIZE: usize = 24;

/// What the loop needs to know about the cell (from the worker's plan).
pub struct Config {
    pub protocol: Protocol,
    pub start_ns: i64,
    pub rate: f64,
    pub publishers_total: i64,
    pub first: i64,
    pub last: i64,
    pub messages_per_publisher: i64,
    pub payload_bytes: usize,
    pub spin_ns: i64,
    pub late_threshold_ns: i64,
    pub kernel_stamps: bool,
    pub keepalive_ns: i64,
    pub max_pending_bytes: usize,
    /// Sends due within this window after the first due one leave with it, so one wake-up
    /// serves them all; each is up to this much later than intended (its send lag says
    /// so). 0: every send at its due time (docs/performance.md).
    pub coalesce_ns: i64,
}

/// Counters the Python side reads while the loop runs (cumulative; relaxed atomics).
#[derive(Default)]
pub struct Shared {
    pub stop: AtomicBool,
    pub published: AtomicBool,
    pub sent_ok: AtomicU64,
    pub send_failed: AtomicU64,
    pub send_refused: AtomicU64,
    pub due: AtomicU64,
    pub late: AtomicU64,
    pub max_lag_ns: AtomicI64,
    pub wakeups: AtomicU64,
    pub yields: AtomicU64,
    pub spin_ns: AtomicI64,
    pub margin_ns: AtomicI64,
    pub kernel_reads: AtomicU64,
    pub user_reads: AtomicU64,
    pub disconnects: AtomicU64,
    pub connected: AtomicU64,
    pub pending_bytes: AtomicU64,
    pub publish_replies: AtomicU64,
    pub unreceived: AtomicU64,
    pub server_errors: AtomicU64,
    pub cpu_start_ns: AtomicI64,
    pub mono_start_ns: AtomicI64,
    pub cpu_end_ns: AtomicI64,
    pub mono_end_ns: AtomicI64,
    pub deliveries: Arc<FileCounters>,
    pub sends: Arc<FileCounters>,
    /// Connections lost: `(role, index, reason)`, taken by the Python side.
    pub lost: Mutex<Vec<(&'static str, u32, String)>>,
    /// Sessions the Python side re-established after a loss, for the loop to take over
    /// (`readopt`), and whether any are waiting.
    pub readopt: Mutex<Vec<Readopt>>,
    pub readopt_waiting: AtomicBool,
}

/// A lost client's new session, lent back by the Python side once it reconnected: its
/// socket (< 0: none, only records), and delivery records (24 bytes each, packed) that its
/// Python client received between subscribing again and lending the socket.
pub struct Readopt {
    pub role: Role,
    pub index: u32,
    pub fd: RawFd,
    pub records: Vec<u8>,
}

impl Shared {
    /// Queue a re-established session (or records alone) for the loop.
    pub fn readopt(&self, item: Readopt) {
        if let Ok(mut queue) = self.readopt.lock() {
            queue.push(item);
            self.readopt_waiting.store(true, Ordering::SeqCst);
        } else if item.fd >= 0 {
            sys::close(item.fd);
        }
    }

    fn take_readopt(&self) -> Vec<Readopt> {
        if !self.readopt_waiting.load(Ordering::Relaxed)
            || !self.readopt_waiting.swap(false, Ordering::SeqCst)
        {
            return Vec::new();
        }
        self.readopt.lock().map(|mut q| std::mem::take(&mut *q)).unwrap_or_default()
    }
}

impl Drop for Shared {
    /// Sessions lent after the loop ended are closed here.
    fn drop(&mut self) {
        if let Ok(queue) = self.readopt.get_mut() {
            for item in queue.drain(..).filter(|item| item.fd >= 0) {
                sys::close(item.fd);
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Publisher,
    Subscriber,
}

struct Conn {
    fd: RawFd,
    role: Role,
    index: u32,
    head: Vec<u8>,
    tail: Vec<u8>,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    out_pos: usize,
    alive: bool,
    dirty: bool,
    polling_out: bool,
    kernel_reads: u64,
    wrote: bool,
}

impl Conn {
    fn pending(&self) -> usize {
        self.out.len() - self.out_pos
    }
}

pub struct Engine {
    cfg: Config,
    shared: Arc<Shared>,
    conns: Vec<Conn>,
    publishers: usize,
    /// Connections with bytes queued since the last `write_dirty`.
    dirty: Vec<usize>,
    /// Bytes queued over every connection.
    pending: usize,
    /// Connections whose input ends in part of a frame (`inbuf` not empty).
    partial: usize,
    /// When a wait last returned a socket to read (realtime ns; 0: never).
    last_read_wait: i64,
    /// Whether one did within the hold (`RECEIVE_HOLD_NS`) before the last wait.
    busy: bool,
    deliveries: RecordFile,
    sends: RecordFile,
    pad: Vec<u8>,
}

enum Next {
    Poll,
    Sleep,
    Finished,
}

impl Engine {
    pub fn new(cfg: Config, shared: Arc<Shared>, deliveries_fd: RawFd, sends_fd: RawFd) -> Self {
        let pad = vec![0u8; cfg.payload_bytes.saturating_sub(HEADER_SIZE)];
        Engine {
            deliveries: RecordFile::new(deliveries_fd, shared.deliveries.clone()),
            sends: RecordFile::new(sends_fd, shared.sends.clone()),
            cfg,
            shared,
            conns: Vec::new(),
            publishers: 0,
            dirty: Vec::new(),
            pending: 0,
            partial: 0,
            last_read_wait: 0,
            busy: false,
            pad,
        }
    }

    /// Add the next publisher (in schedule order: index `first + k`) with its frame parts;
    /// `fd` < 0: a publisher that never connected (its sends are recorded as failed).
    pub fn add_publisher(&mut self, fd: RawFd, index: u32, head: Vec<u8>, tail: Vec<u8>) {
        assert_eq!(self.conns.len(), self.publishers, "publishers come before subscribers");
        self.conns.push(Conn::new(fd, Role::Publisher, index, head, tail));
        self.publishers += 1;
    }

    pub fn add_subscriber(&mut self, fd: RawFd, index: u32) {
        self.conns.push(Conn::new(fd, Role::Subscriber, index, Vec::new(), Vec::new()));
    }

    /// Run until `shared.stop`: publish the schedule, receive, record.
    pub fn run(&mut self) -> std::io::Result<()> {
        sys::clear_timer_slack(); // `hold_reads` sleeps with clock_nanosleep
        let epoll = Epoll::new()?;
        let timer = Timer::new()?;
        epoll.add(timer.fd, sys::IN, TIMER_TOKEN)?;
        for (k, conn) in self.conns.iter_mut().enumerate() {
            if !conn.alive {
                continue; // a client that never connected: its sends fail
            }
            sys::set_nonblocking(conn.fd)?;
            if self.cfg.kernel_stamps {
                sys::enable_receive_stamps(conn.fd)?;
            }
            epoll.add(conn.fd, sys::IN | sys::ERR_HUP, k as u64)?;
        }
        let alive = self.conns.iter().filter(|c| c.alive).count();
        self.shared.connected.store(alive as u64, Ordering::Relaxed);
        let mut publish = PublishState::new(&self.cfg);
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; MAX_EVENTS];
        let mut scratch = vec![0u8; READ_BYTES];
        let mut next_flush = sys::monotonic_ns() + RECORD_FLUSH_NS;
        let mut next_tick = sys::monotonic_ns() + FIRST_KEEPALIVE_NS.min(self.cfg.keepalive_ns / 2);
        let mut last_wait = 0i64;
        while !self.shared.stop.load(Ordering::SeqCst) {
            self.take_over(&epoll);
            let next = self.step(&mut publish, &timer);
            self.write_dirty(&epoll);
            let timeout = match next {
                Next::Poll => {
                    // behind schedule: still let other real-time threads of the same
                    // priority on this CPU (the worker's control thread, another worker)
                    // run between batches, as the Python loop lets pending I/O run
                    sys::yield_cpu();
                    0
                }
                Next::Sleep | Next::Finished if self.holds_reads() => {
                    let hold_ns = RECEIVE_HOLD_NS.max(self.cfg.coalesce_ns);
                    hold_reads(&mut publish, last_wait, hold_ns, &self.shared);
                    0
                }
                Next::Sleep | Next::Finished => {
                    if let (true, Some(at)) = (self.cfg.kernel_stamps, publish.armed_at) {
                        timer.arm_at(at); // `hold_reads` did not, and will not, sleep to it
                    }
                    IDLE_WAIT_MS
                }
            };
            let n = epoll.wait(&mut events, timeout);
            last_wait = sys::realtime_ns();
            self.waited(last_wait, events[..n].iter().any(|event| event.u64 != TIMER_TOKEN));
            for event in &events[..n] {
                let (token, flags) = (event.u64, event.events);
                if token == TIMER_TOKEN {
                    timer.acknowledge();
                    publish.fire_if_due(&self.shared); // a stale expiry of an earlier arming
                } else {
                    self.on_ready(&epoll, token as usize, flags, &mut scratch);
                }
            }
            let mono = sys::monotonic_ns();
            if mono >= next_flush {
                self.deliveries.flush();
                self.sends.flush();
                next_flush = mono + RECORD_FLUSH_NS;
            }
            if self.cfg.keepalive_ns > 0 && mono >= next_tick {
                self.keepalive();
                next_tick = mono + self.cfg.keepalive_ns / 2;
            }
        }
        self.take_over(&epoll); // records handed over before the stop are kept
        self.write_dirty(&epoll);
        self.deliveries.flush();
        self.sends.flush();
        Ok(())
    }

    /// Take over the sessions the Python side re-established after a loss (and the
    /// deliveries its clients recorded meanwhile), as the Python engine's clients go on
    /// after a reconnect.
    fn take_over(&mut self, epoll: &Epoll) {
        for item in self.shared.take_readopt() {
            self.deliveries.append_packed(&item.records);
            if item.fd < 0 {
                continue;
            }
            let found =
                self.conns.iter().position(|c| c.role == item.role && c.index == item.index);
            let Some(k) = found else {
                sys::close(item.fd);
                continue;
            };
            if self.conns[k].alive {
                self.retire(epoll, k); // not reported: the Python side replaced it
            }
            if let Err(err) = self.install(epoll, k, item.fd) {
                sys::close(item.fd);
                let conn = &mut self.conns[k];
                conn.fd = -1;
                let role = if conn.role == Role::Publisher { "pub" } else { "sub" };
                if let Ok(mut lost) = self.shared.lost.lock() {
                    lost.push((role, conn.index, describe(&err)));
                }
            }
        }
    }

    /// Make `fd` connection `k`'s socket, from a clean state.
    fn install(&mut self, epoll: &Epoll, k: usize, fd: RawFd) -> std::io::Result<()> {
        sys::set_nonblocking(fd)?;
        if self.cfg.kernel_stamps {
            sys::enable_receive_stamps(fd)?;
        }
        epoll.add(fd, sys::IN | sys::ERR_HUP, k as u64)?;
        self.drop_input(k);
        let conn = &mut self.conns[k];
        conn.fd = fd;
        conn.alive = true;
        conn.out.clear();
        conn.out_pos = 0;
        conn.polling_out = false;
        conn.wrote = false;
        conn.kernel_reads = 0;
        self.shared.connected.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Send what is due, as `PublishLoop._step` does; say how to wait next.
    fn step(&mut self, p: &mut PublishState, timer: &Timer) -> Next {
        if p.schedule.finished() {
            p.finish(&self.shared);
            return Next::Finished;
        }
        if p.armed_at.is_some() {
            return Next::Sleep;
        }
        let mut now = sys::realtime_ns();
        p.woke_at_step(now, &self.shared);
        let began = now;
        let mut sent = 0u32;
        loop {
            let due = p.schedule.next_due_ns();
            let wait = due - now;
            if wait > 0 {
                let coalesce = self.cfg.coalesce_ns;
                if wait + coalesce > p.margin.value_ns + MIN_SLEEP_NS {
                    let at = due + coalesce - p.margin.value_ns;
                    p.armed_at = Some(at);
                    if !self.cfg.kernel_stamps {
                        timer.arm_at(at); // else `hold_reads` sleeps until `at` (or `run` arms it)
                    }
                    return Next::Sleep;
                }
                let spin_from = now;
                while now < due {
                    now = sys::realtime_ns();
                }
                p.spin_ns += now - spin_from;
            }
            p.started(&self.shared);
            let (publisher, seq) = p.schedule.current();
            self.send(publisher, seq, due);
            p.schedule.advance();
            p.count(now - due, self.cfg.late_threshold_ns);
            sent += 1;
            if p.schedule.finished() {
                p.publish_counters(&self.shared);
                return Next::Poll;
            }
            now = sys::realtime_ns();
            if sent >= BATCH || now - began >= BUDGET_NS {
                p.yields += 1;
                p.publish_counters(&self.shared);
                return Next::Poll;
            }
        }
    }

    /// Hand one message to its publisher's connection (`Publishing._make_send`).
    fn send(&mut self, publisher: i64, seq: i64, intended: i64) {
        let k = (publisher - self.cfg.first) as usize;
        let t = sys::realtime_ns();
        let conn = &mut self.conns[k];
        let (pub32, seq32) = (publisher as u32, seq as u32);
        if !conn.alive || conn.pending() >= self.cfg.max_pending_bytes {
            if conn.alive {
                self.shared.send_refused.fetch_add(1, Ordering::Relaxed);
            }
            self.sends.append(intended, 0, pub32, SEND_FAILED, seq32);
            self.shared.send_failed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        conn.out.extend_from_slice(&conn.head);
        conn.out.extend_from_slice(&pub32.to_le_bytes());
        conn.out.extend_from_slice(&seq32.to_le_bytes());
        conn.out.extend_from_slice(&t.to_le_bytes());
        conn.out.extend_from_slice(&0i64.to_le_bytes());
        conn.out.extend_from_slice(&self.pad);
        conn.out.extend_from_slice(&conn.tail);
        let bytes = conn.head.len() + HEADER_SIZE + self.pad.len() + conn.tail.len();
        self.queued(k, bytes);
        self.sends.append(t, 0, pub32, SEND_OK, seq32);
        self.shared.sent_ok.fetch_add(1, Ordering::Relaxed);
    }

    /// One write per connection that has something queued.
    fn write_dirty(&mut self, epoll: &Epoll) {
        let mut dirty = std::mem::take(&mut self.dirty);
        for &k in &dirty {
            self.conns[k].dirty = false;
            self.write_out(epoll, k);
        }
        dirty.clear();
        self.dirty = dirty;
        self.shared.pending_bytes.store(self.pending as u64, Ordering::Relaxed);
    }

    /// Queue `bytes` counted: called after appending them to connection `k`'s output.
    #[inline]
    fn queued(&mut self, k: usize, bytes: usize) {
        let conn = &mut self.conns[k];
        conn.wrote = true;
        self.pending += bytes;
        if !conn.dirty {
            conn.dirty = true;
            self.dirty.push(k);
        }
    }

    fn write_out(&mut self, epoll: &Epoll, k: usize) {
        let conn = &mut self.conns[k];
        if !conn.alive {
            return;
        }
        while conn.pending() > 0 {
            match sys::write(conn.fd, &conn.out[conn.out_pos..]) {
                Wrote::Bytes(n) => {
                    conn.out_pos += n;
                    self.pending -= n;
                }
                Wrote::WouldBlock => break,
                Wrote::Failed(err) => {
                    let reason = describe(&err);
                    self.lose(epoll, k, reason);
                    return;
                }
            }
        }
        let conn = &mut self.conns[k];
        if conn.pending() == 0 {
            conn.out.clear();
            conn.out_pos = 0;
        }
        let want_out = conn.pending() > 0;
        if want_out != conn.polling_out {
            conn.polling_out = want_out;
            let flags = sys::IN | sys::ERR_HUP | if want_out { sys::OUT } else { 0 };
            let _ = epoll.modify(conn.fd, flags, k as u64);
        }
    }

    fn on_ready(&mut self, epoll: &Epoll, k: usize, flags: u32, scratch: &mut [u8]) {
        if !self.conns[k].alive {
            return;
        }
        if flags & sys::OUT != 0 {
            self.write_out(epoll, k);
        }
        if flags & (sys::IN | sys::ERR_HUP) != 0 {
            self.read(epoll, k, scratch);
        }
    }

    fn read(&mut self, epoll: &Epoll, k: usize, scratch: &mut [u8]) {
        let (n, stamp) = match sys::read_stamped(self.conns[k].fd, scratch) {
            Read::Data(n, stamp) => (n, stamp),
            Read::WouldBlock => return,
            Read::Closed => {
                self.lose(epoll, k, "connection closed by the server".to_string());
                return;
            }
            Read::Failed(err) => {
                self.lose(epoll, k, describe(&err));
                return;
            }
        };
        let t_recv = self.receive_time(k, stamp);
        let conn = &mut self.conns[k];
        let was_partial = !conn.inbuf.is_empty();
        let mut sink = ConnSink {
            records: &mut self.deliveries,
            shared: &self.shared,
            t_recv,
            sub: conn.index,
            records_deliveries: conn.role == Role::Subscriber,
            answers: Vec::new(),
        };
        let parsed = if conn.inbuf.is_empty() {
            let data = &scratch[..n];
            self.cfg.protocol.parse(data, &mut sink).map(|used| {
                conn.inbuf.extend_from_slice(&data[used..]);
            })
        } else {
            conn.inbuf.extend_from_slice(&scratch[..n]);
            self.cfg.protocol.parse(&conn.inbuf, &mut sink).map(|used| {
                conn.inbuf.drain(..used);
            })
        };
        let answers = std::mem::take(&mut sink.answers);
        let is_partial = !self.conns[k].inbuf.is_empty();
        self.partial = self.partial + usize::from(is_partial) - usize::from(was_partial);
        if let Err(why) = parsed {
            self.lose(epoll, k, format!("protocol error: {why}"));
            return;
        }
        for answer in answers {
            self.conns[k].out.extend_from_slice(answer);
            self.queued(k, answer.len());
        }
    }

    /// After a wait that ended at `at`: the loop is busy while a wait found sockets to read
    /// within the last hold; once a whole hold passed without one it is idle.
    fn waited(&mut self, at: i64, found_reads: bool) {
        if found_reads {
            self.last_read_wait = at;
        }
        self.busy = at - self.last_read_wait < RECEIVE_HOLD_NS.max(self.cfg.coalesce_ns);
    }

    /// Whether the loop may hold reads back while it waits: with kernel stamps, when a wait
    /// found sockets to read within the last hold (an idle loop waits for the next read
    /// instead), and no connection's input ends in part of a frame. The subscriber's kernel
    /// ACKs with the read, and a sender may wait for that ACK before it writes more (Nagle
    /// on a split write, a send buffer smaller than the message): holding such a read would
    /// put the hold into the delivery. Busy, reads are collected once per `RECEIVE_HOLD_NS`.
    fn holds_reads(&self) -> bool {
        self.cfg.kernel_stamps && self.busy && self.partial == 0
    }

    /// Forget connection `k`'s partial input (its socket is closed or replaced).
    fn drop_input(&mut self, k: usize) {
        let conn = &mut self.conns[k];
        if !conn.inbuf.is_empty() {
            conn.inbuf.clear();
            self.partial -= 1;
        }
    }

    /// The receive time of a read (`StreamConnection.receive_ns`): the kernel's stamp when
    /// there is one, else the clock now.
    fn receive_time(&mut self, k: usize, stamp: i64) -> i64 {
        let conn = &mut self.conns[k];
        if stamp != 0 && self.cfg.kernel_stamps {
            conn.kernel_reads += 1;
            self.shared.kernel_reads.fetch_add(1, Ordering::Relaxed);
            return stamp;
        }
        if !self.cfg.kernel_stamps || conn.kernel_reads > 0 {
            self.shared.user_reads.fetch_add(1, Ordering::Relaxed);
        }
        sys::realtime_ns()
    }

    fn lose(&mut self, epoll: &Epoll, k: usize, reason: String) {
        if !self.conns[k].alive {
            return;
        }
        self.retire(epoll, k);
        self.shared.disconnects.fetch_add(1, Ordering::Relaxed);
        let conn = &self.conns[k];
        let role = match conn.role {
            Role::Publisher => "pub",
            Role::Subscriber => "sub",
        };
        if let Ok(mut lost) = self.shared.lost.lock() {
            lost.push((role, conn.index, reason));
        }
    }

    /// Stop using connection `k`: close the socket (a new session may take its place,
    /// `take_over`) and drop what was queued for it.
    fn retire(&mut self, epoll: &Epoll, k: usize) {
        self.drop_input(k);
        let conn = &mut self.conns[k];
        conn.alive = false;
        epoll.delete(conn.fd);
        sys::close(conn.fd);
        conn.fd = -1;
        self.pending -= conn.pending();
        conn.out.clear();
        conn.out_pos = 0;
        self.shared.connected.fetch_sub(1, Ordering::Relaxed);
    }

    /// A connection that wrote nothing since the last tick sends the protocol's ping.
    fn keepalive(&mut self) {
        let Some(ping) = self.cfg.protocol.keepalive() else { return };
        for k in 0..self.conns.len() {
            let conn = &mut self.conns[k];
            if !conn.alive {
                continue;
            }
            if conn.wrote {
                conn.wrote = false;
            } else {
                conn.out.extend_from_slice(ping);
                self.queued(k, ping.len());
                self.conns[k].wrote = false;
            }
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        for conn in self.conns.iter().filter(|c| c.fd >= 0) {
            sys::close(conn.fd);
        }
    }
}

impl Conn {
    fn new(fd: RawFd, role: Role, index: u32, head: Vec<u8>, tail: Vec<u8>) -> Self {
        Conn {
            fd,
            role,
            index,
            head,
            tail,
            inbuf: Vec::new(),
            out: Vec::new(),
            out_pos: 0,
            alive: fd >= 0,
            dirty: false,
            polling_out: false,
            kernel_reads: 0,
            wrote: false,
        }
    }
}

fn describe(err: &std::io::Error) -> String {
    let text = err.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text).to_string();
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().collect::<String>() + chars.as_str(),
        None => text,
    }
}

/// With kernel stamps: sleep until the next wake-up the schedule needs, but at least until
/// `hold_ns` (`RECEIVE_HOLD_NS`, or the send coalescing window if longer) after the last wait
/// returned, and no longer than that when nothing is due; then the caller polls every socket at once. One sleep per iteration, no wake-up
/// per read: the kernel stamped each read already, so holding it back changes no stamp.
fn hold_reads(p: &mut PublishState, last_wait: i64, hold_ns: i64, shared: &Shared) {
    let hold_end = last_wait + hold_ns;
    let until = p.armed_at.map_or(hold_end, |at| at.min(hold_end));
    if until > sys::realtime_ns() {
        sys::sleep_until_realtime(until);
    }
    p.fire_if_due(shared);
}

/// The schedule and what the loop observed about itself (`ScheduleStats`).
struct PublishState {
    schedule: Schedule,
    margin: WakeMargin,
    armed_at: Option<i64>,
    /// Set by a wake-up (the time the timer was armed for) until the schedule is looked at.
    woke: Option<i64>,
    due: u64,
    late: u64,
    max_lag_ns: i64,
    spin_ns: i64,
    wakeups: u64,
    yields: u64,
    began: bool,
    done: bool,
}

impl PublishState {
    fn new(cfg: &Config) -> Self {
        let schedule = Schedule::new(
            cfg.start_ns,
            cfg.rate,
            cfg.publishers_total,
            cfg.first,
            cfg.last,
            cfg.messages_per_publisher,
        );
        let margin = WakeMargin::new(schedule.spin_cap_ns(cfg.spin_ns));
        PublishState {
            schedule,
            margin,
            armed_at: None,
            woke: None,
            due: 0,
            late: 0,
            max_lag_ns: 0,
            spin_ns: 0,
            wakeups: 0,
            yields: 0,
            began: false,
            done: false,
        }
    }

    /// The wake-up the schedule asked for, when its time has come (a `hold_reads` sleep
    /// may have served it before the timerfd it was also armed on expired).
    fn fire_if_due(&mut self, shared: &Shared) {
        if self.armed_at.is_some_and(|at| sys::realtime_ns() >= at) {
            self.timer_fired(shared);
        }
    }

    fn timer_fired(&mut self, shared: &Shared) {
        if let Some(armed) = self.armed_at.take() {
            self.wakeups += 1;
            self.woke = Some(armed);
            shared.wakeups.store(self.wakeups, Ordering::Relaxed);
        }
    }

    /// The schedule is looked at after a wake-up: the margin learns how late that is after
    /// the armed time. Measured here, not when the sleep returns, it covers the reads and
    /// the bookkeeping handled between the two as well as the wake-up itself, as the
    /// Python loop's does (its timer callback is where it looks at the schedule).
    fn woke_at_step(&mut self, now: i64, shared: &Shared) {
        if let Some(armed) = self.woke.take() {
            self.margin.observe(now - armed);
            shared.margin_ns.store(self.margin.value_ns, Ordering::Relaxed);
        }
    }

    #[inline]
    fn count(&mut self, lag: i64, late_threshold_ns: i64) {
        self.due += 1;
        if lag > self.max_lag_ns {
            self.max_lag_ns = lag;
        }
        if lag > late_threshold_ns {
            self.late += 1;
        }
    }

    fn started(&mut self, shared: &Shared) {
        if !self.began {
            self.began = true;
            shared.cpu_start_ns.store(sys::process_cpu_ns(), Ordering::Relaxed);
            shared.mono_start_ns.store(sys::monotonic_ns(), Ordering::Relaxed);
        }
    }

    fn publish_counters(&self, shared: &Shared) {
        shared.due.store(self.due, Ordering::Relaxed);
        shared.late.store(self.late, Ordering::Relaxed);
        shared.max_lag_ns.store(self.max_lag_ns, Ordering::Relaxed);
        shared.spin_ns.store(self.spin_ns, Ordering::Relaxed);
        shared.yields.store(self.yields, Ordering::Relaxed);
        shared.margin_ns.store(self.margin.value_ns, Ordering::Relaxed);
    }

    fn finish(&mut self, shared: &Shared) {
        if self.done {
            return;
        }
        self.done = true;
        self.publish_counters(shared);
        if self.began {
            shared.cpu_end_ns.store(sys::process_cpu_ns(), Ordering::Relaxed);
            shared.mono_end_ns.store(sys::monotonic_ns(), Ordering::Relaxed);
        }
        shared.published.store(true, Ordering::Release);
    }
}

/// Receives of one read: deliveries become records stamped `t_recv`.
struct ConnSink<'a> {
    records: &'a mut RecordFile,
    shared: &'a Shared,
    t_recv: i64,
    sub: u32,
    records_deliveries: bool,
    answers: Vec<&'static [u8]>,
}

impl Sink for ConnSink<'_> {
    #[inline]
    fn delivery(&mut self, payload: &[u8]) {
        if !self.records_deliveries || payload.len() < HEADER_SIZE {
            return;
        }
        let publisher = u32::from_le_bytes(payload[0..4].try_into().unwrap());
        let seq = u32::from_le_bytes(payload[4..8].try_into().unwrap());
        let t_sent = i64::from_le_bytes(payload[8..16].try_into().unwrap());
        let lat = delivery_latency(t_sent, self.t_recv);
        self.records.append(t_sent, lat, publisher, self.sub, seq);
    }

    fn answer(&mut self, bytes: &'static [u8]) {
        self.answers.push(bytes);
    }

    fn publish_reply(&mut self, receivers: i64) {
        self.shared.publish_replies.fetch_add(1, Ordering::Relaxed);
        if receivers == 0 {
            self.shared.unreceived.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn server_error(&mut self, _text: &[u8]) {
        self.shared.server_errors.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(kernel_stamps: bool) -> Config {
        Config {
            protocol: Protocol::Mqtt,
            start_ns: 0,
            rate: 1.0,
            publishers_total: 0,
            first: 0,
            last: 0,
            messages_per_publisher: 0,
            payload_bytes: HEADER_SIZE,
            spin_ns: 0,
            late_threshold_ns: 1_000_000,
            kernel_stamps,
            keepalive_ns: 0,
            max_pending_bytes: 1 << 20,
            coalesce_ns: 0,
        }
    }

    /// An engine with one subscriber (records to /dev/null) whose last wait found reads,
    /// the other end of the subscriber's socket, and the epoll set it reads through.
    fn with_subscriber(kernel_stamps: bool) -> (Engine, RawFd, Epoll) {
        let mut pair = [0 as RawFd; 2];
        // SAFETY: pair has room for two descriptors; the path is a C string.
        let made =
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, pair.as_mut_ptr()) };
        assert_eq!(made, 0);
        let null =
            || unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
        let (deliveries, sends) = (null(), null());
        let mut engine = Engine::new(config(kernel_stamps), Arc::default(), deliveries, sends);
        engine.add_subscriber(pair[0], 0);
        engine.busy = true;
        sys::set_nonblocking(pair[0]).unwrap();
        let epoll = Epoll::new().unwrap();
        epoll.add(pair[0], sys::IN | sys::ERR_HUP, 0).unwrap();
        (engine, pair[1], epoll)
    }

    fn publish_frame() -> Vec<u8> {
        let mut frame = vec![0x30, (2 + 1 + HEADER_SIZE) as u8, 0, 1, b't'];
        frame.extend_from_slice(&[0u8; HEADER_SIZE]);
        frame
    }

    fn send(fd: RawFd, data: &[u8]) {
        assert!(matches!(sys::write(fd, data), Wrote::Bytes(n) if n == data.len()));
    }

    #[test]
    fn with_kernel_stamps_reads_are_not_held_while_a_frame_is_incomplete() {
        let (mut engine, peer, epoll) = with_subscriber(true);
        let mut scratch = vec![0u8; 4096];
        let frame = publish_frame();
        assert!(engine.holds_reads());
        send(peer, &frame[..4]); // a broker's split write, the rest after our ACK
        engine.read(&epoll, 0, &mut scratch);
        assert!(!engine.holds_reads());
        send(peer, &frame[4..]);
        engine.read(&epoll, 0, &mut scratch);
        assert!(engine.holds_reads());
        assert_eq!(engine.shared.deliveries.count.load(Ordering::Relaxed), 1);
        sys::close(peer);
    }

    #[test]
    fn a_connection_lost_with_part_of_a_frame_lets_reads_be_held_again() {
        let (mut engine, peer, epoll) = with_subscriber(true);
        let mut scratch = vec![0u8; 4096];
        send(peer, &publish_frame()[..4]);
        engine.read(&epoll, 0, &mut scratch);
        sys::close(peer);
        engine.read(&epoll, 0, &mut scratch);
        assert!(!engine.conns[0].alive);
        assert!(engine.holds_reads());
    }

    #[test]
    fn with_kernel_stamps_an_idle_loop_waits_for_the_next_read_instead_of_holding() {
        let (mut engine, peer, _epoll) = with_subscriber(true);
        let t = 1_000_000_000_000;
        engine.waited(t, true);
        engine.waited(t + RECEIVE_HOLD_NS / 2, false); // a poll between reads: still busy
        assert!(engine.holds_reads());
        engine.waited(t + RECEIVE_HOLD_NS, false); // a whole hold without a read
        assert!(!engine.holds_reads());
        engine.waited(t + 5 * RECEIVE_HOLD_NS, true);
        assert!(engine.holds_reads());
        sys::close(peer);
    }

    #[test]
    fn with_user_stamps_reads_are_never_held() {
        let (engine, peer, _epoll) = with_subscriber(false);
        assert!(!engine.holds_reads());
        sys::close(peer);
    }
}
