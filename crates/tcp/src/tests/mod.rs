//! State-machine tests against scripted peers: in-memory frames only.

mod challenge;
mod close;
mod ended;
mod handshake;
mod icmp;
mod memory;
mod peer;
mod receive;
mod robustness;
mod send;
mod turns;
