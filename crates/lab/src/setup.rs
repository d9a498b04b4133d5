//! Bringing a lab up and taking it down.

use anyhow::{anyhow, bail, Result};
use ipnet::{Ipv4Net, Ipv6Net};
use serde_json::Value;

use crate::ca::Ca;
use crate::cmd::{in_ns, ip_line};
use crate::config::{
    validate, validate_name, LabConfig, LabStatus, Responder, Sink, GATEWAY_IP, GATEWAY_IP6,
    LINK_NET, LINK_NET6, LOSS_SINK_IF, NET_IF, SCAN_IF, SCAN_IP, SCAN_IP6, SILENT_PORT,
};
use crate::dns_tree::spec::{resolvers, Tree, ANSWERER_NET, ROOT_SERVER, SERVER_NET};
use crate::dns_tree::{self, DnsTreeStatus};
use crate::http::BIG_PATH;
use crate::netns::{net_ns, ns_exists, scan_ns};
use crate::responder::{self, ResponderSpec, TreeSpec};
use crate::truth::{Population, Population6, Truth};
use crate::{bridge, cpus, http, nft, path, server, services, state, xdp};

/// The DNS tree's prefixes: its servers and resolvers, and the XDP answerer's.
const DNS_TREE_NETS: [ipnet::Ipv4Net; 2] = [SERVER_NET, ANSWERER_NET];

/// Fixed, locally administered MACs (02:00 + the IPv4 address), so frames in
/// captures are recognisable; each lab has its own link, so labs never clash.
const SCAN_MAC: &str = "02:00:c6:13:ff:01";
const GATEWAY_MAC: &str = "02:00:c6:13:ff:fe";

/// Sysctls of both namespaces. No forwarding, ever (the safety rule), and no
/// IPv6 link-local address on new interfaces: with none there is no DAD,
/// router solicitation or MLD report, so the veth carries only scan traffic.
const COMMON_SYSCTLS: &[&str] = &[
    "net.ipv4.ip_forward=0",
    "net.ipv6.conf.all.forwarding=0",
    "net.ipv6.conf.default.addr_gen_mode=1",
    "net.ipv6.conf.default.accept_dad=0",
    "net.ipv6.conf.default.router_solicitations=0",
];

/// Sysctls of the net namespace, whose kernel answers the scans: no ICMP rate
/// limits, deep accept and SYN queues. (msgs_per_sec stays at 1e6: the kernel
/// multiplies it by up to HZ in 32 bits.)
const NET_SYSCTLS: &[&str] = &[
    "net.ipv4.icmp_ratelimit=0",
    "net.ipv4.icmp_msgs_per_sec=1000000",
    "net.ipv4.icmp_msgs_burst=1000000",
    "net.core.somaxconn=65535",
    "net.ipv4.tcp_max_syn_backlog=65535",
    "net.ipv4.tcp_syncookies=1",
];

/// IPv6 sysctls of the net namespace, with an IPv6 population: no ICMPv6
/// rate limit (echo replies are not limited anyway; unreachables are).
const NET_SYSCTLS6: &[&str] = &["net.ipv6.icmp.ratelimit=0"];

/// Creates lab `cfg.name` and starts its servers: nginx with `cfg.http`, unbound with
/// `cfg.dns`, and the lab's own server `server_cmd` (the program and its leading arguments,
/// e.g. `sonde lab __serve` or `sonde-lab-serve`): `server_cmd --ports P,…` for the open ports
/// nginx does not serve, and `server_cmd --silent --ports 65534` when some hosts are silent.
/// On any failure everything made so far is removed again.
pub fn up(cfg: &LabConfig, server_cmd: &[String]) -> Result<LabStatus> {
    up_with_path(cfg, server_cmd, &[])
}

