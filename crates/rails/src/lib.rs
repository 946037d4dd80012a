//! Read/write separation between the mechanisms and the devices (Flash on Rails §4, eRails
//! §3-7). Built so far: [`schedule`], the pure role schedule (which colours read and which write
//! at any instant) and the throughput and buffer bounds that size it; [`buffer`], a reader-role
//! device's bounded write buffer; [`plan`], the read plan the reliability manager asks (any
//! healthy device, or the window's devices); [`separated`], the devices that carry it out
//! (buffering, flushing, back-pressure, the adaptive window) and the journal that makes
//! buffered writes survive a power failure; [`journal`], that journal's on-device format.

pub mod buffer;
pub mod journal;
pub mod plan;
pub mod schedule;
pub mod separated;

pub use buffer::{BufferError, Pending, ToFlush, WriteBuffer};
pub use plan::{AnyHealthy, ReadPlan, ScheduledReads};
pub use schedule::{
    window_buffers_hold, write_bound, write_buffer_bytes_min, Role, Schedule, ScheduleConfig,
    ScheduleError, WindowChoice, WindowSizer,
};
pub use separated::{
    AdaptiveWindow, DeviceCounters, DeviceSnapshot, Durability, FailureListener, FrameLoad,
    JournalRecovery, Rails, RailsAndDevices, RailsConfig, Separated,
};
