//! The lab's path: distance between the scanner and the lab network, as sonde's own delay line.
//!
//! Takes the path's flags (`sonde_lab::path::PathConfig`, written by `lab up` to the path's
//! `spec.json`); gives a process, `sonde lab __path --dir DIR`, that runs in the lab's path
//! namespace and forwards every frame between its two interfaces after holding it, and the
//! counters it rewrites to `DIR/stats.json` every 100 ms. Uses sonde-io (packet rings) and
//! sonde-lab (the flags, the counters' form).
//!
//! # Where it sits
//!
//! ```text
//!  sonde-N-scan               sonde-N-path                              sonde-N-net
//!  sx0 ─────────────────── ps ─▶ [rx ring] ─ line "to lab" ─ [tx ring] ─▶ pn ─────────── nx0
//!                             ◀─ [tx ring] ─ line "to scanner" ─ [rx ring] ◀─
//! ```
//!
//! A bump in the wire: it has no address, sends only the frames it took (so ARP, IPv6 ND,
//! the MACs and both responders work as with one veth pair), and a frame taken from one side
//! leaves by the other. The kernel of the path namespace sees the frames too and drops them
//! (they are not for it, and its IPv6 is off). `lab up` turns off TSO, GSO and transmit
//! checksum offload on sx0 and nx0 (as on ax0 in a bridge lab), so every frame is one wire's
//! worth with its checksums complete.
//!
//! # One direction: read, hold, send
//!
//! Each direction is a thread with a TPACKET_V3 receive ring on its side (only frames arriving
//! there: what the other direction sends out of it is not seen) and a raw packet socket on the
//! other, sending with one `sendmmsg` a batch. (Not a transmit ring: its frames go out as pages
//! of the ring itself, and a slot comes back as soon as a socket of the lab queues the frame,
//! while the socket still reads from it.) Its [`line::Line`] does what the flags say to each
//! frame, with time given to it, so the unit tests run it on a fake clock:
//!
//! - **held**: its bytes are copied out of the receive ring into the direction's store
//!   (`store.rs`): one byte ring and one ring of slots, allocated at start and used in arrival
//!   order, with no allocation per frame; memory never written stays unbacked, so the default
//!   of 524,288 frames and 256 MiB a direction costs only what is held.
//! - **due**: a frame arriving at `t` (the kernel's receive stamp, so the receive ring's 1 ms
//!   block timeout adds nothing) is due at `d + rtt/2 + j`, `d` being when the bottleneck lets
//!   it go (`t` without one) and `j` its jitter: a normal deviate of standard deviation
//!   `jitter/√2`, cut at three of those either way (redrawn beyond, and scaled so the cut
//!   deviates still have that spread), never making it due before `d`. Two directions make a
//!   round trip of standard deviation `jitter`. Frames leave in due order, so jitter reorders
//!   them; without it no frame is due before the one that arrived before it.
//!   `--reorder P`: a share P of frames is due at `d`, skipping the hold, so it overtakes the
//!   frames held (netem's `reorder`).
//! - **wheel**: due times go into a timing wheel (`wheel.rs`) of 2^16 ticks of 16.4 µs
//!   (1.07 s a turn; frames due further ahead wait for their turn in their bucket). The
//!   thread sleeps in `ppoll` until the next due time or a new frame (timer slack 1 µs), takes
//!   every frame whose time has come, copies it into a transmit slot and sends the batch. No
//!   frame leaves before its due time; how late they leave is counted (`late_max_ns`,
//!   `late_mean_ns`).
//! - **duplicate, corrupt**: `--duplicate P` holds a second copy of a share P of frames, with
//!   its own draws; `--corrupt P` flips one bit of a share P of the frames held, chosen evenly
//!   among the bits after the Ethernet header, so a checksum catches it (the IPv4 header's, or
//!   the TCP, UDP or ICMP one) but for an IPv6 header's version, traffic class, flow label and
//!   hop limit, which none covers.
//! - **bottleneck**: `--bottleneck RATE` is a link of that rate (frame bytes from the Ethernet
//!   header on, as tc counts) behind a drop-tail queue of `--bottleneck-queue` frames, computed
//!   as each frame arrives (`bottleneck.rs`): its departure is when its last bit has left.
//!   A frame that finds the queue full is dropped. Each direction has its own.
//!
//! The draws come from one PRNG per direction seeded with the lab's `--seed` (xoshiro256**),
//! so a run can be repeated.
//!
//! # Counting
//!
//! Nothing is lost silently: per direction, frames in and out, held now and at most, and each
//! cause of a drop — `queue_full` (the bottleneck), `hold_full` (`--path-frames` held, or the
//! byte store full), `too_long` (longer than a transmit slot, or cut short), `rx_ring_full`
//! (the kernel had no room in the receive ring: `PACKET_STATISTICS`) and `link_dropped` (sent,
//! but the veth could not hand it on: its `tx_dropped`). `frames_in + duplicated
//! = frames_out + held + queue_full + hold_full + too_long`. `lab status` shows them, and
//! notices a delay line that is no longer running.

mod bottleneck;
mod daemon;
mod draw;
pub mod line;
mod store;
mod wheel;

pub use daemon::run;
