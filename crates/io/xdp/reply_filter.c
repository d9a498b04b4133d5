// SPDX-License-Identifier: GPL-2.0
//
// sonde's reply filter for AF_XDP receive. Attached to the scan interface, it
// hands the AF_XDP socket of the receiving queue only the frames that can be
// replies to sonde: addressed to sonde's own IPv4 or IPv6 address, of a
// protocol sonde takes, and for TCP and UDP to one of sonde's source ports.
// Which TCP segments count is configured: a SYN scan takes only SYN-ACKs and
// RSTs, a user-space TCP client every segment. Every other frame goes on to
// the OS stack (XDP_PASS), as does every frame of a queue with no socket in
// `xsks_map`.
//
// The host shares the address, so the filter takes nothing the host's own
// traffic needs:
// - ICMP echo replies only with the identifier of sonde's echo requests (the
//   host's ping uses another);
// - ICMP errors only when the datagram they quote is one of sonde's probes:
//   sent from sonde's address, and TCP or UDP from a port of the range (of a
//   protocol taken) or an echo request with sonde's identifier. The errors the
//   host's TCP needs (fragmentation needed, packet too big) quote its own
//   segments, from its own ports;
// - with SPARE_HOST_SOCKETS, no TCP or UDP frame (nor an error quoting one)
//   whose flow a socket of the host owns: the kernel's socket tables are asked
//   (bpf_skc_lookup_tcp finds listeners, connections and TIME-WAIT too;
//   bpf_sk_lookup_udp bound and connected sockets) in the namespace of the
//   interface, before a frame is taken. An application may bind a port of
//   sonde's range itself (resolvers pick source ports up to 65535).
//
// Fragments: only a first fragment carries the transport header, so only a
// first fragment can be recognised as a reply (and is taken if it is one);
// later fragments (offset != 0) always go to the OS stack, which will never
// complete the datagram. IPv6 extension headers (hop-by-hop, routing,
// fragment, destination options) are walked, at most IPV6_MAX_EXT of them.
//
// build.rs compiles it with `clang -O2 -g -target bpf -c`; the loader is
// src/xdp_filter.rs, whose `FilterCfg` mirrors `struct filter_cfg` below.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

// filter_cfg.protos bits.
#define TAKE_TCP_SYNACK_RST (1u << 0) // TCP segments with SYN+ACK or RST
#define TAKE_UDP (1u << 1)
#define TAKE_ICMP (1u << 2)
#define TAKE_ICMP6 (1u << 3)
#define TAKE_TCP_ALL (1u << 4) // every TCP segment
#define TAKE_ECHO (1u << 5) // echo replies carrying filter_cfg.echo_id
#define SPARE_HOST_SOCKETS (1u << 6) // pass the flows of the host's sockets
#define STAMP_ARRIVALS (1u << 7) // append the arrival time to each frame taken

// STAMP_ARRIVALS: each frame taken grows by this trailer: filter_cfg.stamp_mark, then
// bpf_ktime_get_ns() (CLOCK_MONOTONIC), both in host order. The receiver checks the mark and
// takes the trailer off; a frame that cannot grow goes unstamped, and one that goes to the
// OS after all (no socket on its queue) is shrunk back first.
#define STAMP_LEN 16

#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10

#define IPPROTO_ICMPV6_ 58
#define ICMP_ECHO_REPLY 0
#define ICMP_ECHO_REQUEST 8
#define ICMPV6_ECHO_REQUEST 128
#define ICMPV6_ECHO_REPLY 129
// Every ICMP and ICMPv6 message starts with 8 bytes; an error's quote follows.
#define ICMP_HEAD_LEN 8
#define IPV4_FRAG_OFFSET 0x1fff
#define IPV6_FRAG_OFFSET 0xfff8

// IPv6 extension headers walked to find the transport header.
#define NEXTHDR_HOP 0
#define NEXTHDR_ROUTING 43
#define NEXTHDR_FRAGMENT 44
#define NEXTHDR_DEST 60
// At most this many extension headers (a fixed bound the verifier accepts);
// a reply to a scan carries none, or one or two at most.
#define IPV6_MAX_EXT 6