/// [`up`], with `path_cmd` (e.g. `sonde lab __path`) the delay line of `cfg.path`, run in the
/// path namespace with `--dir` its folder added (see path/mod.rs).
pub fn up_with_path(
    cfg: &LabConfig,
    server_cmd: &[String],
    path_cmd: &[String],
) -> Result<LabStatus> {
    validate(cfg)?;
    let name = &cfg.name;
    if ns_exists(&scan_ns(name))
        || ns_exists(&net_ns(name))
        || state::exists(name)
        || bridge::exists(name)
        || path::exists(name)
    {
        bail!("lab {name:?} already exists (remove it with: sonde lab down --name {name})");
    }
    if !cfg.served_ports().is_empty() && server_cmd.is_empty() {
        bail!(
            "lab {name:?} has open ports {:?} but no server command to serve them",
            cfg.served_ports()
        );
    }
    if cfg.silent_share > 0.0 && server_cmd.is_empty() {
        bail!("lab {name:?} has silent hosts but no server command to hold their connections");
    }
    if cfg.dns_tree.is_some_and(|t| t.servers) && server_cmd.is_empty() {
        bail!("lab {name:?} has a DNS tree but no server command to run its slow server");
    }
    if cfg.path.is_some() && path_cmd.is_empty() {
        bail!("lab {name:?} has a path but no command to run its delay line");
    }
    if !nix::unistd::geteuid().is_root() {
        bail!("bringing up a lab needs root (network namespaces); run as root");
    }
    build(cfg, server_cmd, path_cmd).map_err(|e| {
        let cleanup = match teardown(name) {
            Ok(()) => "everything made so far was removed".to_string(),
            Err(t) => format!("cleaning up failed too: {t}"),
        };
        anyhow!("cannot bring up lab {name:?}: {e} ({cleanup})")
    })
}

/// Removes lab `name`: its processes, namespaces (which takes the veth pair,
/// routes, nftables and XDP with them) and state files. Works on a lab that a
/// crash left half-made, and on a bridge lab (`bridge::up`) too.
pub fn down(name: &str) -> Result<()> {
    validate_name(name)?;
    let bridged = bridge::exists(name);
    let normal = ns_exists(&scan_ns(name))
        || ns_exists(&net_ns(name))
        || state::exists(name)
        || (!bridged && path::exists(name));
    if !normal && !bridged {
        bail!("lab {name:?} does not exist (see: sonde lab list)");
    }
    let mut result = Ok(());
    if bridged {
        result = bridge::teardown(name);
    }
    if normal {
        result = result.and(teardown(name));
    }
    result.map_err(|e| anyhow!("cannot remove lab {name:?}: {e}"))
}

/// Best-effort removal of everything a lab may have; keeps going past
/// failures and reports the first.
fn teardown(name: &str) -> Result<()> {
    let (scan, net) = (scan_ns(name), net_ns(name));
    let mut first_error = None;
    let mut note = |r: Result<()>| {
        if let Err(e) = r {
            first_error.get_or_insert(e);
        }
    };
    // The recorded servers first: they may have outlived their namespace's name.
    if let Ok(Some(saved)) = state::load_saved(name) {
        if let Some(pid) = saved.status.server_pid {
            server::stop_if_running(pid, &saved.server_cmd);
        }
        for started in &saved.started {
            server::stop_if_same(started);
        }
    }
    // What runs in the scanner namespace (a scan, an intercept, the shell of a `lab exec`)
    // would keep it alive once it has no name, with its rules and programs, where nothing
    // could find it: ended as the net namespace's servers are (an intercept removes its rules
    // on SIGTERM).
    for ns in [&scan, &net] {
        if ns_exists(ns) {
            note(server::stop_all(ns));
        }
    }
    note(path::teardown(name));
    for ns in [&net, &scan] {
        if ns_exists(ns) {
            note(ip_line(&format!("netns del {ns}")).map(drop));
        }
    }
    note(state::remove(name));
    first_error.map_or(Ok(()), Err)
}

