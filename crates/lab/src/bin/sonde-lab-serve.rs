//! The lab's TCP servers on their own: `sonde-lab-serve --ports 80,443` (accept and close) or
//! `sonde-lab-serve --silent --ports 65534` (accept and hold, for the silent hosts), and the DNS
//! tree's slow server (`sonde-lab-serve --slow-dns 300`, its delay in milliseconds).
//! `sonde lab up` runs the same code as `sonde lab __serve`; this binary lets the lab crate's
//! tests (and people without the CLI) use it.

use anyhow::{anyhow, bail, Context, Result};

const USAGE: &str = "usage: sonde-lab-serve [--silent] --ports 80,443 | --slow-dns MS";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, ms] = args.as_slice() {
        if flag == "--slow-dns" {
            let ms: u64 = ms
                .parse()
                .with_context(|| format!("bad delay {ms:?} in --slow-dns (milliseconds)"))?;
            match sonde_lab::serve_slow(std::time::Duration::from_millis(ms))? {}
        }
    }
    let (silent, list) = match args.as_slice() {
        [flag, list] if flag == "--ports" => (false, list),
        [s, flag, list] if s == "--silent" && flag == "--ports" => (true, list),
        _ => return Err(anyhow!(USAGE)),
    };
    let ports = parse_ports(list)?;
    if !silent {
        match sonde_lab::serve(&ports)? {}
    }
    match ports.as_slice() {
        [port] => match sonde_lab::serve_silent(*port)? {},
        _ => bail!("the silent server takes one port; {USAGE}"),
    }
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
