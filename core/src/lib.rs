//! mqbench's compiled hot path (docs/performance.md, "The compiled core").
//!
//! The Python worker connects and subscribes with its own clients, then lends the
//! established sockets to a [`Core`], which publishes the open-loop schedule, receives,
//! and writes the same 24-byte records as the Python engine until it is stopped. Python
//! keeps everything else: scenarios, brokers, faults, analysis, reports.

pub mod engine;
pub mod proto;
pub mod records;
pub mod schedule;
pub mod sys;

#[cfg(feature = "python")]
mod python;
