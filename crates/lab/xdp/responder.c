// SPDX-License-Identifier: GPL-2.0
//
// The lab's XDP responder (`sonde lab up --responder xdp`), attached to nx0,
// the lab's end of the veth pair. It answers the scanner's probes itself, with
// XDP_TX, so the lab's targets cost next to nothing:
//
//   TCP SYN        -> SYN-ACK on an open port (MSS, and SACK-permitted,
//                     timestamps and window scale when the SYN offers them,
//                     laid out and padded byte for byte as Linux does; the
//                     timestamp echoes the SYN's), RST|ACK on a closed one
//   ICMP echo      -> echo reply (ICMPv6 likewise)
//   UDP            -> ICMP (ICMPv6) port unreachable quoting the whole datagram
//
// and with HTTP_80 (`--http`) it is the lab's web server on port 80 too, with
// no state at all (see "The HTTP server" below): the SYN-ACK's sequence number
// is a keyed cookie of the connection, every later segment is checked against
// it, and a request `GET / ` gets nginx's reply, data and FIN in one segment.
//
// for the responsive addresses of the population, which it picks with the
// same keyed hash and threshold as the lab's truth (src/truth.rs). The other
// population addresses are silent: their frames are dropped, as the nftables
// rules drop them for the kernel responder.
//
// Anything it cannot answer exactly as the kernel would goes on to the kernel
// (XDP_PASS), whose nftables rules and servers are still in place: ARP and
// neighbour discovery, the link addresses, IPv4 options, IPv6 extension
// headers, fragments, frames to another MAC or from another source than the
// scanner's address (the only neighbour the lab knows; with HTTP_80 any host
// of the link, see from_peer4), datagrams longer
// than MAX_L4, bad checksums (the kernel drops those; a frame from a socket
// of the scanner's own kernel carries a partial checksum, which the kernel
// accepts: with HTTP_80 the lab turns the scanner's checksum offload off, so
// its kernel's segments arrive whole), TCP segments other than a SYN (but
// those to port 80 with HTTP_80), ICMP other than echo requests, and with
// DNS_53 everything to port 53 (the lab's DNS server).
//
// build.rs compiles it with `clang -O2 -g -target bpf -c`; the loader is
// src/responder.rs, whose `ResponderCfg` writes `struct responder_cfg` below.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

// Tables in .rodata itself: clang 14 puts constant strings and arrays in
// mergeable sections (.rodata.str1.1, .rodata.cst16) while its BTF lists them
// in .rodata, and the kernel refuses that BTF; without BTF, libbpf loads the
// program as if it had no global functions, and each is verified again at
// every call.
#define RODATA __attribute__((section(".rodata")))

// responder_cfg.flags bits.
#define EVERY_ADDRESS (1u << 0) // share 1: every address answers
#define HAS_V6 (1u << 1)        // an IPv6 population
#define DNS_53 (1u << 2)        // port 53 belongs to the lab's DNS server
#define HTTP_80 (1u << 3)       // this program serves HTTP on port 80 (--http)
#define KERNEL_RESPONDS (1u << 4) // the kernel answers the probes: only the DNS answerer here

// 2^64 / golden ratio, SplitMix64's increment (truth.rs: GOLDEN).
#define GOLDEN 0x9e3779b97f4a7c15ULL
// Salt of the initial sequence numbers, so they are not the responsiveness hash.
#define ISN_SALT 0x7c3a91e55b0d24f3ULL
// Salt of the sequence number of a SYN that offered window scaling (see cookie()).
#define WSCALE_SALT 0x3b5c8e1f9a0d6247ULL

// The longest transport segment answered here (checksums are summed over it
// by a bounded loop); longer ones go to the kernel. So a quoted datagram is
// always whole, as the kernel quotes it (it quotes up to 548 bytes for IPv4,
// 1232 for IPv6).
#define MAX_L4 512

#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_PSH 0x08
#define TCP_ACK 0x10
#define TCP_ECE 0x40
#define TCP_CWR 0x80

#define IPPROTO_ICMPV6_ 58
#define IPV4_MF_OFFSET 0x3fff
#define IPV4_DF 0x4000
// What Linux puts in its replies' IP headers (net.ipv4.ip_default_ttl and
// ip6 hop limit) and its ICMP errors' precedence bits.
#define REPLY_TTL 64
#define IPTOS_PREC_INTERNETCONTROL 0xc0
// MSS of a 1500-byte link (the veth's MTU).
#define MSS4 1460
#define MSS6 1440

#define ETH_LEN 14
#define IP4_LEN 20
#define IP6_LEN 40
#define TCP_LEN 20
#define ICMP_LEN 8

// Set by the loader (entry 0 of `responder_cfg`); addresses in host order.
struct responder_cfg {
	__u64 key;       // mix64(seed + GOLDEN), as truth.rs keys addr_hash
	__u64 threshold; // an address answers when its hash is below this
	__u64 net6_hi, net6_lo, mask6_hi, mask6_lo; // the IPv6 population
	__u64 peer6_hi, peer6_lo; // the scanner's IPv6 address
	__u32 flags;
	__u32 net4, mask4;        // the IPv4 population
	__u32 link4, link_mask4;  // the link subnet, which never answers
	__u32 peer4;              // the scanner's IPv4 address
	__u8 mac[6];              // nx0's MAC
	__u8 wscale;              // the window scale Linux offers in its SYN-ACKs
	__u8 pad;
	__u16 window[4];          // its SYN-ACK window, by [v6 << 1 | timestamps]
	__u32 tai_utc;            // CLOCK_TAI - UTC in seconds, for the HTTP Date
	__u32 gateway4;           // nx0's own IPv4 address
	__u64 gateway6_lo;        // the low half of nx0's IPv6 address (the link's /64)
	__u64 open[1024];         // open TCP ports, a bitmap
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct responder_cfg);
} responder_cfg SEC(".maps");

// Headers as on the wire (sonde's own structs, as in sonde-io's reply filter).
struct eth_hdr {
	__u8 dst[6];
	__u8 src[6];
	__be16 proto;
};