fn build(cfg: &LabConfig, server_cmd: &[String], path_cmd: &[String]) -> Result<LabStatus> {
    let (scan, net) = (scan_ns(&cfg.name), net_ns(&cfg.name));
    for ns in [&scan, &net] {
        ip_line(&format!("netns add {ns}"))?;
        // Before the veth exists, so its ends get these defaults.
        sysctl(ns, COMMON_SYSCTLS)?;
        ip_line(&format!("-n {ns} link set dev lo up"))?;
    }
    sysctl(&net, NET_SYSCTLS)?;
    make_link(cfg, &scan, &net)?;
    route(cfg.population, &scan, &net)?;
    let keep = if cfg.dns_tree.is_some() {
        // The tree's servers and the XDP answerer: local addresses of the lab, like the
        // population's (a population that covers them already has them).
        for prefix in DNS_TREE_NETS {
            ip_line(&format!("-n {net} route add local {prefix} dev lo"))?;
        }
        DNS_TREE_NETS.to_vec()
    } else {
        Vec::new()
    };
    if let Some(population6) = cfg.population6 {
        sysctl(&net, NET_SYSCTLS6)?;
        link6(&scan, &net)?;
        route6(population6, &scan, &net)?;
    }
    // Before anything crosses the link (the services' greetings are read across it).
    let cpus = cfg.target_cpus.as_deref();
    let path_status = match &cfg.path {
        Some(p) => Some(path::start(
            &cfg.name, p, cfg.seed, path_cmd, cpus, cfg.queues,
        )?),
        None => None,
    };
    let pop = Population {
        net: cfg.population.trunc(),
        seed: cfg.seed,
        share: cfg.responsive,
    };
    let pop6 = cfg.population6.map(|p| Population6 {
        net: p.trunc(),
        seed: cfg.seed,
        share: cfg.responsive,
    });
    let v6 = pop6.is_some();
    if cfg.loss > 0.0 {
        // Down for good: what is sent to it vanishes (see nft.rs).
        ip_line(&format!("-n {net} link add {LOSS_SINK_IF} type ifb"))?;
    }
    let truth = Truth::new(pop, pop6, cfg);
    let silent = nft::Silent {
        addrs: truth.silent().collect(),
        ports: cfg.open_ports(),
    };
    nft::load(
        &net,
        &pop,
        pop6.as_ref(),
        cfg.loss,
        &silent,
        &keep,
        &state::scratch(&cfg.name, ".nft")?,
    )?;
    let xdp_mode = match cfg.sink {
        Sink::Drop => Some(xdp::attach_drop(&cfg.name, &net)?.to_string()),
        Sink::Kernel => None,
    };
    let gateway_mac = mac_of(&net, NET_IF)?;
    // One XDP program on nx0 is the responder, the DNS tree's answerer, or both (responder.rs).
    let responder_mode = if cfg.responder == Responder::Xdp || cfg.xdp_dns() {
        let spec = ResponderSpec {
            pop,
            pop6,
            open: cfg.open_ports(),
            dns: cfg.dns,
            http: cfg.http,
            tai_utc: responder::tai_utc_offset()?,
            mac: responder::parse_mac(&gateway_mac)?,
            windows: responder::SynAckWindows::of_namespace(&net)?,
            kernel_responds: cfg.responder == Responder::Kernel,
            tree: cfg.dns_tree.map(|t| TreeSpec {
                seed: cfg.seed,
                zones: t.zones,
                hosts: t.hosts,
                answer: t.answerer,
            }),
        };
        let mode = responder::attach(&net, &spec)?;
        (cfg.responder == Responder::Xdp).then(|| mode.to_string())
    } else {
        None
    };
    if let Some(cpus) = cpus {
        cpus::steer(&net, NET_IF, cpus, cfg.queues)?;
    }
    let mut started: Vec<_> = path_status.iter().map(path::started).collect();
    let served = cfg.served_ports();
    let server = if served.is_empty() {
        None
    } else {
        let cmd = server_args(server_cmd, &[], &served);
        let pid = server::start(&net, cpus, &cmd, &served, v6, "the lab server")?;
        Some((pid, cmd))
    };
    let silent_server = if silent.addrs.is_empty() || silent.ports.is_empty() {
        None
    } else {
        let cmd = server_args(server_cmd, &["--silent"], &[SILENT_PORT]);
        let pid = server::start(&net, cpus, &cmd, &[SILENT_PORT], v6, "the silent server")?;
        started.extend(server::started(pid, "silent server"));
        Some((pid, cmd))
    };
    // The CA that signs every TLS server's certificate (nginx on 443, the services).
    let ca = if (cfg.http && !cfg.xdp_http()) || !cfg.services.is_empty() {
        Some(Ca::make(&cfg.name, pop.net, pop6.map(|p| p.net))?)
    } else {
        None
    };
    let nginx = if let Some(ca) = ca.as_ref().filter(|_| cfg.http && !cfg.xdp_http()) {
        let h = http::start(&cfg.name, &net, v6, cpus, ca)?;
        started.extend(server::started(h.pid, "nginx"));
        Some(h)
    } else {
        None
    };
    let dns_pid = if cfg.dns {
        let pid = crate::dns::start(&cfg.name, &net, v6, cpus)?;
        started.extend(server::started(pid, "unbound"));
        Some(pid)
    } else {
        None
    };
    let dns_tree = match cfg.dns_tree {
        Some(tree_cfg) => {
            let tree = Tree::new(cfg.seed, tree_cfg.zones, tree_cfg.hosts);
            if tree_cfg.servers {
                let slow =
                    server_args_with(server_cmd, &["--slow-dns", &tree_cfg.slow_ms.to_string()]);
                let running = dns_tree::start(&cfg.name, &net, &tree, &slow, cpus)?;
                for (pid, what) in &running.servers {
                    started.extend(server::started(*pid, what));
                }
            }
            Some(DnsTreeStatus {
                zones: tree_cfg.zones,
                hosts: tree_cfg.hosts,
                seed: cfg.seed,
                slow_ms: tree_cfg.slow_ms,
                root: ROOT_SERVER,
                resolvers: if tree_cfg.servers {
                    resolvers()
                } else {
                    Vec::new()
                },
                answerers: tree_cfg.answerer.then(|| ANSWERER_NET.to_string()),
            })
        }
        None => None,
    };
    // On failure teardown stops what did start: every process in the net namespace.
    // A live host to read the greetings from, as a client sees them (none past a drop sink).
    let probe = truth
        .addresses()
        .find(|a| truth.responds(*a) && !truth.is_silent(*a))
        .filter(|_| cfg.sink == Sink::Kernel);
    let running = match &ca {
        Some(ca) => services::start(&cfg.name, &net, v6, cpus, &cfg.services, probe, ca)?,
        None => services::Running::default(),
    };
    for (pid, what) in &running.servers {
        started.extend(server::started(*pid, what));
    }
    let st = LabStatus {
        name: cfg.name.clone(),
        scan_ns: scan.clone(),
        net_ns: net.clone(),
        scan_if: SCAN_IF.into(),
        net_if: NET_IF.into(),
        scan_ip: SCAN_IP,
        scan_mac: mac_of(&scan, SCAN_IF)?,
        gateway_ip: GATEWAY_IP,
        gateway_mac,
        population: pop.net.to_string(),
        responsive: cfg.responsive,
        responsive_count: truth.responsive_count(),
        tcp_open: cfg.open_ports(),
        seed: cfg.seed,
        queues: cfg.queues,
        sink: cfg.sink.to_string(),
        loss: cfg.loss,
        server_pid: server.as_ref().map(|s| s.0),
        xdp_mode,
        population6: pop6.map(|p| p.net.to_string()),
        scan_ip6: pop6.map(|_| SCAN_IP6),
        gateway_ip6: pop6.map(|_| GATEWAY_IP6),
        dns_pid,
        http: cfg.http,
        nginx_pid: nginx.as_ref().map(|h| h.pid),
        nginx_connections: nginx.as_ref().map(|h| h.connections),
        tls_cert_sha256: nginx.as_ref().map(|h| h.cert_sha256.clone()),
        tls_cert: nginx.as_ref().map(|h| h.cert_pem.display().to_string()),
        tls_ca: ca.as_ref().map(|ca| ca.pem().display().to_string()),
        big_path: nginx.as_ref().map(|_| BIG_PATH.to_string()),
        big_len: nginx.as_ref().map(|h| h.big_len),
        big_sha256: nginx.as_ref().map(|h| h.big_sha256.clone()),
        silent_share: cfg.silent_share,
        silent_count: silent.addrs.len() as u64,
        silent_pid: silent_server.as_ref().map(|s| s.0),
        responder: cfg.responder.to_string(),
        responder_mode,
        target_cpus: cfg.target_cpus.clone(),
        services: running.services,
        path: path_status,
        dns_tree,
    };
    state::save(&state::Saved {
        status: st.clone(),
        server_cmd: server.map(|s| s.1).unwrap_or_default(),
        silent_cmd: silent_server.map(|s| s.1).unwrap_or_default(),
        started,
    })?;
    Ok(st)
}