// sonde's addresses and what it takes; one entry, written by the loader.
struct filter_cfg {
	__u32 ipv4;      // destination, network order; 0: take no IPv4
	__u8 ipv6[16];   // destination; all zero: take no IPv6
	__u32 protos;    // TAKE_* bits
	__u16 port_lo;   // TCP/UDP destination port range, host order, inclusive
	__u16 port_hi;
	__u16 echo_id;   // with TAKE_ECHO: sonde's echo identifier, host order
	__u16 reserved;
	__u64 stamp_mark; // with STAMP_ARRIVALS: the trailer's first 8 bytes
};

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct filter_cfg);
} filter_cfg SEC(".maps");

// The header fields read, laid out as on the wire (sonde's own structs: no
// <linux/ip.h>, <linux/ipv6.h>, <linux/tcp.h> or <linux/udp.h> needed).
struct ipv4_hdr {
	__u8 ver_ihl;
	__u8 tos;
	__be16 tot_len;
	__be16 id;
	__be16 frag_off;
	__u8 ttl;
	__u8 protocol;
	__sum16 check;
	__be32 saddr;
	__be32 daddr;
};

struct ipv6_hdr {
	__be32 ver_tc_flow;
	__be16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
	__u8 saddr[16];
	__u8 daddr[16];
};

// Hop-by-hop, routing and destination options headers begin alike; their
// length counts 8-octet units beyond the first 8.
struct ipv6_opt_hdr {
	__u8 nexthdr;
	__u8 hdrlen;
};

struct ipv6_frag_hdr {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off; // offset in 8-octet units << 3 | M flag
	__be32 id;
};

struct ports_hdr {
	__be16 source;
	__be16 dest;
};

// An ICMP or ICMPv6 echo request or reply.
struct echo_hdr {
	__u8 type;
	__u8 code;
	__sum16 check;
	__be16 id;
	__be16 seq;
};

// TCP up to the flags byte (the struct itself is padded to 16 bytes: bound
// checks use `&flags + 1`).
struct tcp_head {
	__be16 source;
	__be16 dest;
	__be32 seq;
	__be32 ack_seq;
	__u8 doff;
	__u8 flags;
};

static __always_inline int ipv6_is(const __u8 *a, const __u8 *b)
{
	__u64 a0, a1, b0, b1;

	__builtin_memcpy(&a0, a, 8);
	__builtin_memcpy(&a1, a + 8, 8);
	__builtin_memcpy(&b0, b, 8);
	__builtin_memcpy(&b1, b + 8, 8);
	return a0 == b0 && a1 == b1;
}

static __always_inline int ipv6_unset(const __u8 *a)
{
	__u64 a0, a1;

	__builtin_memcpy(&a0, a, 8);
	__builtin_memcpy(&a1, a + 8, 8);
	return (a0 | a1) == 0;
}

static __always_inline int in_range(__be16 port, const struct filter_cfg *cfg)
{
	__u16 p = bpf_ntohs(port);

	return p >= cfg->port_lo && p <= cfg->port_hi;
}

// Whether a TCP or UDP header at `l4` goes to a port of the range.
static __always_inline int port_in_range(void *l4, void *end,
					 const struct filter_cfg *cfg)
{
	struct ports_hdr *ports = l4;

	if ((void *)(ports + 1) > end)
		return 0;
	return in_range(ports->dest, cfg);
}

// Whether the TCP segment at `l4` is one sonde takes: any segment to the
// port range (a user-space TCP client's), or only a SYN-ACK or RST there
// (what answers a SYN probe; a stray ACK or data stays with the OS).
static __always_inline int tcp_takes(void *l4, void *end,
				     const struct filter_cfg *cfg)
{
	struct tcp_head *tcp = l4;

	if (cfg->protos & TAKE_TCP_ALL)
		return port_in_range(l4, end, cfg);
	if (!(cfg->protos & TAKE_TCP_SYNACK_RST) ||
	    (void *)(&tcp->flags + 1) > end)
		return 0;
	if (!port_in_range(l4, end, cfg))
		return 0;
	return (tcp->flags & (TCP_SYN | TCP_ACK)) == (TCP_SYN | TCP_ACK) ||
	       (tcp->flags & TCP_RST);
}