struct ipv4_hdr {
	__u8 ver_ihl;
	__u8 tos;
	__be16 tot_len;
	__be16 id;
	__be16 frag_off;
	__u8 ttl;
	__u8 protocol;
	__u16 check;
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

struct tcp_hdr {
	__be16 source;
	__be16 dest;
	__be32 seq;
	__be32 ack_seq;
	__u8 doff; // data offset << 4
	__u8 flags;
	__be16 window;
	__u16 check;
	__be16 urg_ptr;
};

struct udp_hdr {
	__be16 source;
	__be16 dest;
	__be16 len;
	__u16 check;
};

struct icmp_hdr {
	__u8 type;
	__u8 code;
	__u16 check;
	__u32 rest;
};

// Checksums: sums of 16-bit words as they lie in memory (one's-complement
// addition does not care about byte order, so the folded, inverted result
// is stored back as it is).

static __always_inline __u16 fold(__u64 sum)
{
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return sum;
}

// The sum of `len` bytes at `p` (a trailing odd byte padded with zero), or
// -1 if they run past `end` or `len` is over MAX_L4.
static __always_inline __s64 sum_bytes(void *p, __u32 len, void *end)
{
	__u64 sum = 0;
	__u32 i;

	if (len > MAX_L4)
		return -1;
	for (i = 0; i < MAX_L4; i += 2) {
		__u16 *w = p + i;

		if (i + 2 > len)
			break;
		// Opaque to clang, so it cannot turn the bound checks into
		// arithmetic on `end`, which the verifier refuses.
		asm volatile("" : "+r"(end));
		if ((void *)(w + 1) > end)
			return -1;
		sum += *w;
	}
	if (len & 1) {
		__u8 *last = p + ((len - 1) & (MAX_L4 - 1));

		if ((void *)(last + 1) > end)
			return -1;
		// Little-endian: a lone first byte is the low half of its word.
		sum += *last;
	}
	return sum;
}

static __always_inline __u64 sum_words(const void *p, int words)
{
	const __u16 *w = p;
	__u64 sum = 0;
	int i;

#pragma unroll
	for (i = 0; i < 20; i++)
		if (i < words)
			sum += w[i];
	return sum;
}

// The word at `p` changes from `old` to `new`: RFC 1624's HC' = ~(~HC + ~m + m').
static __always_inline void csum_replace(__u16 *check, __u16 old, __u16 new)
{
	*check = ~fold((__u64)(__u16)~*check + (__u16)~old + new);
}

static __always_inline __u64 mix64(__u64 z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

// Whether the address with this keyed hash answers (truth.rs: below_share).
static __always_inline int answers(const struct responder_cfg *cfg, __u64 hash)
{
	return (cfg->flags & EVERY_ADDRESS) || hash < cfg->threshold;
}

static __always_inline int port_open(const struct responder_cfg *cfg,
				     __u16 port)
{
	return (cfg->open[port >> 6] >> (port & 63)) & 1;
}

static __always_inline int mac_is(const __u8 *a, const __u8 *b)
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3] &&
	       a[4] == b[4] && a[5] == b[5];
}

static __always_inline __u64 load_be64(const __u8 *p)
{
	__u64 v;

	__builtin_memcpy(&v, p, 8);
	return bpf_be64_to_cpu(v);
}

// What a probe's reply is built from, read before the frame is rewritten.
struct probe {
	__u8 src_mac[6];
	__u8 dst_mac[6];
	__u32 saddr[4]; // as in the frame; IPv4 uses [0]
	__u32 daddr[4];
	__u64 pseudo;   // sum of the addresses (the same both ways)
	__u8 tclass;    // IPv4 TOS / IPv6 traffic class
	int v6;
};

// What a segment's options say: a SYN's offers, and any segment's timestamp.
struct tcp_options {
	__u32 tsval;
	__u8 ts, sack, wscale;
};

// Reads the `len` option bytes at offset `at` of the frame into `o`; a
// malformed option ends the reading, as it does in Linux. A global function,
// so the verifier checks it once, on its own: inlined, its loop's many states
// multiplied everything around it past the verifier's limit.
__attribute__((noinline)) int read_options(struct xdp_md *ctx, __u32 at,
					   __u32 len, struct tcp_options *o)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u8 *opts;
	__u32 off = 0;

	if (!o || at > 256 || len > 40)
		return 0;
	// The verifier must see `at` bounded where it is added: hidden from
	// clang, which would otherwise drop the mask as redundant.
	asm volatile("" : "+r"(at), "+r"(len));
	opts = data + (at & 0x1ff);
	len &= 63;
	while (off < len) {
		__u8 *p = opts + (off & 63), kind, size;

		if ((void *)(p + 1) > end)
			break;
		kind = p[0];
		if (kind == 0)
			break;
		if (kind == 1) {
			off++;
			continue;
		}
		if ((void *)(p + 2) > end)
			break;
		size = p[1];
		if (size < 2 || off + size > len)
			break;
		if (kind == 8 && size == 10) {
			if ((void *)(p + 10) > end)
				break;
			o->ts = 1;
			o->tsval = ((__u32)p[2] << 24) | ((__u32)p[3] << 16) |
				   ((__u32)p[4] << 8) | p[5];
		} else if (kind == 4 && size == 2) {
			o->sack = 1;
		} else if (kind == 3 && size == 3) {
			o->wscale = 1;
		}
		off += size;
	}
	return 0;
}

// The server's initial sequence number for a connection: a keyed hash of its
// addresses and ports, different for every connection and the same for a
// repeated SYN. It leaves out the client's own sequence number, which later
// segments do not tell, so that every segment of the connection can be checked
// against it with no state kept (a SYN cookie). It is salted by whether the SYN
// offered window scaling, which the later segments' window depends on and which
// they do not show either.
static __always_inline __u32 cookie(const struct responder_cfg *cfg,
				    const struct probe *pr, __u16 sport,
				    __u16 dport, int wscale)
{
	return mix64(cfg->key ^ ISN_SALT ^
		     ((__u64)pr->saddr[0] << 32 | pr->daddr[0]) ^
		     ((__u64)pr->saddr[3] << 32 | pr->daddr[3]) ^
		     (((__u64)sport << 16 | dport) * GOLDEN) ^
		     (wscale ? WSCALE_SALT : 0));
}

// The reply's Ethernet header: back to where the probe came from.
static __always_inline void write_eth(struct eth_hdr *eth, const struct probe *pr)
{
	__builtin_memcpy(eth->dst, pr->src_mac, 6);
	__builtin_memcpy(eth->src, pr->dst_mac, 6);
	eth->proto = bpf_htons(pr->v6 ? ETH_P_IPV6 : ETH_P_IP);
}

static __always_inline void write_ipv4(struct ipv4_hdr *ip, const struct probe *pr,
				       __u8 tos, __u16 frag_off, __u8 proto,
				       __u16 payload)
{
	ip->ver_ihl = 0x45;
	ip->tos = tos;
	ip->tot_len = bpf_htons(IP4_LEN + payload);
	ip->id = 0;
	ip->frag_off = bpf_htons(frag_off);
	ip->ttl = REPLY_TTL;
	ip->protocol = proto;
	ip->check = 0;
	ip->saddr = pr->daddr[0];
	ip->daddr = pr->saddr[0];
	ip->check = ~fold(sum_words(ip, IP4_LEN / 2));
}

