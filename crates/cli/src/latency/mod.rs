//! `sonde latency` (being built).

use clap::Args;

#[derive(Args)]
pub struct LatencyArgs {}

pub fn run(_args: LatencyArgs) -> anyhow::Result<()> {
    anyhow::bail!("sonde latency is not built yet")
}
