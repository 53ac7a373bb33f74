//! The candidate's worker asking its parent for what its process must never hold (issue 21,
//! point 1): the comparison of its outputs with the reference, and the reference's own
//! latency. Both are computed by the trusted reference worker and judged in the parent, so
//! no reference output ever exists in the process a candidate runs in.
//!
//! In the middle of a request the worker writes a [`Call`] line on its reply channel and
//! reads the parent's [`Answer`] line from its request channel (`protocol.rs`); a check's
//! outputs go through the worker's payload area (`payload.rs`) once the parent has sized it.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};

use autokernel_core::Stage;
use ndarray::ArrayViewD;

use super::harness::Failure;
use super::payload::PayloadWriter;
use crate::protocol::{Answer, Call, ParentAnswer, ParentCall, ReferenceJob, ReferenceTiming};

/// The worker's side of the channels to its parent, for the request being answered.
pub(super) struct ParentLink<'a> {
    replies: &'a mut File,
    requests: &'a mut BufReader<File>,
    /// Where a check's outputs go; `None` in a worker started by hand (its checks fail).
    payload: Option<&'a mut PayloadWriter>,
    /// The request's id and nonce, echoed in every call.
    id: u64,
    nonce: String,
}

impl<'a> ParentLink<'a> {
    /// The link for request `id` (`nonce`) over the worker's reply and request channels
    /// and its payload area.
    pub(super) fn new(
        replies: &'a mut File,
        requests: &'a mut BufReader<File>,
        payload: Option<&'a mut PayloadWriter>,
        id: u64,
        nonce: String,
    ) -> Self {
        ParentLink {
            replies,
            requests,
            payload,
            id,
            nonce,
        }
    }

    /// Asks the parent to compare `outputs` (float32, any layout) with the reference of
    /// `case` at `stage`: per output, its relative L2 error or why it differs.
    ///
    /// # Errors
    /// [`Failure::Harness`] when the channel broke; [`Failure::Request`] when the parent
    /// could not get the reference (not the candidate's doing: an error, not a verdict).
    pub(super) fn check(
        &mut self,
        stage: Stage,
        case: ReferenceJob,
        outputs: &[ArrayViewD<'_, f32>],
    ) -> Result<Vec<Result<f64, String>>, Failure> {
        let shapes = outputs.iter().map(|o| o.shape().to_vec()).collect();
        let call = ParentCall::Check {
            stage,
            case,
            outputs: shapes,
        };
        match self.call(&call)? {
            ParentAnswer::Ready => {}
            other => return Err(unexpected(&other)),
        }
        let Some(area) = self.payload.as_deref_mut() else {
            return Err(Failure::Harness(format!(
                "no payload area to send outputs through ({} is unset)",
                crate::protocol::env::PAYLOAD_FD
            )));
        };
        // a view that is not contiguous is copied first, in row-major order
        let owned: Vec<Option<Vec<f32>>> = outputs
            .iter()
            .map(|o| o.as_slice().is_none().then(|| o.iter().copied().collect()))
            .collect();
        let parts: Vec<&[f32]> = outputs
            .iter()
            .zip(&owned)
            .map(|(o, copy)| copy.as_deref().or(o.as_slice()).unwrap_or_default())
            .collect();
        // a write that failed (the candidate's process out of address space) is a check
        // that failed, answered as one: the parent is waiting for one of the two calls
        let written = match area.write(&parts) {
            Ok(()) => ParentCall::Written,
            Err(e) => ParentCall::NotWritten {
                reason: e.to_string(),
            },
        };
        match self.call(&written)? {
            ParentAnswer::Checked { results } if results.len() == outputs.len() => Ok(results),
            other => Err(unexpected(&other)),
        }
    }

    /// Asks the parent for the reference's latencies at the timing case `case`.
    ///
    /// # Errors
    /// As [`ParentLink::check`].
    pub(super) fn time_reference(
        &mut self,
        case: ReferenceJob,
        quick: bool,
        compiled: bool,
    ) -> Result<ReferenceTiming, Failure> {
        let call = ParentCall::TimeReference {
            case,
            quick,
            compiled,
        };
        match self.call(&call)? {
            ParentAnswer::Timed(t) => Ok(t),
            other => Err(unexpected(&other)),
        }
    }

    /// Writes `call`, then reads the parent's answer.
    fn call(&mut self, call: &ParentCall) -> Result<ParentAnswer, Failure> {
        let broken =
            |e: std::io::Error| Failure::Harness(format!("the channel to the parent broke: {e}"));
        let mut line = serde_json::to_string(&Call {
            id: self.id,
            nonce: self.nonce.clone(),
            call: call.clone(),
        })
        .map_err(|e| Failure::Harness(e.to_string()))?;
        line.push('\n');
        self.replies.write_all(line.as_bytes()).map_err(broken)?;
        self.replies.flush().map_err(broken)?;
        let mut answer = String::new();
        if self.requests.read_line(&mut answer).map_err(broken)? == 0 {
            return Err(Failure::Harness("the parent closed the channel".into()));
        }
        let answer: Answer = serde_json::from_str(answer.trim_end())
            .map_err(|e| Failure::Harness(format!("unreadable answer from the parent: {e}")))?;
        if answer.id != self.id || answer.nonce != self.nonce {
            return Err(Failure::Harness(
                "the parent's answer is not to this request".into(),
            ));
        }
        Ok(answer.answer)
    }
}

/// The failure an answer other than the one asked for stands for: the parent's error (its
/// reference worker failed) is the request's, never the candidate's verdict.
fn unexpected(answer: &ParentAnswer) -> Failure {
    match answer {
        ParentAnswer::Error { message } => Failure::Request(message.clone()),
        other => Failure::Harness(format!("the parent answered out of turn: {other:?}")),
    }
}