static __always_inline void write_ipv6(struct ipv6_hdr *ip6, const struct probe *pr,
				       __u8 proto, __u16 payload)
{
	ip6->ver_tc_flow = bpf_htonl(0x60000000 | ((__u32)pr->tclass << 20));
	ip6->payload_len = bpf_htons(payload);
	ip6->nexthdr = proto;
	ip6->hop_limit = REPLY_TTL;
	__builtin_memcpy(ip6->saddr, pr->daddr, 16);
	__builtin_memcpy(ip6->daddr, pr->saddr, 16);
}

// Writes the Ethernet and IP headers of a TCP reply of `tcp_len` bytes into a frame
// already resized for it, and returns where its TCP header goes: NULL when the frame is
// shorter than they need (the verifier's check).
static __always_inline struct tcp_hdr *write_tcp_headers(void *data, void *end,
							 const struct probe *pr,
							 __u16 tcp_len)
{
	if (data + ETH_LEN + IP4_LEN + TCP_LEN > end)
		return NULL;
	write_eth(data, pr);
	if (pr->v6) {
		if (data + ETH_LEN + IP6_LEN + TCP_LEN > end)
			return NULL;
		write_ipv6(data + ETH_LEN, pr, IPPROTO_TCP, tcp_len);
		return data + ETH_LEN + IP6_LEN;
	}
	write_ipv4(data + ETH_LEN, pr, 0, IPV4_DF, IPPROTO_TCP, tcp_len);
	return data + ETH_LEN + IP4_LEN;
}

// Resizes the frame to `len` bytes by moving its start (the reply is written
// from scratch), and returns the new start, or NULL.
static __always_inline void *resize(struct xdp_md *ctx, __u32 len)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	long frame_len = end - data;

	// Opaque to clang, which would otherwise fold `len` into arithmetic on
	// the packet pointers, which the verifier refuses.
	asm volatile("" : "+r"(frame_len));
	if (bpf_xdp_adjust_head(ctx, (int)(frame_len - (long)len)))
		return NULL;
	return (void *)(long)ctx->data;
}

// The SYN-ACK's options as Linux writes them (tcp_options_write), only those
// the SYN offered, so the header is exactly as long as Linux's: MSS; then
// SACK-permitted and timestamps sharing a word when both are there, or two
// NOPs before either alone; then NOP and window scale. Into `w` (20 bytes,
// zeroed by the caller); returns the number of 4-byte words, 1 to 5.
static __always_inline __u32 syn_ack_options(const struct tcp_options *o,
					     __u16 mss, __u8 wscale, __u8 *w)
{
	__u32 words = 1;

	w[0] = 2;
	w[1] = 4;
	w[2] = mss >> 8;
	w[3] = mss & 0xff;
	if (o->ts) {
		__u32 now = bpf_ktime_get_ns() / 1000000;

		w[4] = o->sack ? 4 : 1;
		w[5] = o->sack ? 2 : 1;
		w[6] = 8;
		w[7] = 10;
		w[8] = now >> 24;
		w[9] = now >> 16;
		w[10] = now >> 8;
		w[11] = now;
		w[12] = o->tsval >> 24;
		w[13] = o->tsval >> 16;
		w[14] = o->tsval >> 8;
		w[15] = o->tsval;
		words = 4;
	} else if (o->sack) {
		w[4] = 1;
		w[5] = 1;
		w[6] = 4;
		w[7] = 2;
		words = 2;
	}
	if (o->wscale) {
		// At a constant offset in each case, for the verifier.
		__u8 *ws = words == 4 ? w + 16 : words == 2 ? w + 8 : w + 4;

		ws[0] = 1;
		ws[1] = 3;
		ws[2] = 3;
		ws[3] = wscale;
		words++;
	}
	return words;
}

// SYN-ACK (open port) or RST|ACK (closed): the header `th` (`hl` bytes of
// a `seg_len`-byte segment) is read, then the frame becomes the reply.
static __always_inline int answer_syn(struct xdp_md *ctx,
				      const struct responder_cfg *cfg,
				      struct probe *pr, struct tcp_hdr *th,
				      __u32 hl, __u32 seg_len, void *end)
{
	struct tcp_options o = {};
	__u8 options[20] __attribute__((aligned(4))) = {};
	__u32 option_words = 0;
	__u16 sport = th->source, dport = th->dest;
	__u32 seq = bpf_ntohl(th->seq);
	__u8 flags = th->flags, reply_flags;
	__u32 ip_len = pr->v6 ? IP6_LEN : IP4_LEN;
	__u32 tcp_len, reply_seq, reply_ack;
	__u16 window;
	int open = port_open(cfg, bpf_ntohs(dport));
	struct tcp_hdr *rt;
	void *data;
	__u8 *opt;
	__u64 sum;

	if (open) {
		read_options(ctx, (void *)(th + 1) - (void *)(long)ctx->data,
				 hl - TCP_LEN, &o);
		option_words = syn_ack_options(&o, pr->v6 ? MSS6 : MSS4,
					       cfg->wscale, options);
		tcp_len = TCP_LEN + 4 * option_words;
		reply_seq = cookie(cfg, pr, sport, dport, o.wscale);
		// Data in a SYN is not taken (no TCP Fast Open): it acks the SYN.
		reply_ack = seq + 1;
		reply_flags = TCP_SYN | TCP_ACK;
		// ECN asked for with ECE|CWR is agreed, as with tcp_ecn=2.
		if ((flags & (TCP_ECE | TCP_CWR)) == (TCP_ECE | TCP_CWR))
			reply_flags |= TCP_ECE;
		window = cfg->window[(pr->v6 << 1 | o.ts) & 3];
	} else {
		// Linux's reset: seq 0, acking the SYN and any data it held.
		tcp_len = TCP_LEN;
		reply_seq = 0;
		reply_ack = seq + 1 + (seg_len - hl);
		reply_flags = TCP_RST | TCP_ACK;
		window = 0;
	}

	data = resize(ctx, ETH_LEN + ip_len + tcp_len);
	if (!data)
		return XDP_PASS;
	end = (void *)(long)ctx->data_end;
	rt = write_tcp_headers(data, end, pr, tcp_len);
	if (!rt)
		return XDP_DROP;
	rt->source = dport;
	rt->dest = sport;
	rt->seq = bpf_htonl(reply_seq);
	rt->ack_seq = bpf_htonl(reply_ack);
	rt->doff = (tcp_len / 4) << 4;
	rt->flags = reply_flags;
	rt->window = bpf_htons(window);
	rt->check = 0;
	rt->urg_ptr = 0;
	opt = (__u8 *)(rt + 1);
	// The options word by word, each store checked against `end` (the frame is
	// exactly the reply's length); the checksum sums them from `options`, so
	// nothing past the fixed header is read back.
#pragma unroll
	for (__u32 i = 0; i < 5; i++) {
		if (i < option_words) {
			if ((void *)(opt + 4 * i + 4) > end)
				return XDP_DROP;
			__builtin_memcpy(opt + 4 * i, options + 4 * i, 4);
		}
	}
	sum = sum_words(rt, TCP_LEN / 2) + sum_words(options, 10);
	sum += pr->pseudo + bpf_htons(IPPROTO_TCP) + bpf_htons(tcp_len);
	rt->check = ~fold(sum);
	return XDP_TX;
}

