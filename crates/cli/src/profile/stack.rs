//! `sonde profile stack` (being built).

use clap::Args;

#[derive(Args)]
pub struct StackArgs {}

pub fn run(_args: StackArgs) -> anyhow::Result<()> {
    anyhow::bail!("sonde profile stack is not built yet")
}
