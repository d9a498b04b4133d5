//! The kernel's path: a connected UDP socket (a datagram above the MTU leaves as IPv4
//! fragments) and a TCP connection with TCP_NODELAY, both to the lab's discard sink; and, on
//! a second socket of each, the kernel's own view of a send through SO_TIMESTAMPING: the
//! moment its packet entered the queueing layer (TX_SCHED) and the moment the driver took it
//! (TX_SOFTWARE), read from the socket's error queue.
//!
//! The kernel stamps one packet per send: for UDP the first fragment (the head of the
//! datagram), for TCP the segment holding the send's last byte. So SO_TIMESTAMPING alone
//! gives UDP's start and TCP's stop but not the other; the tap (see `peer`) gives both.

use std::io::{self, IoSliceMut, Write};
use std::net::{SocketAddrV4, TcpStream, UdpSocket};
use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

use anyhow::anyhow;
use nix::sys::socket::{
    recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, SockaddrIn, TimestampingFlag,
};

use super::Proto;

/// A kernel socket connected to the sink.
pub enum KernelSocket {
    Udp(UdpSocket),
    Tcp(TcpStream),
}

/// What SO_TIMESTAMPING reported for one send, CLOCK_REALTIME ns.
#[derive(Clone, Copy, Debug, Default)]
pub struct TxStamps {
    /// The packet entered the queueing layer (`__dev_queue_xmit`).
    pub sched_ns: Option<i128>,
    /// The driver (veth) took the packet (`skb_tx_timestamp`).
    pub software_ns: Option<i128>,
}

/// `SCM_TSTAMP_SND` and `SCM_TSTAMP_SCHED` in `sock_extended_err.ee_info`.
const TSTAMP_SND: u32 = 0;
const TSTAMP_SCHED: u32 = 1;

impl KernelSocket {
    /// Connects to `sink`; with `timestamping`, asks for TX_SCHED and TX_SOFTWARE timestamps
    /// (one of each per send, with OPT_ID, without the packet's bytes: OPT_TSONLY).
    pub fn connect(proto: Proto, sink: SocketAddrV4, timestamping: bool) -> anyhow::Result<Self> {
        let what = format!("{} to {sink}", proto.name());
        let socket = match proto {
            Proto::Udp => {
                let s = UdpSocket::bind("0.0.0.0:0")?;
                s.connect(sink)
                    .map_err(|e| anyhow!("cannot connect {what}: {e}"))?;
                KernelSocket::Udp(s)
            }
            Proto::Tcp => {
                let s = TcpStream::connect_timeout(&sink.into(), Duration::from_secs(2))
                    .map_err(|e| anyhow!("cannot connect {what}: {e}"))?;
                s.set_nodelay(true)?;
                KernelSocket::Tcp(s)
            }
        };
        if timestamping {
            let flags = TimestampingFlag::SOF_TIMESTAMPING_TX_SOFTWARE
                | TimestampingFlag::SOF_TIMESTAMPING_SOFTWARE
                | TimestampingFlag::SOF_TIMESTAMPING_OPT_ID
                | TimestampingFlag::SOF_TIMESTAMPING_OPT_TSONLY
                | TimestampingFlag::from_bits_retain(libc::SOF_TIMESTAMPING_TX_SCHED);
            setsockopt(&socket.as_fd(), sockopt::Timestamping, &flags)
                .map_err(|e| anyhow!("the kernel refused SO_TIMESTAMPING on {what}: {e}"))?;
        }
        Ok(socket)
    }

    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            KernelSocket::Udp(s) => s.as_fd(),
            KernelSocket::Tcp(s) => s.as_fd(),
        }
    }

    /// Sends `payload` whole: one datagram, or until TCP has taken every byte.
    pub fn send(&mut self, payload: &[u8]) -> io::Result<()> {
        match self {
            KernelSocket::Udp(s) => {
                let sent = s.send(payload)?;
                if sent != payload.len() {
                    return Err(io::Error::other(format!(
                        "sent {sent} of {} bytes",
                        payload.len()
                    )));
                }
                Ok(())
            }
            KernelSocket::Tcp(s) => s.write_all(payload),
        }
    }

    /// Reads the error queue empty: the last SCHED and SND timestamps in it.
    pub fn take_stamps(&mut self) -> anyhow::Result<TxStamps> {
        let mut stamps = TxStamps::default();
        loop {
            let mut data = [0u8; 64];
            let mut iov = [IoSliceMut::new(&mut data)];
            let mut cmsg = nix::cmsg_space!(
                [nix::sys::time::TimeSpec; 3],
                libc::sock_extended_err,
                libc::sockaddr_in
            );
            let flags = MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT;
            let msg = match recvmsg::<SockaddrIn>(
                self.as_fd().as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                flags,
            ) {
                Ok(msg) => msg,
                Err(nix::errno::Errno::EAGAIN) => return Ok(stamps),
                Err(e) => return Err(anyhow!("reading the socket's error queue: {e}")),
            };
            let (mut at, mut kind) = (None, None);
            for c in msg.cmsgs()? {
                match c {
                    ControlMessageOwned::ScmTimestampsns(ts) => {
                        at = Some(
                            ts.system.tv_sec() as i128 * 1_000_000_000
                                + ts.system.tv_nsec() as i128,
                        );
                    }
                    ControlMessageOwned::Ipv4RecvErr(err, _)
                        if err.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING =>
                    {
                        kind = Some(err.ee_info);
                    }
                    _ => {}
                }
            }
            match (kind, at) {
                (Some(TSTAMP_SCHED), Some(t)) => stamps.sched_ns = Some(t),
                (Some(TSTAMP_SND), Some(t)) => stamps.software_ns = Some(t),
                _ => {}
            }
        }
    }
}