// Whether a socket of the host owns the TCP or UDP flow that a packet from
// `remote`:`rport` to `local`:`lport` belongs to (addresses in the frame, 16
// bytes if `v6` else 4; ports as on the wire). Asked in the namespace of the
// interface the frame arrived on (for a test run: the caller's).
static __always_inline int host_owns(struct xdp_md *ctx, __u8 proto, int v6,
				     const void *remote, const void *local,
				     __be16 rport, __be16 lport)
{
	struct bpf_sock_tuple tuple = {};
	struct bpf_sock *sk;
	__u32 size;

	if (v6) {
		__builtin_memcpy(tuple.ipv6.saddr, remote, 16);
		__builtin_memcpy(tuple.ipv6.daddr, local, 16);
		tuple.ipv6.sport = rport;
		tuple.ipv6.dport = lport;
		size = sizeof(tuple.ipv6);
	} else {
		__builtin_memcpy(&tuple.ipv4.saddr, remote, 4);
		__builtin_memcpy(&tuple.ipv4.daddr, local, 4);
		tuple.ipv4.sport = rport;
		tuple.ipv4.dport = lport;
		size = sizeof(tuple.ipv4);
	}
	if (proto == IPPROTO_TCP)
		sk = bpf_skc_lookup_tcp(ctx, &tuple, size, BPF_F_CURRENT_NETNS,
					0);
	else
		sk = bpf_sk_lookup_udp(ctx, &tuple, size, BPF_F_CURRENT_NETNS,
				       0);
	if (!sk)
		return 0;
	bpf_sk_release(sk);
	return 1;
}

// Whether sonde takes the TCP segment or UDP datagram at `l4` (from `remote`
// to `local`): one it asked for, to its ports, of no socket of the host.
static __always_inline int flow_takes(struct xdp_md *ctx,
				      const struct filter_cfg *cfg, __u8 proto,
				      int v6, const void *remote,
				      const void *local, void *l4, void *end)
{
	struct ports_hdr *ports = l4;

	if (proto == IPPROTO_TCP) {
		if (!tcp_takes(l4, end, cfg))
			return 0;
	} else if (!(cfg->protos & TAKE_UDP) || !port_in_range(l4, end, cfg)) {
		return 0;
	}
	if (!(cfg->protos & SPARE_HOST_SOCKETS))
		return 1;
	if ((void *)(ports + 1) > end)
		return 0;
	return !host_owns(ctx, proto, v6, remote, local, ports->source,
			  ports->dest);
}

// Whether the echo message at `l4` is of `type` and carries sonde's
// identifier.
static __always_inline int echo_is_ours(void *l4, void *end, __u8 type,
					const struct filter_cfg *cfg)
{
	struct echo_hdr *echo = l4;

	if (!(cfg->protos & TAKE_ECHO) || (void *)(echo + 1) > end)
		return 0;
	return echo->type == type && bpf_ntohs(echo->id) == cfg->echo_id;
}

// Whether the transport header at `l4`, quoted by an ICMP error about a
// datagram sent from `local` to `remote`, is one of sonde's probes: TCP or
// UDP (of a protocol sonde takes) from a port of the range, whose flow no
// socket of the host owns, or an echo request with sonde's identifier.
static __always_inline int quoted_probe(struct xdp_md *ctx,
					const struct filter_cfg *cfg,
					__u8 proto, int v6,
					const void *remote, const void *local,
					void *l4, void *end)
{
	struct ports_hdr *ports = l4;

	switch (proto) {
	case IPPROTO_TCP:
		if (!(cfg->protos & (TAKE_TCP_SYNACK_RST | TAKE_TCP_ALL)))
			return 0;
		break;
	case IPPROTO_UDP:
		if (!(cfg->protos & TAKE_UDP))
			return 0;
		break;
	case IPPROTO_ICMP:
		return !v6 && echo_is_ours(l4, end, ICMP_ECHO_REQUEST, cfg);
	case IPPROTO_ICMPV6_:
		return v6 && echo_is_ours(l4, end, ICMPV6_ECHO_REQUEST, cfg);
	default:
		return 0;
	}
	if ((void *)(ports + 1) > end || !in_range(ports->source, cfg))
		return 0;
	if (!(cfg->protos & SPARE_HOST_SOCKETS))
		return 1;
	return !host_owns(ctx, proto, v6, remote, local, ports->dest,
			  ports->source);
}

