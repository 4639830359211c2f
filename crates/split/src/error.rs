//! Why a model could not be split ([`SplitError`]): the answer of [`Splits::start`] that
//! the doors report.
//!
//! [`Splits::start`]: crate::Splits::start

/// Why a model could not be split.
#[derive(Debug, thiserror::Error)]
pub enum SplitError {
    #[error("no model named {0} in the models folder")]
    Unknown(String),
    #[error("{0} is split already")]
    Already(String),
    #[error("{0} has no layer count in its header, so it cannot be split")]
    NoLayers(String),
    #[error("the cluster is off, so there are no peers to split over")]
    NoCluster,
    #[error("no peer shares its memory: {0}")]
    NoPeer(String),
    #[error("not enough memory to split {model}: {why}")]
    NoRoom { model: String, why: String },
    #[error("starting the worker process: {0}")]
    Worker(#[from] std::io::Error),
    #[error("the split of {0} was ended while it started")]
    Stopped(String),
}
