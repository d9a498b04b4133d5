//! `sonde intercept`: a user-space packet filter that takes traffic off its path, decides on
//! it in batches, and sends it on with each flow in order.
//!
//! Takes the host's own packets (an NFQUEUE rule) or the traffic between two interfaces, and rules
//! (or a program's own [`Filter`]); gives each packet a verdict, sent on in order, and counts of
//! what happened. Uses sonde-io (NFQUEUE, packet rings) and sonde-wire (parsing and rewriting
//! headers).
//!
//! Data flow: [`path`] takes traffic off the kernel's path (an NFQUEUE rule, or a netdev table
//! that stops the kernel forwarding between two interfaces) → [`stack`] (NFQUEUE, batched
//! receive and verdicts) or [`bridge`] (packet rings on two interfaces) hand each packet to a
//! [`Filter`] — sonde's [`RuleSet`] or a program's own — → the verdict sends it on, rewritten,
//! or drops it; [`counters`] and [`flow::OrderCheck`] say what happened. [`workers`] runs a thread
//! per queue or ring pair and stops them all when one fails.
#![deny(unsafe_code)]

pub mod bridge;
pub mod cleanup;
mod command;
pub mod counters;
pub mod filter;
pub mod flow;
pub mod guard;
pub mod owner;
pub mod path;
pub mod rewrite;
pub mod rules;
pub mod stack;
pub mod workers;

pub use counters::{ThreadCounters, Totals};
pub use filter::{Filter, Link, Packet, Then, Verdict};
pub use rewrite::Rewrite;
pub use rules::{Action, Rule, RuleCounter, RuleSet};
