//! The lab's DNS tree (`lab up --dns-tree N`): a root, the `test.` and `example.` TLDs and N
//! second-level zones generated from the seed, served by NSD, a slow server and unbound as the
//! recursive resolver, all in the lab's network namespace, with the ground truth of every
//! answer. [`spec`] is the tree itself as pure functions.

pub mod spec;