// ICMP (ICMPv6) port unreachable quoting the whole datagram, which stays
// where it is: the new headers go in front of it. `quote_sum` is the sum of
// the datagram (header and segment), `quote_len` its length.
static __always_inline int answer_udp(struct xdp_md *ctx, struct probe *pr,
				      __u64 quote_sum, __u32 quote_len)
{
	__u32 ip_len = pr->v6 ? IP6_LEN : IP4_LEN;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 frame_len = end - data;
	struct icmp_hdr *icmp;
	__u64 sum;

	// Ethernet padding after the datagram is no part of the quote.
	if (frame_len > ETH_LEN + quote_len &&
	    bpf_xdp_adjust_tail(ctx, -(int)(frame_len - ETH_LEN - quote_len)))
		return XDP_PASS;
	if (bpf_xdp_adjust_head(ctx, -(int)(ip_len + ICMP_LEN)))
		return XDP_PASS;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (data + ETH_LEN + IP4_LEN + ICMP_LEN > end)
		return XDP_DROP;
	write_eth(data, pr);
	if (pr->v6) {
		if (data + ETH_LEN + IP6_LEN + ICMP_LEN > end)
			return XDP_DROP;
		write_ipv6(data + ETH_LEN, pr, IPPROTO_ICMPV6_, ICMP_LEN + quote_len);
		icmp = data + ETH_LEN + IP6_LEN;
		icmp->type = 1; // destination unreachable
		icmp->code = 4; // port unreachable
		sum = pr->pseudo + bpf_htons(IPPROTO_ICMPV6_) +
		      bpf_htons(ICMP_LEN + quote_len);
	} else {
		write_ipv4(data + ETH_LEN, pr, (pr->tclass & 0x1e) | IPTOS_PREC_INTERNETCONTROL,
			   0, IPPROTO_ICMP, ICMP_LEN + quote_len);
		icmp = data + ETH_LEN + IP4_LEN;
		icmp->type = 3; // destination unreachable
		icmp->code = 3; // port unreachable
		sum = 0;
	}
	icmp->check = 0;
	icmp->rest = 0;
	sum += quote_sum + sum_words(icmp, ICMP_LEN / 2);
	icmp->check = ~fold(sum);
	return XDP_TX;
}

// Echo reply in place: addresses swapped, the type changed, the checksum
// adjusted for the type (the pseudo-header of ICMPv6 sums the same both ways).
static __always_inline int answer_echo(struct xdp_md *ctx, struct probe *pr,
				       __u32 packet_len)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 frame_len = end - data;
	struct icmp_hdr *icmp;
	__u16 old, new;

	if (frame_len > ETH_LEN + packet_len &&
	    bpf_xdp_adjust_tail(ctx, -(int)(frame_len - ETH_LEN - packet_len)))
		return XDP_PASS;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (data + ETH_LEN + IP4_LEN + ICMP_LEN > end)
		return XDP_DROP;
	write_eth(data, pr);
	if (pr->v6) {
		if (data + ETH_LEN + IP6_LEN + ICMP_LEN > end)
			return XDP_DROP;
		write_ipv6(data + ETH_LEN, pr, IPPROTO_ICMPV6_, packet_len - IP6_LEN);
		icmp = data + ETH_LEN + IP6_LEN;
	} else {
		write_ipv4(data + ETH_LEN, pr, pr->tclass, 0, IPPROTO_ICMP,
			   packet_len - IP4_LEN);
		icmp = data + ETH_LEN + IP4_LEN;
	}
	old = *(__u16 *)icmp;
	icmp->type = pr->v6 ? 129 : 0;
	new = *(__u16 *)icmp;
	csum_replace(&icmp->check, old, new);
	return XDP_TX;
}

// The HTTP server (HTTP_80): the server half of a connection to port 80, with
// no state. The SYN-ACK's sequence number is cookie(); a later segment is
// the connection's if its acknowledgment lies between the cookie + 1 (nothing
// of ours acknowledged yet) and the end of our reply and FIN (all of it), for
// the cookie of either window-scaling offer. Then:
//
//   a whole request head for /   -> nginx's reply with FIN: ACK|PSH|FIN, one
//     (starts `GET / `, ends with     segment, from the cookie + 1 (a repeated
//     the blank line, unanswered)     request gets the same reply again)
//   any other data               -> RST|ACK: the request cannot be served (another
//                                   path, or a head split over segments, which
//                                   would need state); a reset fails the client
//                                   at once, where waiting would leave it to time out
//   FIN after our FIN was acked  -> ACK: the connection is closed on both sides
//   FIN before any reply         -> FIN|ACK: nothing to say, as nginx closes an
//                                   idle connection at the client's end of file
//   other ACKs                   -> nothing (dropped)
//   RST, or no ACK               -> nothing (dropped), as a closed connection would
//   outside the cookie           -> RST from the acknowledgment number, as Linux's
//                                   listener answers an ACK that is no SYN cookie
//
// Every reply carries a timestamp option if the segment did (TSval this host's
// milliseconds, TSecr the segment's TSval), as a connection that agreed on
// timestamps does on every segment (RFC 7323). Unlike Linux's, the replies'
// IPv4 identification is 0 (they are sent with DF, RFC 6864) and they carry
// no ECN mark. A segment longer than MAX_L4 goes on to the kernel like any
// other, which has no server on port 80 and resets it.

