//! The lab's TCP server on its own: `sonde-lab-serve --ports 80,443`.
//! `sonde lab up` runs the same code as `sonde lab __serve`; this binary lets
//! the lab crate's tests (and people without the CLI) use it.

use anyhow::{anyhow, Context, Result};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ports = match args.as_slice() {
        [flag, list] if flag == "--ports" => parse_ports(list)?,
        _ => return Err(anyhow!("usage: sonde-lab-serve --ports 80,443")),
    };
    match sonde_lab::serve(&ports)? {}
}

fn parse_ports(list: &str) -> Result<Vec<u16>> {
    list.split(',')
        .map(|p| {
            p.trim()
                .parse()
                .with_context(|| format!("bad port {p:?} in --ports {list}"))
        })
        .collect()
}
