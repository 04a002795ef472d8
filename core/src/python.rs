//! The Python binding: `mqbench_core.Core` (used by `mqbench/workload/compiled.py` only).

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::engine::{Config, Engine, Readopt, Role, Shared};
use crate::proto::Protocol;

/// One worker's hot path. Build it, add the lent sockets (publishers in schedule order,
/// then subscribers), call `run` on a thread of its own (the GIL is released), read
/// `stats`/`take_lost` from another, and `stop` it.
#[pyclass(frozen)]
struct Core {
    shared: Arc<Shared>,
    engine: Mutex<Option<Engine>>,
}

#[pymethods]
impl Core {
    #[new]
    #[pyo3(signature = (
        protocol, deliveries_fd, sends_fd, start_ns, rate, publishers_total, first, last,
        messages_per_publisher, payload_bytes, spin_ns, late_threshold_ns, kernel_stamps,
        keepalive_s, max_pending_bytes, coalesce_ns = 0
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        protocol: &str,
        deliveries_fd: RawFd,
        sends_fd: RawFd,
        start_ns: i64,
        rate: f64,
        publishers_total: i64,
        first: i64,
        last: i64,
        messages_per_publisher: i64,
        payload_bytes: usize,
        spin_ns: i64,
        late_threshold_ns: i64,
        kernel_stamps: bool,
        keepalive_s: f64,
        max_pending_bytes: usize,
        coalesce_ns: i64,
    ) -> PyResult<Self> {
        let protocol = Protocol::from_name(protocol)
            .ok_or_else(|| PyValueError::new_err(format!("no compiled path for {protocol:?}")))?;
        if payload_bytes < crate::engine::HEADER_SIZE || rate <= 0.0 {
            return Err(PyValueError::new_err("payload below the header size, or rate <= 0"));
        }
        let cfg = Config {
            protocol,
            start_ns,
            rate,
            publishers_total,
            first,
            last,
            messages_per_publisher,
            payload_bytes,
            spin_ns,
            late_threshold_ns,
            kernel_stamps,
            keepalive_ns: (keepalive_s * 1e9) as i64,
            max_pending_bytes,
            coalesce_ns: coalesce_ns.max(0),
        };
        let shared = Arc::new(Shared::default());
        let engine = Engine::new(cfg, shared.clone(), deliveries_fd, sends_fd);
        Ok(Core { shared, engine: Mutex::new(Some(engine)) })
    }

    /// Lend publisher `index`'s socket (the core closes `fd`, a duplicate, when done).
    fn add_publisher(&self, fd: RawFd, index: u32, head: Vec<u8>, tail: Vec<u8>) -> PyResult<()> {
        self.with_engine(|e| e.add_publisher(fd, index, head, tail))
    }

    /// Lend subscriber `index`'s socket.
    fn add_subscriber(&self, fd: RawFd, index: u32) -> PyResult<()> {
        self.with_engine(|e| e.add_subscriber(fd, index))
    }

    /// Lend the new session of a client the core lost (`role` "pub" or "sub", its cell-wide
    /// `index`; `fd` < 0: none) once the Python side reconnected it, with the delivery
    /// records (24 bytes each, packed) its Python client received meanwhile. The core
    /// takes it over within one iteration; after `stop`, at its end.
    fn readopt(&self, role: &str, index: u32, fd: RawFd, records: Vec<u8>) -> PyResult<()> {
        let role = match role {
            "pub" => Role::Publisher,
            "sub" => Role::Subscriber,
            _ => return Err(PyValueError::new_err(format!("unknown role {role:?}"))),
        };
        if records.len() % crate::records::RECORD_SIZE != 0 {
            return Err(PyValueError::new_err("records are not whole 24-byte records"));
        }
        self.shared.readopt(Readopt { role, index, fd, records });
        Ok(())
    }

    /// Publish, receive and record until `stop` (blocks; the GIL is released).
    fn run(&self, py: Python<'_>) -> PyResult<()> {
        let mut engine = self
            .engine
            .lock()
            .map_err(|_| PyRuntimeError::new_err("core poisoned"))?
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("the core already ran"))?;
        let result = py.detach(move || {
            let result = engine.run();
            drop(engine); // flushes and closes the record files and sockets
            result
        });
        result.map_err(|e| PyOSError::new_err(e.to_string()))
    }

    /// Ask `run` to return (within its idle wait, 50 ms).
    fn stop(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
    }

    /// True once every scheduled message was handed out.
    #[getter]
    fn published(&self) -> bool {
        self.shared.published.load(Ordering::Acquire)
    }

    /// The counters now, by name (see `mqbench/workload/compiled.py`).
    fn stats(&self) -> HashMap<&'static str, i64> {
        let s = &self.shared;
        let u = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed) as i64;
        let i = |a: &std::sync::atomic::AtomicI64| a.load(Ordering::Relaxed);
        HashMap::from([
            ("sent_ok", u(&s.sent_ok)),
            ("send_failed", u(&s.send_failed)),
            ("send_refused", u(&s.send_refused)),
            ("due", u(&s.due)),
            ("late", u(&s.late)),
            ("max_lag_ns", i(&s.max_lag_ns)),
            ("wakeups", u(&s.wakeups)),
            ("yields", u(&s.yields)),
            ("spin_ns", i(&s.spin_ns)),
            ("margin_ns", i(&s.margin_ns)),
            ("kernel_reads", u(&s.kernel_reads)),
            ("user_reads", u(&s.user_reads)),
            ("disconnects", u(&s.disconnects)),
            ("connected", u(&s.connected)),
            ("pending_bytes", u(&s.pending_bytes)),
            ("publish_replies", u(&s.publish_replies)),
            ("unreceived", u(&s.unreceived)),
            ("server_errors", u(&s.server_errors)),
            ("cpu_start_ns", i(&s.cpu_start_ns)),
            ("mono_start_ns", i(&s.mono_start_ns)),
            ("cpu_end_ns", i(&s.cpu_end_ns)),
            ("mono_end_ns", i(&s.mono_end_ns)),
            ("deliveries", u(&s.deliveries.count)),
            ("deliveries_written", u(&s.deliveries.written)),
            ("deliveries_errno", i(&s.deliveries.errno)),
            ("sends", u(&s.sends.count)),
            ("sends_written", u(&s.sends.written)),
            ("sends_errno", i(&s.sends.errno)),
        ])
    }

    /// Connections lost since the last call: `(role, index, reason)`.
    fn take_lost(&self) -> Vec<(&'static str, u32, String)> {
        match self.shared.lost.lock() {
            Ok(mut lost) => std::mem::take(&mut *lost),
            Err(_) => Vec::new(),
        }
    }
}

impl Core {
    fn with_engine(&self, f: impl FnOnce(&mut Engine)) -> PyResult<()> {
        let mut guard = self.engine.lock().map_err(|_| PyRuntimeError::new_err("core poisoned"))?;
        let engine = guard.as_mut().ok_or_else(|| PyRuntimeError::new_err("the core already ran"))?;
        f(engine);
        Ok(())
    }
}

/// The module: `Core`, the version of the record format it writes, and the digest of the
/// `core/` sources it was built from (`__sources__`: set by scripts/install.sh, None when
/// built without it; mqbench/workload/core_sources.py compares it with the checkout's).
#[pymodule]
fn mqbench_core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Core>()?;
    m.add("RECORD_SIZE", crate::records::RECORD_SIZE)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("__sources__", option_env!("MQBENCH_CORE_SOURCES"))?;
    Ok(())
}
