//! What passes between a worker's connection and the supervisor of one task: the task's
//! events ([`TaskEvent`]), where a frame goes ([`Route`]), and the pause/resume [`Controls`].

use hearth_protocol::worker::{TaskDone, TaskFailure, TaskId};
use tokio::sync::mpsc;

/// What a worker's connection hands to the supervisor of one task.
#[derive(Debug)]
pub enum TaskEvent {
    Text(String),
    /// Hearth workers: the tokens behind the text since the last count.
    Tokens(u32),
    Done(TaskDone),
    Failed(TaskFailure),
    /// The end frame.
    End,
}

/// Where a worker's frame for a task goes.
#[derive(Debug)]
pub enum Route {
    Live(mpsc::UnboundedSender<TaskEvent>),
    /// The hub stopped it; late frames are expected.
    Retired,
    Unknown,
}

/// Where a provider that can pause and resume its tasks takes those controls.
pub type Controls = mpsc::Sender<(TaskId, hearth_protocol::cluster::ControlAction)>;