#define HTTP_PORT 80
// nginx's reply in this lab (crates/lab/src/http.rs: `return 200 "sonde lab
// $server_addr\n"`, server_tokens off), as a lab's nginx sent it: the head up
// to the body's address; the Date, the Content-Length and the address are
// written into it. Offsets of those fields:
#define DATE_AT 38    // "Thu, 26 Nov 2026 04:48:25 GMT", 29 bytes
#define LENGTH_AT 111 // two digits: "sonde lab " + address + "\n" is 18 to 50 bytes
#define ADDR_AT 146   // the address, then "\n"
#define REPLY_MAX 256 // more than the longest reply (146 + 39 + 1)

#define REPLY_HEAD                                                             \
	"HTTP/1.1 200 OK\r\n"                                                  \
	"Server: nginx\r\n"                                                    \
	"Date: Thu, 01 Jan 1970 00:00:00 GMT\r\n"                              \
	"Content-Type: text/plain\r\n"                                         \
	"Content-Length: 00\r\n"                                               \
	"Connection: close\r\n"                                                \
	"\r\n"                                                                 \
	"sonde lab "
_Static_assert(sizeof(REPLY_HEAD) == ADDR_AT + 1, "ADDR_AT is where the head ends");
static const char reply_head[ADDR_AT + 1] RODATA = REPLY_HEAD;

// Three-letter names packed little-endian, so one load fetches a name.
#define NAME3(a, b, c) ((__u32)(a) | (__u32)(b) << 8 | (__u32)(c) << 16)
static const __u32 day_names[8] RODATA = {
	NAME3('S', 'u', 'n'), NAME3('M', 'o', 'n'), NAME3('T', 'u', 'e'),
	NAME3('W', 'e', 'd'), NAME3('T', 'h', 'u'), NAME3('F', 'r', 'i'),
	NAME3('S', 'a', 't'), 0,
};
static const __u32 month_names[16] RODATA = {
	0, NAME3('J', 'a', 'n'), NAME3('F', 'e', 'b'), NAME3('M', 'a', 'r'),
	NAME3('A', 'p', 'r'), NAME3('M', 'a', 'y'), NAME3('J', 'u', 'n'),
	NAME3('J', 'u', 'l'), NAME3('A', 'u', 'g'), NAME3('S', 'e', 'p'),
	NAME3('O', 'c', 't'), NAME3('N', 'o', 'v'), NAME3('D', 'e', 'c'),
};
static const char hex_digits[16] RODATA = "0123456789abcdef";

// The reply is put together here (one per CPU): its payload, zero past its end.
struct reply_buf {
	__u8 b[REPLY_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct reply_buf);
} reply_scratch SEC(".maps");

// A byte at offset `at` of the buffer; the mask keeps the verifier sure of it.
static __always_inline void put(struct reply_buf *r, __u32 at, __u8 c)
{
	r->b[at & (REPLY_MAX - 1)] = c;
}

static __always_inline void put_name(struct reply_buf *r, __u32 at, __u32 name)
{
	put(r, at, name);
	put(r, at + 1, name >> 8);
	put(r, at + 2, name >> 16);
}

static __always_inline void put_2digits(struct reply_buf *r, __u32 at, __u32 v)
{
	put(r, at, '0' + v / 10 % 10);
	put(r, at + 1, '0' + v % 10);
}

// 1 if v >= 2^bits, else 0, without a branch (v below 2^16).
#define AT_LEAST(v, bits) (((v) + (0x10000 - (1u << (bits)))) >> 16)

// The address the probe went to, as nginx's $server_addr writes it (dotted
// decimal; IPv6 as RFC 5952: lowercase hex without leading zeros, the first
// longest run of two or more zero groups as "::"), at ADDR_AT, then "\n"; the
// rest of the buffer is zeroed. Returns the address's length. A global
// function, checked once by the verifier: its branches would otherwise
// multiply everything around it. Branch-free where it can be for the same reason.
__attribute__((noinline)) int format_address(struct reply_buf *r,
					     const struct probe *pr)
{
	__u32 at = ADDR_AT, i;
	const __u8 *a;

	if (!r || !pr)
		return 0;
	a = (const __u8 *)pr->daddr;
	for (i = (ADDR_AT & ~7); i < REPLY_MAX; i += 8)
		*(__u64 *)&r->b[i] = 0;
	if (!pr->v6) {
		for (i = 0; i < 4; i++) {
			__u32 v = a[i], hundreds = v >= 100, tens = v >= 10;

			put(r, at, '0' + v / 100);
			at += hundreds;
			put(r, at, '0' + v / 10 % 10);
			at += tens;
			put(r, at, '0' + v % 10);
			put(r, at + 1, '.');
			at += 2;
		}
		at--; // no dot after the last byte
	} else {
		__u32 g[8], run = 0, best = 0, best_at = 8;

		for (i = 0; i < 8; i++) {
			g[i] = (__u32)a[2 * i] << 8 | a[2 * i + 1];
			run = g[i] ? 0 : run + 1;
			if (run > best) {
				best = run;
				best_at = i + 1 - run;
			}
		}
		if (best < 2)
			best_at = 8;
		for (i = 0; i < 8; i++) {
			__u32 v = g[i], digits, d;

			if (i - best_at < best) { // inside the run
				if (i == best_at) {
					put(r, at, ':');
					put(r, at + 1, ':');
					at += 2;
				}
				continue;
			}
			if (i > 0 && i != best_at + best)
				put(r, at++, ':');
			digits = 1 + AT_LEAST(v, 4) + AT_LEAST(v, 8) + AT_LEAST(v, 12);
			for (d = 0; d < 4; d++) {
				__u32 shift = 4 * (digits - 1 - d);

				// Digits past the last are written and then
				// overwritten (or zeroed below).
				put(r, at + d, hex_digits[(v >> (shift & 15)) & 15]);
			}
			at += digits;
		}
		for (i = 0; i < 4; i++)
			put(r, at + i, 0);
	}
	put(r, at, '\n');
	return at - ADDR_AT;
}