// Whether the IPv4 datagram quoted at `quoted` by an ICMP error is one of
// sonde's probes (see quoted_probe): from sonde's address, and no later
// fragment (which has no transport header).
static __always_inline int quotes_probe4(struct xdp_md *ctx,
					 const struct filter_cfg *cfg,
					 void *quoted, void *end)
{
	struct ipv4_hdr *ip = quoted;
	__u32 ihl;

	if ((void *)(ip + 1) > end)
		return 0;
	if ((ip->ver_ihl >> 4) != 4 || ip->saddr != cfg->ipv4)
		return 0;
	if (ip->frag_off & bpf_htons(IPV4_FRAG_OFFSET))
		return 0;
	ihl = (ip->ver_ihl & 0x0f) * 4;
	if (ihl < sizeof(*ip))
		return 0;
	return quoted_probe(ctx, cfg, ip->protocol, 0, &ip->daddr, &ip->saddr,
			    quoted + ihl, end);
}

// The same for an IPv6 datagram quoted by an ICMPv6 error. sonde's probes
// carry no extension headers: a quote with any is not one of them.
static __always_inline int quotes_probe6(struct xdp_md *ctx,
					 const struct filter_cfg *cfg,
					 void *quoted, void *end)
{
	struct ipv6_hdr *ip6 = quoted;

	if ((void *)(ip6 + 1) > end)
		return 0;
	if ((ip6->ver_tc_flow & bpf_htonl(0xf0000000)) !=
		    bpf_htonl(0x60000000) ||
	    !ipv6_is(ip6->saddr, cfg->ipv6))
		return 0;
	return quoted_probe(ctx, cfg, ip6->nexthdr, 1, ip6->daddr, ip6->saddr,
			    ip6 + 1, end);
}

// Whether the transport header at `l4` (protocol `proto`, of the address
// family given by `v6`, in a packet from `remote` to `local`) is one sonde
// takes.
static __always_inline int takes(struct xdp_md *ctx,
				 const struct filter_cfg *cfg, __u8 proto,
				 int v6, const void *remote, const void *local,
				 void *l4, void *end)
{
	__u8 *type = l4;

	switch (proto) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
		return flow_takes(ctx, cfg, proto, v6, remote, local, l4, end);
	case IPPROTO_ICMP:
		if (v6 || !(cfg->protos & TAKE_ICMP) || (void *)(type + 1) > end)
			return 0;
		// sonde's echo replies, and the errors that quote one of its
		// probes; requests (echo, timestamp, ...) stay with the OS,
		// which answers them.
		if (*type == ICMP_ECHO_REPLY)
			return echo_is_ours(l4, end, ICMP_ECHO_REPLY, cfg);
		if (*type == 3 || *type == 4 || *type == 11 || *type == 12)
			return quotes_probe4(ctx, cfg, l4 + ICMP_HEAD_LEN, end);
		return 0;
	case IPPROTO_ICMPV6_:
		if (!v6 || !(cfg->protos & TAKE_ICMP6) ||
		    (void *)(type + 1) > end)
			return 0;
		// Echo reply and errors (1-4) as for ICMP; neighbour discovery,
		// MLD and echo requests stay with the OS.
		if (*type == ICMPV6_ECHO_REPLY)
			return echo_is_ours(l4, end, ICMPV6_ECHO_REPLY, cfg);
		if (*type >= 1 && *type <= 4)
			return quotes_probe6(ctx, cfg, l4 + ICMP_HEAD_LEN, end);
		return 0;
	default:
		return 0;
	}
}

static __always_inline int is_ipv6_ext(__u8 next)
{
	return next == NEXTHDR_HOP || next == NEXTHDR_ROUTING ||
	       next == NEXTHDR_FRAGMENT || next == NEXTHDR_DEST;
}