/// `server_cmd flags… --ports P,…`
fn server_args(server_cmd: &[String], flags: &[&str], ports: &[u16]) -> Vec<String> {
    let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
    let mut cmd = server_cmd.to_vec();
    cmd.extend(flags.iter().map(|f| f.to_string()));
    cmd.extend(["--ports".to_string(), ports.join(",")]);
    cmd
}

/// `server_cmd args…`
fn server_args_with(server_cmd: &[String], args: &[&str]) -> Vec<String> {
    let mut cmd = server_cmd.to_vec();
    cmd.extend(args.iter().map(|a| a.to_string()));
    cmd
}

/// `ip netns exec NS sysctl -q -w k=v …`
fn sysctl(ns: &str, settings: &[&str]) -> Result<()> {
    let mut args = vec!["-q", "-w"];
    args.extend_from_slice(settings);
    in_ns(ns, "sysctl", &args).map(drop)
}

/// The veth pair, created directly inside the two namespaces (nothing ever
/// exists in the root namespace), addressed and up; or with a path two pairs, sx0 — ps and
/// pn — nx0, through the path namespace. With the XDP web server the scanner's end computes its
/// checksums too.
fn make_link(cfg: &LabConfig, scan: &str, net: &str) -> Result<()> {
    let queues = cfg.queues;
    let q = format!("numtxqueues {queues} numrxqueues {queues}");
    match &cfg.path {
        None => ip_line(&format!(
            "link add {SCAN_IF} netns {scan} address {SCAN_MAC} {q} type veth \
             peer name {NET_IF} netns {net} address {GATEWAY_MAC} {q}"
        ))
        .map(drop)?,
        Some(_) => {
            let scan_end = path::End {
                ns: scan,
                ifname: SCAN_IF,
                mac: Some(SCAN_MAC),
            };
            let net_end = path::End {
                ns: net,
                ifname: NET_IF,
                mac: Some(GATEWAY_MAC),
            };
            path::make_links(&cfg.name, queues, &scan_end, &net_end)?;
        }
    }
    let len = LINK_NET.prefix_len();
    ip_line(&format!("-n {scan} addr add {SCAN_IP}/{len} dev {SCAN_IF}"))?;
    ip_line(&format!(
        "-n {net} addr add {GATEWAY_IP}/{len} dev {NET_IF}"
    ))?;
    // The lab's hosts send one TCP segment per packet, as on a real 1500-byte path: a client
    // reading raw frames (grab) gets no 64 KB TSO frames, and loss draws per segment.
    ip_line(&format!("-n {net} link set dev {NET_IF} gso_max_segs 1"))?;
    // And each with its checksums complete, as from a NIC: with transmit checksum offload on,
    // the lab's kernel would leave them partial on the veth (the pseudo-header sum only), and
    // a client that verifies what it reads over AF_XDP (grab) could not tell them from
    // corrupted ones.
    in_ns(net, "ethtool", &["-K", NET_IF, "tx", "off"])?;
    bridge::check_offloads_off(net, NET_IF, &["tx-checksumming"])?;
    // The XDP web server checks every segment's checksum, and the scanner's kernel (curl,
    // ZGrab2, grab's kernel backend) would leave them partial: computed in software instead,
    // as for a NIC without checksum offload. So for the DNS answerer, which checks UDP's, and
    // whose answer the lab's kernel would otherwise "complete" on the way out (answerer.c).
    if cfg.xdp_http() || cfg.xdp_dns() {
        in_ns(scan, "ethtool", &["-K", SCAN_IF, "tx", "off"])?;
        bridge::check_offloads_off(scan, SCAN_IF, &["tx-checksumming"])?;
    }
    // The delay line reads and sends what a 1500-byte wire carries, complete.
    if cfg.path.is_some() {
        path::host_offloads_off(scan, SCAN_IF)?;
        path::host_offloads_off(net, NET_IF)?;
    }
    ip_line(&format!("-n {scan} link set dev {SCAN_IF} up"))?;
    ip_line(&format!("-n {net} link set dev {NET_IF} up"))?;
    Ok(())
}

