//! The lab: a scanner namespace and a lab network namespace joined by a veth
//! pair, with a known population of addresses that the lab-side Linux kernel
//! answers for, and the exact ground truth of what it answers. Or, with
//! `bridge`, two hosts A and B joined through a middle namespace (A — mid — B)
//! for tools that sit in the path. Either may have a path (`path`): distance, as a
//! namespace between the two sides where the delay line of sonde-path holds every frame.
//!
//! Takes a lab's name and configuration (`sonde lab up`); gives namespaces, servers and the ground
//! truth (`truth.json`), and scores a scan's or grab's output against it (`score`). Uses no other sonde crate
//! (sonde-wire only in its tests); libbpf-rs loads its XDP responder.
//!
//! THE SAFETY RULE (see LAB.md): every packet stays inside the namespaces made
//! here, addressed to 198.18.0.0/15 (and 2001:2::/48 with an IPv6
//! population). Nothing is created in the root namespace
//! except the namespaces themselves, and no lab namespace gets a route out.
//!
//! Everything is done by shelling out to `ip` and `nft`, so what the lab does
//! can be read (and repeated by hand) from the commands in this crate.
#![deny(unsafe_code)]

pub mod bridge;
mod ca;
mod cmd;
mod config;
mod counters;
mod cpus;
mod dns;
pub mod dns_tree;
mod files;
mod http;
mod netns;
mod nft;
pub mod path;
mod responder;
pub mod score;
mod server;
mod services;
mod setup;
mod state;
mod truth;
mod xdp;

pub use config::{
    field_matches, parse_services, sender_cpus, validate_name, LabConfig, LabService, LabStatus,
    Responder, ServiceStatus, Sink, ADDR_PLACEHOLDER, DNS_PORT, EXPECT_FIELDS, HTTPS_PORT,
    HTTP_PORT,
};
pub use counters::{net_counters, received, scan_counters, IfCounters};
pub use cpus::{cpu_list, online_cpus, parse_cpu_list};
pub use dns_tree::{serve_slow, DnsTreeConfig, DnsTreeStatus};
pub use files::sha256_hex;
pub use http::{big_body, BIG_PATH};
pub use netns::{
    check_interface, current_lab, current_ns, describe_ns, enter_net_ns, enter_ns, enter_scan_ns,
    exec, list, run_here, status, where_am_i,
};
pub use server::{serve, serve_silent};
pub use setup::{down, up, up_with_path};
pub use truth::{
    banner_line, http_body, is_responsive, is_responsive6, is_silent, truth, truth_as, truth_csv,
    Answer, Expect, Service, Truth, TruthFormat,
};
