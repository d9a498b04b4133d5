//! The XDP translation of a filter, as capture uses it (sonde_io::cbpf_xdp).
//! TEMPORARY: filled in when the translation lands.

use sonde_io::{AnyRx, IoConfig};

pub struct Verdicts;

impl Verdicts {
    pub fn load(_program: &[libc::sock_filter]) -> anyhow::Result<Verdicts> {
        anyhow::bail!("the XDP translation is not built yet")
    }

    pub fn matches(&self, _frame: &[u8]) -> std::io::Result<bool> {
        Ok(false)
    }
}

pub fn open_rx(_cfg: &IoConfig, _program: &[libc::sock_filter]) -> anyhow::Result<AnyRx> {
    anyhow::bail!("the XDP translation is not built yet")
}

pub fn unsupported(_err: &anyhow::Error) -> Option<String> {
    None
}