/// Routes and neighbours. The scanner's default route points at nx0, which
/// is in the lab: nothing leads out of the pair. The net namespace owns the
/// whole population (a `local` route on lo), so its kernel answers for every
/// address. Permanent neighbours both ways: no ARP on the link.
fn route(population: Ipv4Net, scan: &str, net: &str) -> Result<()> {
    let pop = population.trunc();
    ip_line(&format!(
        "-n {scan} route add default via {GATEWAY_IP} dev {SCAN_IF}"
    ))?;
    ip_line(&format!("-n {net} route add local {pop} dev lo"))?;
    // A population covering the link subnet (e.g. all of 198.18.0.0/15)
    // would make the scanner's own address local to the lab too; this more
    // specific route in the same (local) table keeps the link on the link.
    ip_line(&format!(
        "-n {net} route add table local unicast {LINK_NET} dev {NET_IF} src {GATEWAY_IP}"
    ))?;
    let permanent = "nud permanent";
    ip_line(&format!(
        "-n {scan} neigh replace {GATEWAY_IP} lladdr {GATEWAY_MAC} dev {SCAN_IF} {permanent}"
    ))?;
    ip_line(&format!(
        "-n {net} neigh replace {SCAN_IP} lladdr {SCAN_MAC} dev {NET_IF} {permanent}"
    ))?;
    Ok(())
}

