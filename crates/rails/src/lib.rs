//! Read/write separation between the mechanisms and the devices (Flash on Rails §4, eRails
//! §3-7). Built so far: [`schedule`], the pure role schedule (which colours read and which write
//! at any instant) and the throughput and buffer bounds that size it; [`buffer`], a reader-role
//! device's bounded write buffer; [`plan`], the read plan the reliability manager asks (any
//! healthy device, or the window's devices). The I/O scheduler that carries writes out
//! (flushing, throttling, intent log) comes next.

pub mod buffer;
pub mod plan;
pub mod schedule;
pub mod separated;

pub use buffer::{BufferError, Pending, WriteBuffer};
pub use plan::{AnyHealthy, ReadPlan, ScheduledReads};
pub use schedule::{
    write_bound, write_buffer_bytes_min, Role, Schedule, ScheduleConfig, ScheduleError,
    WindowChoice, WindowSizer,
};
pub use separated::{
    AdaptiveWindow, DeviceCounters, DeviceSnapshot, Rails, RailsAndDevices, RailsConfig, Separated,
};
