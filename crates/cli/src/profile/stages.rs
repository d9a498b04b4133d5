//! `sonde profile tx|rx|scan` (being built).

use clap::Args;

#[derive(Args)]
pub struct StagesArgs {}

#[derive(Clone, Copy, Debug)]
pub enum Path {
    Tx,
    Rx,
    Scan,
}

pub fn run(path: Path, _args: StagesArgs) -> anyhow::Result<()> {
    anyhow::bail!("sonde profile {path:?} is not built yet")
}
