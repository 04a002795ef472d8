//! The 24-byte records of docs/records.md, written in blocks as `records/writer.py` does.
//!
//! Layout (little endian): `i64 t_sent | i32 lat | u32 pub | u32 sub | u32 seq`. A delivery's
//! `lat` is `floor((t_recv - t_sent) / 100)` saturated to i32; a send record's `sub` holds
//! the `SEND_*` flags. A failed write cuts the file back to its last whole record and stops
//! the file (the owner reads the error number and stops the run).

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::sys;

pub const RECORD_SIZE: usize = 24;
pub const LAT_UNIT_NS: i64 = 100;
pub const SEND_OK: u32 = 1;
pub const SEND_ACK: u32 = 2;
pub const SEND_FAILED: u32 = 4;
pub const BLOCK_RECORDS: usize = 65536;

/// One record, packed as `RECORD = struct.Struct("<qiIII")`.
#[inline]
pub fn pack(out: &mut [u8], t_sent: i64, lat: i32, publisher: u32, sub: u32, seq: u32) {
    out[0..8].copy_from_slice(&t_sent.to_le_bytes());
    out[8..12].copy_from_slice(&lat.to_le_bytes());
    out[12..16].copy_from_slice(&publisher.to_le_bytes());
    out[16..20].copy_from_slice(&sub.to_le_bytes());
    out[20..24].copy_from_slice(&seq.to_le_bytes());
}

/// A delivery's latency field: `(t_recv - t_sent) // 100` (floor), saturating to i32.
#[inline]
pub fn delivery_latency(t_sent: i64, t_recv: i64) -> i32 {
    let units = t_recv.wrapping_sub(t_sent).div_euclid(LAT_UNIT_NS);
    units.clamp(i32::MIN as i64, i32::MAX as i64) as i32
}

/// Counters of one record file that the Python side reads while the loop runs.
#[derive(Default)]
pub struct FileCounters {
    /// Records appended.
    pub count: AtomicU64,
    /// Records handed to the OS (whole records in the file).
    pub written: AtomicU64,
    /// The errno of the write that stopped the file (0: none).
    pub errno: AtomicI64,
}

/// A record file written in blocks of `BLOCK_RECORDS` records.
pub struct RecordFile {
    fd: RawFd,
    buf: Vec<u8>,
    count: u64,
    written: u64,
    failed: bool,
    counters: std::sync::Arc<FileCounters>,
}

impl RecordFile {
    pub fn new(fd: RawFd, counters: std::sync::Arc<FileCounters>) -> Self {
        RecordFile {
            fd,
            buf: Vec::with_capacity(BLOCK_RECORDS * RECORD_SIZE),
            count: 0,
            written: 0,
            failed: false,
            counters,
        }
    }

    #[inline]
    pub fn append(&mut self, t_sent: i64, lat: i32, publisher: u32, sub: u32, seq: u32) {
        let at = self.buf.len();
        self.buf.resize(at + RECORD_SIZE, 0);
        pack(&mut self.buf[at..], t_sent, lat, publisher, sub, seq);
        self.count += 1;
        self.counters.count.store(self.count, Ordering::Relaxed);
        if self.buf.len() >= BLOCK_RECORDS * RECORD_SIZE {
            self.flush();
        }
    }

    /// Append whole records packed elsewhere (a trailing partial record is ignored).
    pub fn append_packed(&mut self, records: &[u8]) {
        let whole = records.len() - records.len() % RECORD_SIZE;
        if whole == 0 {
            return;
        }
        self.buf.extend_from_slice(&records[..whole]);
        self.count += (whole / RECORD_SIZE) as u64;
        self.counters.count.store(self.count, Ordering::Relaxed);
        if self.buf.len() >= BLOCK_RECORDS * RECORD_SIZE {
            self.flush();
        }
    }

    /// Write the partial block out (records are dropped once the file failed).
    pub fn flush(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        if self.failed {
            self.buf.clear();
            return;
        }
        match sys::write_file(self.fd, &self.buf) {
            Ok(()) => {
                self.written += (self.buf.len() / RECORD_SIZE) as u64;
                self.counters.written.store(self.written, Ordering::Release);
            }
            Err(err) => {
                self.failed = true;
                sys::truncate(self.fd, self.written * RECORD_SIZE as u64);
                self.counters.errno.store(err.raw_os_error().unwrap_or(5) as i64, Ordering::Release);
            }
        }
        self.buf.clear();
    }
}

impl Drop for RecordFile {
    fn drop(&mut self) {
        self.flush();
        sys::close(self.fd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_packs_like_the_python_struct() {
        let mut out = [0u8; 24];
        pack(&mut out, -2, -3, 7, SEND_OK, 0xFFFF_FFFF);
        assert_eq!(&out[0..8], &(-2i64).to_le_bytes());
        assert_eq!(&out[8..12], &(-3i32).to_le_bytes());
        assert_eq!(&out[12..16], &7u32.to_le_bytes());
        assert_eq!(&out[16..20], &1u32.to_le_bytes());
        assert_eq!(&out[20..24], &[0xFF; 4]);
    }

    #[test]
    fn latency_floors_and_saturates_like_python_floor_division() {
        assert_eq!(delivery_latency(0, 199), 1);
        assert_eq!(delivery_latency(0, -1), -1);
        assert_eq!(delivery_latency(0, -101), -2);
        assert_eq!(delivery_latency(0, i64::MAX / 2), i32::MAX);
        assert_eq!(delivery_latency(i64::MAX / 2, 0), i32::MIN);
    }
}
