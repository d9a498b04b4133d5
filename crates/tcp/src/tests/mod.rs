//! State-machine tests against scripted peers: in-memory frames only.

mod close;
mod handshake;
mod memory;
mod peer;
mod receive;
mod robustness;
mod send;