/// IPv6 on the veth pair: both ends without DAD or router solicitations (no
/// link-local addresses either, see COMMON_SYSCTLS), and each a global
/// address in LINK_NET6 marked `nodad`, usable at once.
fn link6(scan: &str, net: &str) -> Result<()> {
    let len = LINK_NET6.prefix_len();
    for (ns, ifname, addr) in [(scan, SCAN_IF, SCAN_IP6), (net, NET_IF, GATEWAY_IP6)] {
        let conf = format!("net.ipv6.conf.{ifname}");
        sysctl(
            ns,
            &[
                &format!("{conf}.disable_ipv6=0"),
                &format!("{conf}.accept_dad=0"),
                &format!("{conf}.router_solicitations=0"),
                &format!("{conf}.accept_ra=0"),
            ],
        )?;
        ip_line(&format!(
            "-n {ns} -6 addr add {addr}/{len} dev {ifname} nodad"
        ))?;
    }
    Ok(())
}

/// IPv6 routes and neighbours, as `route` does for IPv4: the scanner's
/// default route leads to nx0 only, the net namespace owns the population on
/// lo, and permanent neighbours both ways mean no neighbour discovery.
fn route6(population6: Ipv6Net, scan: &str, net: &str) -> Result<()> {
    let pop = population6.trunc();
    ip_line(&format!(
        "-n {scan} -6 route add default via {GATEWAY_IP6} dev {SCAN_IF}"
    ))?;
    ip_line(&format!("-n {net} -6 route add local {pop} dev lo"))?;
    let permanent = "nud permanent";
    ip_line(&format!(
        "-n {scan} -6 neigh replace {GATEWAY_IP6} lladdr {GATEWAY_MAC} dev {SCAN_IF} {permanent}"
    ))?;
    ip_line(&format!(
        "-n {net} -6 neigh replace {SCAN_IP6} lladdr {SCAN_MAC} dev {NET_IF} {permanent}"
    ))?;
    Ok(())
}

/// The MAC address of `ifname` as the kernel reports it.
fn mac_of(ns: &str, ifname: &str) -> Result<String> {
    let text = ip_line(&format!("-n {ns} -j link show dev {ifname}"))?;
    let json: Value = serde_json::from_str(&text)
        .map_err(|e| anyhow!("cannot parse `ip -j link show dev {ifname}` in {ns}: {e}"))?;
    json[0]["address"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("`ip -j link show dev {ifname}` in {ns} has no address"))
}
