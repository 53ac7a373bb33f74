//! The worker process: the parent's side ([`client`]) and the child's ([`serve`]).
pub(crate) mod client;
pub(crate) mod serve;