// The date now, as nginx writes it (RFC 9110's IMF-fixdate, "Thu, 26 Nov 2026
// 04:48:25 GMT"), at DATE_AT. UTC from CLOCK_TAI, the one wall clock a BPF
// program can read, less its offset the loader read; the civil date from the
// day number by Howard Hinnant's days-to-civil algorithm.
static __always_inline void put_date(struct reply_buf *r,
				     const struct responder_cfg *cfg)
{
	__u64 secs = bpf_ktime_get_tai_ns() / 1000000000ULL - cfg->tai_utc;
	__u64 days = secs / 86400, sod = secs % 86400;
	__u64 z = days + 719468, era = z / 146097, doe = z - era * 146097;
	__u64 yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	__u64 doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	__u64 mp = (5 * doy + 2) / 153;
	__u32 mday = doy - (153 * mp + 2) / 5 + 1;
	__u32 month = mp < 10 ? mp + 3 : mp - 9;
	__u32 year = yoe + era * 400 + (month <= 2);
	// 1 January 1970 was a Thursday (4; Sunday is 0).
	__u32 wday = (days + 4) % 7;

	// The verifier does not bound a remainder: the masks, hidden from clang
	// (which knows them to be no-ops), bound the table indexes.
	asm volatile("" : "+r"(wday), "+r"(month));
	put_name(r, DATE_AT, day_names[wday & 7]);
	put_2digits(r, DATE_AT + 5, mday);
	put_name(r, DATE_AT + 8, month_names[month & 15]);
	put_2digits(r, DATE_AT + 12, year / 100);
	put_2digits(r, DATE_AT + 14, year);
	put_2digits(r, DATE_AT + 17, sod / 3600);
	put_2digits(r, DATE_AT + 20, sod / 60 % 60);
	put_2digits(r, DATE_AT + 23, sod % 60);
}

// The whole reply in `r` (whose address format_address wrote): the head, the
// date and the body's length. Returns the payload's length.
static __always_inline __u32 put_reply(struct reply_buf *r,
				       const struct responder_cfg *cfg,
				       __u32 addr_len)
{
	__builtin_memcpy(r->b, reply_head, ADDR_AT);
	put_date(r, cfg);
	// "sonde lab " + address + "\n"
	put_2digits(r, LENGTH_AT, 10 + addr_len + 1);
	return ADDR_AT + addr_len + 1;
}

// What a segment to the server says, read before the frame is rewritten.
struct segment {
	__u32 seq, ack, len; // len: payload bytes
	__u16 sport, dport;  // as on the wire
	__u8 flags;
	int request;         // the payload is a whole request head for /
	struct tcp_options o;
};

// What goes back.
struct reply {
	__u32 seq, ack, payload_len;
	__u16 window;
	__u8 flags;
	int ts;      // with a timestamp option (NOP, NOP, TS)
	__u32 tsecr;
};

// Whether the `len` payload bytes at offset `at` are a whole request head for
// /: `GET / ` first, and the blank line that ends a head last.
static __always_inline int is_request_for_root(struct xdp_md *ctx, __u32 at,
					       __u32 len)
{
	__u8 first[6], last[4];

	if (len < 10 || bpf_xdp_load_bytes(ctx, at, first, 6) ||
	    bpf_xdp_load_bytes(ctx, at + len - 4, last, 4))
		return 0;
	return first[0] == 'G' && first[1] == 'E' && first[2] == 'T' &&
	       first[3] == ' ' && first[4] == '/' && first[5] == ' ' &&
	       last[0] == '\r' && last[1] == '\n' && last[2] == '\r' &&
	       last[3] == '\n';
}

// Rewrites the frame into the reply `rp` to the segment's sender, with the
// first rp->payload_len bytes of `r` as its payload.
static __always_inline int send_reply(struct xdp_md *ctx, struct probe *pr,
				      const struct segment *sg,
				      const struct reply *rp,
				      const struct reply_buf *r)
{
	__u32 ip_len = pr->v6 ? IP6_LEN : IP4_LEN;
	__u32 opt_len = rp->ts ? 12 : 0;
	__u32 tcp_len = TCP_LEN + opt_len + rp->payload_len;
	__u8 opts[12] __attribute__((aligned(4))) = {};
	struct tcp_hdr *rt;
	void *data, *end;
	__u64 sum = 0;
	__u32 i;

	if (rp->ts) {
		__u32 now = bpf_ktime_get_ns() / 1000000;

		opts[0] = 1;
		opts[1] = 1;
		opts[2] = 8;
		opts[3] = 10;
		*(__be32 *)&opts[4] = bpf_htonl(now);
		*(__be32 *)&opts[8] = bpf_htonl(rp->tsecr);
	}
	// An established connection's segments carry no traffic class of their own.
	pr->tclass = 0;
	data = resize(ctx, ETH_LEN + ip_len + tcp_len);
	if (!data)
		return XDP_DROP;
	end = (void *)(long)ctx->data_end;
	rt = write_tcp_headers(data, end, pr, tcp_len);
	if (!rt)
		return XDP_DROP;
	rt->source = sg->dport;
	rt->dest = sg->sport;
	rt->seq = bpf_htonl(rp->seq);
	rt->ack_seq = bpf_htonl(rp->ack);
	rt->doff = ((TCP_LEN + opt_len) / 4) << 4;
	rt->flags = rp->flags;
	rt->window = bpf_htons(rp->window);
	rt->check = 0;
	rt->urg_ptr = 0;
	if (opt_len) {
		__u8 *o = (__u8 *)(rt + 1);

		if ((void *)(o + 12) > end)
			return XDP_DROP;
		__builtin_memcpy(o, opts, 12);
		sum += sum_words(opts, 6);
	}
	sum += sum_words(rt, TCP_LEN / 2);
	if (rp->payload_len) {
		__u32 len = rp->payload_len;

		// Bounded for the verifier: 1 to REPLY_MAX - 1 bytes.
		asm volatile("" : "+r"(len));
		len &= REPLY_MAX - 1;
		if (len == 0)
			return XDP_DROP;
		if (bpf_xdp_store_bytes(ctx, ETH_LEN + ip_len + TCP_LEN + opt_len,
					(void *)r->b, len))
			return XDP_DROP;
		// Zero past the payload's end, so the whole buffer sums as it.
		for (i = 0; i < REPLY_MAX / 2; i++)
			sum += ((const __u16 *)r->b)[i];
	}
	sum += pr->pseudo + bpf_htons(IPPROTO_TCP) + bpf_htons(tcp_len);
	// The frame may have moved under the helper: find the header again.
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	rt = data + ETH_LEN + ip_len;
	if ((void *)(rt + 1) > end)
		return XDP_DROP;
	rt->check = ~fold(sum);
	return XDP_TX;
}

// The window of the server's segments after the SYN-ACK: its SYN-ACK window,
// scaled (rounded up, as Linux's tcp_select_window) if the SYN offered scaling.
static __always_inline __u16 server_window(const struct responder_cfg *cfg,
					   const struct probe *pr, int ts,
					   int wscale)
{
	__u32 w = cfg->window[(pr->v6 << 1 | ts) & 3];

	if (wscale)
		w = (w + (1u << (cfg->wscale & 15)) - 1) >> (cfg->wscale & 15);
	return w;
}