// The transport header of the IPv6 packet `ip6`, past its extension headers,
// with its protocol in *proto; NULL for a later fragment (no transport
// header), a truncated header, or more than IPV6_MAX_EXT extension headers.
static __always_inline void *ipv6_transport(struct ipv6_hdr *ip6, void *end,
					    __u8 *proto)
{
	void *cursor = ip6 + 1;
	__u8 next = ip6->nexthdr;
	int i;

#pragma unroll
	for (i = 0; i < IPV6_MAX_EXT; i++) {
		if (next == NEXTHDR_FRAGMENT) {
			struct ipv6_frag_hdr *frag = cursor;

			if ((void *)(frag + 1) > end ||
			    (frag->frag_off & bpf_htons(IPV6_FRAG_OFFSET)))
				return NULL;
			next = frag->nexthdr;
			cursor = frag + 1;
		} else if (is_ipv6_ext(next)) {
			struct ipv6_opt_hdr *opt = cursor;

			if ((void *)(opt + 1) > end)
				return NULL;
			next = opt->nexthdr;
			cursor += ((__u32)opt->hdrlen + 1) * 8;
		} else {
			break;
		}
	}
	if (is_ipv6_ext(next))
		return NULL;
	*proto = next;
	return cursor;
}

static __always_inline int matches(struct xdp_md *ctx, void *data, void *end,
				   const struct filter_cfg *cfg)
{
	struct ethhdr *eth = data;
	void *l3 = eth + 1;

	if (l3 > end)
		return 0;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct ipv4_hdr *ip = l3;
		__u32 ihl;

		if ((void *)(ip + 1) > end || cfg->ipv4 == 0)
			return 0;
		if ((ip->ver_ihl >> 4) != 4 || ip->daddr != cfg->ipv4)
			return 0;
		// Later fragments carry no transport header; a first one
		// (MF set, offset 0) is judged by the header it carries.
		if (ip->frag_off & bpf_htons(IPV4_FRAG_OFFSET))
			return 0;
		ihl = (ip->ver_ihl & 0x0f) * 4;
		if (ihl < sizeof(*ip))
			return 0;
		return takes(ctx, cfg, ip->protocol, 0, &ip->saddr, &ip->daddr,
			     l3 + ihl, end);
	}
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6_hdr *ip6 = l3;
		void *l4;
		__u8 proto = 0;

		if ((void *)(ip6 + 1) > end || ipv6_unset(cfg->ipv6))
			return 0;
		if ((ip6->ver_tc_flow & bpf_htonl(0xf0000000)) !=
			    bpf_htonl(0x60000000) ||
		    !ipv6_is(ip6->daddr, cfg->ipv6))
			return 0;
		l4 = ipv6_transport(ip6, end, &proto);
		if (!l4)
			return 0;
		return takes(ctx, cfg, proto, 1, ip6->saddr, ip6->daddr, l4,
			     end);
	}
	return 0;
}

// Appends the trailer of STAMP_ARRIVALS: the receiver then times the frame by when it
// arrived, not by when it was read (a loop that sleeps reads replies in batches). Returns 1
// when the frame grew (by STAMP_LEN), 0 when it could not.
static __always_inline int stamp_arrival(struct xdp_md *ctx, __u64 mark)
{
	__u64 now = bpf_ktime_get_ns();

	if (bpf_xdp_adjust_tail(ctx, STAMP_LEN))
		return 0;
	// The trailer's offset from the start (the verifier takes no arithmetic on data_end),
	// bounded for it: a frame taken here is far shorter than 16 KiB.
	__u64 len = bpf_xdp_get_buff_len(ctx);

	if (len < STAMP_LEN || len > 0x3fff)
		return 1;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u8 *trailer = data + ((len - STAMP_LEN) & 0x3fff);

	if ((void *)(trailer + STAMP_LEN) > end)
		return 1;
	__builtin_memcpy(trailer, &mark, 8);
	__builtin_memcpy(trailer + 8, &now, 8);
	return 1;
}

SEC("xdp")
int sonde_reply_filter(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 zero = 0;
	struct filter_cfg *cfg = bpf_map_lookup_elem(&filter_cfg, &zero);

	if (!cfg || !matches(ctx, data, end, cfg))
		return XDP_PASS;
	int grown = 0;

	if (cfg->protos & STAMP_ARRIVALS)
		grown = stamp_arrival(ctx, cfg->stamp_mark);
	// No socket on this queue (receivers opening or closing): the frame goes to the OS
	// instead, as it arrived, without the trailer that was never on the wire.
	long action = bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);

	if (action != XDP_REDIRECT && grown)
		bpf_xdp_adjust_tail(ctx, -STAMP_LEN);
	return action;
}

char _license[] SEC("license") = "GPL";
