//! Why a scheduler operation was refused.

use std::fmt;

/// Why an operation was refused. A refused operation changes nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// A delay or duration argument that is NaN or negative.
    InvalidDelay { name: &'static str, value: f64 },
    /// A `now` that is NaN or infinite.
    InvalidTime(f64),
    /// A configuration value out of range.
    InvalidConfig { name: &'static str, message: String },
    /// `done` for a key that is not in flight.
    NotInFlight(String),
    /// More than `u32::MAX` keys at once.
    TooManyKeys,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidDelay { name, value } => {
                write!(f, "{name} must be a number of seconds >= 0, got {value}")
            }
            Error::InvalidTime(value) => {
                write!(f, "now must be a finite number of seconds, got {value}")
            }
            Error::InvalidConfig { name, message } => write!(f, "{name} {message}"),
            Error::NotInFlight(key) => write!(f, "key {key:?} is not in flight"),
            Error::TooManyKeys => write!(f, "too many keys for one scheduler (max 2**32 - 1)"),
        }
    }
}

impl std::error::Error for Error {}