// A segment to port 80 other than a SYN (see "The HTTP server" above); its
// checksum is good. `th` is its header, `hl` bytes of a `seg_len`-byte segment.
static __always_inline int answer_http(struct xdp_md *ctx,
				       const struct responder_cfg *cfg,
				       struct probe *pr, struct tcp_hdr *th,
				       __u32 hl, __u32 seg_len)
{
	__u32 zero = 0, isn, acked, addr_len, reply_len, isn0, isn1;
	struct segment sg = {};
	struct reply rp = {};
	struct reply_buf *r;
	int wscale;

	sg.flags = th->flags;
	if ((sg.flags & TCP_RST) || !(sg.flags & TCP_ACK))
		return XDP_DROP;
	sg.seq = bpf_ntohl(th->seq);
	sg.ack = bpf_ntohl(th->ack_seq);
	sg.len = seg_len - hl;
	sg.sport = th->source;
	sg.dport = th->dest;
	{
		__u32 at = (void *)th - (void *)(long)ctx->data;

		read_options(ctx, at + TCP_LEN, hl - TCP_LEN, &sg.o);
		sg.request = is_request_for_root(ctx, at + hl, sg.len);
	}
	r = bpf_map_lookup_elem(&reply_scratch, &zero);
	if (!r)
		return XDP_DROP;
	addr_len = format_address(r, pr);
	reply_len = ADDR_AT + addr_len + 1;
	// How much of what we send (the reply, then FIN) the segment acknowledges.
	isn0 = cookie(cfg, pr, sg.sport, sg.dport, 0);
	isn1 = cookie(cfg, pr, sg.sport, sg.dport, 1);
	if (sg.ack - isn0 - 1 <= reply_len + 1) {
		isn = isn0;
		wscale = 0;
	} else if (sg.ack - isn1 - 1 <= reply_len + 1) {
		isn = isn1;
		wscale = 1;
	} else {
		// Not a connection of ours: Linux's reset of an ACK, seq its
		// acknowledgment, no ACK, no options.
		rp.seq = sg.ack;
		rp.flags = TCP_RST;
		return send_reply(ctx, pr, &sg, &rp, r);
	}
	acked = sg.ack - isn - 1;
	rp.ts = sg.o.ts;
	rp.tsecr = sg.o.tsval;
	rp.window = server_window(cfg, pr, sg.o.ts, wscale);
	rp.ack = sg.seq + sg.len + (sg.flags & TCP_FIN ? 1 : 0);
	if (sg.len) {
		if (sg.request && acked == 0) {
			rp.seq = isn + 1;
			rp.flags = TCP_ACK | TCP_PSH | TCP_FIN;
			rp.payload_len = put_reply(r, cfg, addr_len);
		} else {
			rp.seq = sg.ack;
			rp.flags = TCP_RST | TCP_ACK;
		}
		return send_reply(ctx, pr, &sg, &rp, r);
	}
	if (!(sg.flags & TCP_FIN))
		return XDP_DROP;
	if (acked == 0) {
		rp.seq = isn + 1;
		rp.flags = TCP_FIN | TCP_ACK;
	} else {
		rp.seq = isn + reply_len + 2;
		rp.flags = TCP_ACK;
	}
	return send_reply(ctx, pr, &sg, &rp, r);
}

// A probe to a responsive address with a well-formed IP header: the
// transport segment `l4` of `l4_len` bytes, protocol `proto`. `ip_sum` is the
// sum of the IP header (for the quote of an unreachable).
static __always_inline int answer(struct xdp_md *ctx,
				  const struct responder_cfg *cfg,
				  struct probe *pr, __u8 proto, void *l4,
				  __u32 l4_len, __u64 ip_sum, void *end)
{
	__u32 ip_len = pr->v6 ? IP6_LEN : IP4_LEN;
	__u64 pseudo = pr->pseudo + bpf_htons(proto) + bpf_htons(l4_len);
	__s64 sum;

	// Each protocol sums its own segment: one loop on each path keeps the
	// verifier's work small (a loop's exits multiply what follows them).
	if (proto == IPPROTO_TCP) {
		struct tcp_hdr *th = l4;
		__u32 hl;
		int http;

		if ((void *)(th + 1) > end)
			return XDP_PASS;
		hl = (th->doff >> 4) * 4;
		if (hl < TCP_LEN || hl > l4_len)
			return XDP_PASS;
		http = (cfg->flags & HTTP_80) && th->dest == bpf_htons(HTTP_PORT) &&
		       !(th->flags & TCP_SYN);
		// A SYN carrying data goes to the kernel.
		if (!http && hl != l4_len)
			return XDP_PASS;
		if (!http &&
		    (th->flags & (TCP_SYN | TCP_ACK | TCP_RST | TCP_FIN)) != TCP_SYN)
			return XDP_PASS;
		if ((cfg->flags & DNS_53) && th->dest == bpf_htons(53))
			return XDP_PASS;
		sum = sum_bytes(l4, l4_len, end);
		if (sum < 0 || fold(sum + pseudo) != 0xffff)
			return XDP_PASS;
		if (http)
			return answer_http(ctx, cfg, pr, th, hl, l4_len);
		return answer_syn(ctx, cfg, pr, th, hl, l4_len, end);
	}
	if (proto == IPPROTO_UDP) {
		struct udp_hdr *uh = l4;

		if ((void *)(uh + 1) > end || bpf_ntohs(uh->len) != l4_len)
			return XDP_PASS;
		if ((cfg->flags & DNS_53) && uh->dest == bpf_htons(53))
			return XDP_PASS;
		sum = sum_bytes(l4, l4_len, end);
		// No checksum is allowed over IPv4 only.
		if (sum < 0 || (uh->check == 0 ? pr->v6 : fold(sum + pseudo) != 0xffff))
			return XDP_PASS;
		return answer_udp(ctx, pr, ip_sum + sum, ip_len + l4_len);
	}
	if (proto == (pr->v6 ? IPPROTO_ICMPV6_ : IPPROTO_ICMP)) {
		struct icmp_hdr *icmp = l4;

		if ((void *)(icmp + 1) > end)
			return XDP_PASS;
		if (icmp->type != (pr->v6 ? 128 : 8) || icmp->code != 0)
			return XDP_PASS;
		sum = sum_bytes(l4, l4_len, end);
		if (sum < 0 || fold(sum + (pr->v6 ? pseudo : 0)) != 0xffff)
			return XDP_PASS;
		return answer_echo(ctx, pr, ip_len + l4_len);
	}
	return XDP_PASS;
}

static __always_inline void note_macs(struct probe *pr, struct eth_hdr *eth)
{
	__builtin_memcpy(pr->src_mac, eth->src, 6);
	__builtin_memcpy(pr->dst_mac, eth->dst, 6);
}

// Whether a frame comes from a neighbour the kernel would answer: the
// scanner's address; with HTTP_80 any host address of the link (as a packet
// ring's or masscan's spare source, for which the scanner answers ARP and
// neighbour discovery), since no kernel server stands behind port 80 then.
// Replies go back to the frame's source MAC, so no neighbour entry is needed.
static __always_inline int from_peer4(const struct responder_cfg *cfg, __u32 saddr)
{
	__u32 host = saddr & ~cfg->link_mask4;

	if (saddr == cfg->peer4)
		return 1;
	return (cfg->flags & HTTP_80) && (saddr & cfg->link_mask4) == cfg->link4 &&
	       saddr != cfg->gateway4 && host != 0 && host != ~cfg->link_mask4;
}

static __always_inline int from_peer6(const struct responder_cfg *cfg, __u64 hi,
				      __u64 lo)
{
	if (hi != cfg->peer6_hi)
		return 0;
	if (lo == cfg->peer6_lo)
		return 1;
	// The link is a /64; its subnet-router anycast (host 0) is no host.
	return (cfg->flags & HTTP_80) && lo != cfg->gateway6_lo && lo != 0;
}

static __always_inline int on_ipv4(struct xdp_md *ctx,
				   const struct responder_cfg *cfg)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct eth_hdr *eth = data;
	struct ipv4_hdr *ip = data + ETH_LEN;
	struct probe pr = {};
	__u32 daddr, tot;
	__u64 ip_sum;

	if ((void *)(ip + 1) > end || (ip->ver_ihl >> 4) != 4)
		return XDP_PASS;
	daddr = bpf_ntohl(ip->daddr);
	if ((daddr & cfg->mask4) != cfg->net4 ||
	    (daddr & cfg->link_mask4) == cfg->link4)
		return XDP_PASS;
	// truth.rs: addr_hash.
	if (!answers(cfg, mix64(cfg->key ^ (__u64)daddr * GOLDEN)))
		return XDP_DROP;
	// The kernel answers this address; so do we, when we can exactly.
	if (ip->ver_ihl != 0x45 || (ip->frag_off & bpf_htons(IPV4_MF_OFFSET)) ||
	    !mac_is(eth->dst, cfg->mac) || !from_peer4(cfg, bpf_ntohl(ip->saddr)))
		return XDP_PASS;
	tot = bpf_ntohs(ip->tot_len);
	if (tot < IP4_LEN || tot > IP4_LEN + MAX_L4 || data + ETH_LEN + tot > end)
		return XDP_PASS;
	ip_sum = sum_words(ip, IP4_LEN / 2);
	if (fold(ip_sum) != 0xffff)
		return XDP_PASS;
	note_macs(&pr, eth);
	pr.saddr[0] = ip->saddr;
	pr.daddr[0] = ip->daddr;
	pr.pseudo = sum_words(&pr.saddr[0], 2) + sum_words(&pr.daddr[0], 2);
	pr.tclass = ip->tos;
	return answer(ctx, cfg, &pr, ip->protocol, ip + 1, tot - IP4_LEN, ip_sum, end);
}

static __always_inline int on_ipv6(struct xdp_md *ctx,
				   const struct responder_cfg *cfg)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct eth_hdr *eth = data;
	struct ipv6_hdr *ip6 = data + ETH_LEN;
	struct probe pr = {};
	__u64 hi, lo;
	__u32 plen;
	__u8 next;

	if ((void *)(ip6 + 1) > end ||
	    (ip6->ver_tc_flow & bpf_htonl(0xf0000000)) != bpf_htonl(0x60000000))
		return XDP_PASS;
	hi = load_be64(ip6->daddr);
	lo = load_be64(ip6->daddr + 8);
	if ((hi & cfg->mask6_hi) != cfg->net6_hi ||
	    (lo & cfg->mask6_lo) != cfg->net6_lo)
		return XDP_PASS;
	// truth.rs: addr_hash6.
	if (!answers(cfg, mix64(mix64(cfg->key ^ hi * GOLDEN) ^ lo * GOLDEN)))
		return XDP_DROP;
	if (!mac_is(eth->dst, cfg->mac) ||
	    !from_peer6(cfg, load_be64(ip6->saddr), load_be64(ip6->saddr + 8)))
		return XDP_PASS;
	plen = bpf_ntohs(ip6->payload_len);
	next = ip6->nexthdr;
	// Extension headers (and with them fragments) go to the kernel.
	if (next != IPPROTO_TCP && next != IPPROTO_UDP && next != IPPROTO_ICMPV6_)
		return XDP_PASS;
	if (plen > MAX_L4 || data + ETH_LEN + IP6_LEN + plen > end)
		return XDP_PASS;
	note_macs(&pr, eth);
	__builtin_memcpy(pr.saddr, ip6->saddr, 16);
	__builtin_memcpy(pr.daddr, ip6->daddr, 16);
	pr.pseudo = sum_words(pr.saddr, 8) + sum_words(pr.daddr, 8);
	pr.tclass = bpf_ntohl(ip6->ver_tc_flow) >> 20;
	pr.v6 = 1;
	return answer(ctx, cfg, &pr, next, ip6 + 1, plen,
		      sum_words(ip6, IP6_LEN / 2), end);
}

// The DNS tree's answerer (`--dns-answerer xdp`), which goes first.
#include "answerer.c"

// The responder proper: a global function, so that its stack and the
// answerer's are never on top of each other (the verifier allows 512 bytes
// for a chain of calls).
__attribute__((noinline)) int respond(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct eth_hdr *eth = data;
	__u32 zero = 0;
	struct responder_cfg *cfg = bpf_map_lookup_elem(&responder_cfg, &zero);

	if (!cfg || (cfg->flags & KERNEL_RESPONDS) || (void *)(eth + 1) > end)
		return XDP_PASS;
	if (eth->proto == bpf_htons(ETH_P_IP))
		return on_ipv4(ctx, cfg);
	if (eth->proto == bpf_htons(ETH_P_IPV6) && (cfg->flags & HAS_V6))
		return on_ipv6(ctx, cfg);
	return XDP_PASS;
}

SEC("xdp")
int sonde_lab_responder(struct xdp_md *ctx)
{
	int tree = dns_tree_frame(ctx);

	return tree >= 0 ? tree : respond(ctx);
}

char _license[] SEC("license") = "GPL";
