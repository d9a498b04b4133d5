// SPDX-License-Identifier: GPL-2.0
//
// The lab's DNS answerer (`sonde lab up --dns-tree N --dns-answerer xdp`):
// UDP port 53 on 198.19.54.0/24 answered from the DNS tree's formulas (what
// crates/lab/src/dns_tree/spec.rs writes as `Tree::resolve`) as a recursive
// resolver answers: QR and RA set, RD and CD copied, AA clear, the question
// echoed as asked, every record of a CNAME chain in the answer section in
// order (names lowercase), TTL 3600, and an OPT record (UDP payload 1232) when
// the query had one. Every name of the tree is served, the root's and the
// TLDs' SOA, NS and server addresses too. NXDOMAIN and NODATA answers carry
// no SOA; `big` TXT is answered with TC set and no record (it needs TCP, which
// the answerer does not serve); anything under `lame.test.` is SERVFAIL; and
// `slow.test.` answers at once.
//
// responder.c includes this file: nx0 has one XDP program, and the answerer
// is its first step (dns_tree_frame), so it runs with the XDP responder or
// alone before the kernel responder (KERNEL_RESPONDS), and it comes before the
// population's rules, which could otherwise drop or answer these addresses
// when the population covers them. With a tree, frames to its servers
// (198.19.53.0/24) always go to the kernel, and so does everything to the
// answerer's prefix that is not a UDP datagram to port 53.
//
// What it cannot answer it counts (dns_counts) and answers with a header
// alone: FORMERR (no single question, a compression pointer or a bad label
// in the question, records other than one OPT, bytes left over), NOTIMP (an
// opcode other than QUERY), REFUSED (a class other than IN); or drops: a
// message shorter than a header, a response (QR set), IP options, fragments,
// bad lengths or checksums. A query is read whole into a per-CPU buffer,
// where the answer is written over it and then copied back into the frame,
// resized with bpf_xdp_adjust_tail; the frame keeps its Ethernet, IP and UDP
// headers, with addresses and ports swapped and lengths and checksums new.
//
// The UDP checksum is checked, so the scanner's end must send whole ones:
// `lab up` turns sx0's checksum offload off with the answerer (a kernel
// socket's datagram would otherwise arrive with a partial checksum, and the
// kernel would "complete" the answer's on the way back, wrongly).

// dns_cfg.flags bits.
#define DNS_TREE_ON (1u << 0) // the lab has a DNS tree: its addresses are not the population's
#define DNS_ANSWER (1u << 1)  // answer on answer_net4

// Set by the loader (entry 0 of `dns_cfg`, src/responder.rs: `TreeSpec`).
struct dns_cfg {
	__u64 key;   // hash_key(seed), as the responder's
	__u64 zones; // N
	__u32 hosts; // H: h0 .. h{H-1} in every zone
	__u32 flags;
	__u32 servers_net4, servers_mask4; // the tree's servers: to the kernel
	__u32 answer_net4, answer_mask4;   // the answerer's prefix
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dns_cfg);
} dns_cfg SEC(".maps");

// What the answerer did, by reason (src/responder.rs: `DnsCounts`).
enum dns_count {
	DNS_ANSWERED,      // NOERROR, NXDOMAIN or SERVFAIL from the tree (TC included)
	DNS_FORMERR,       // answered FORMERR
	DNS_NOTIMP,        // answered NOTIMP
	DNS_REFUSED,       // answered REFUSED
	DNS_DROP_SHORT,    // shorter than a DNS header
	DNS_DROP_RESPONSE, // QR set: never answer an answer
	DNS_DROP_IP,       // IP options, a fragment, lengths that disagree, a bad IP checksum
	DNS_DROP_CHECKSUM, // a bad UDP checksum
	DNS_DROP_ROOM,     // the frame could not be resized
	DNS_COUNTS,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DNS_COUNTS);
	__type(key, __u32);
	__type(value, __u64);
} dns_counts SEC(".maps");

#define DNS_PORT 53
#define DNS_HDR 12
#define UDP_LEN 8
// Where the DNS message starts in the frame (IPv4 without options).
#define DNS_AT (ETH_LEN + IP4_LEN + UDP_LEN)
// The longest query read whole; a longer one is answered FORMERR.
#define DNS_MAX 512
// The buffer the query is read into and the answer written over; every index
// into it is masked, so no write can leave it.
#define DNS_BUF 1024
#define DNS_MASK (DNS_BUF - 1)
#define DNS_TTL 3600
#define EDNS_PAYLOAD 1232
#define MAX_LABELS 128

#define T_A 1
#define T_NS 2
#define T_CNAME 5
#define T_SOA 6
#define T_MX 15
#define T_TXT 16
#define T_AAAA 28
#define T_OPT 41
#define CLASS_IN 1

#define RCODE_NOERROR 0
#define RCODE_FORMERR 1
#define RCODE_SERVFAIL 2
#define RCODE_NXDOMAIN 3
#define RCODE_NOTIMP 4
#define RCODE_REFUSED 5

// The tree's addresses (DNS-TREE.md): 198.19.53.(10 + j % 4) serve zone j,
// the TLD servers are .2 and .3; addr4() lies in 198.18.0.0/15.
#define TREE_SERVERS 0xc6133500u // 198.19.53.0
#define ADDR4_BASE 0xc6120000u   // 198.18.0.0
#define SLOW_WWW 0xc6120035u     // 198.18.0.53

struct dns_buf {
	__u8 m[DNS_BUF];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dns_buf);
} dns_scratch SEC(".maps");

static __always_inline void dns_count(__u32 reason)
{
	__u64 *n = bpf_map_lookup_elem(&dns_counts, &reason);

	if (n)
		*n += 1;
}

// Byte access to the buffer, masked. The mask is hidden from clang, which
// would drop it where it can tell the offset is in range, and the verifier
// cannot always tell that.
static __always_inline __u8 get8(const struct dns_buf *b, __u32 at)
{
	asm volatile("" : "+r"(at));
	return b->m[at & DNS_MASK];
}

static __always_inline __u16 get16(const struct dns_buf *b, __u32 at)
{
	return (__u16)get8(b, at) << 8 | get8(b, at + 1);
}

static __always_inline void put8(struct dns_buf *b, __u32 at, __u8 v)
{
	asm volatile("" : "+r"(at));
	b->m[at & DNS_MASK] = v;
}

static __always_inline void put16(struct dns_buf *b, __u32 at, __u16 v)
{
	put8(b, at, v >> 8);
	put8(b, at + 1, v);
}

static __always_inline void put32(struct dns_buf *b, __u32 at, __u32 v)
{
	put16(b, at, v >> 16);
	put16(b, at + 2, v);
}

static __always_inline __u8 lower(__u8 c)
{
	return c >= 'A' && c <= 'Z' ? c | 0x20 : c;
}

// The question, as dns_question read it.
struct question {
	__u32 labels;  // how many (0: the root)
	__u32 at[3];   // offsets of the last three labels' length bytes: at[0] the TLD
	__u32 end;     // just past QCLASS
	__u32 qtype, qclass;
	__u32 opt;     // the query has an OPT record
};

// Whether the label at `at` is `s` (lowercase, `n` bytes), ASCII case ignored.
static __always_inline int label_is(const struct dns_buf *b, __u32 at,
				    const char *s, __u32 n)
{
	if (get8(b, at) != n)
		return 0;
#pragma unroll
	for (__u32 i = 0; i < 10; i++)
		if (i < n && lower(get8(b, at + 1 + i)) != s[i])
			return 0;
	return 1;
}

// A label `p{number}` (p one lowercase letter): the number in decimal without
// leading zeros, at most 19 digits, in *v. Returns whether it is one.
static __always_inline int dns_number_label(const struct dns_buf *b,
					       __u32 at, __u32 p, __u64 *v)
{
	__u32 len, i;
	__u64 n = 0;

	if (!b || !v)
		return 0;
	len = get8(b, at);
	if (len < 2 || len > 20 || lower(get8(b, at + 1)) != p)
		return 0;
	if (len > 2 && get8(b, at + 2) == '0')
		return 0;
	for (i = 2; i <= 20; i++) {
		__u8 c;

		if (i > len)
			break;
		c = get8(b, at + i);
		if (c < '0' || c > '9')
			return 0;
		n = n * 10 + (c - '0');
	}
	*v = n;
	return 1;
}

// Reads the question of the message of `len` bytes in `b` (its header is
// there) into `q`. Returns 0, or the rcode to answer with (FORMERR, REFUSED).
__attribute__((noinline)) int dns_question(const struct dns_buf *b, __u32 len,
					   struct question *q)
{
	__u32 off = DNS_HDR, n = 0, a0 = 0, a1 = 0, a2 = 0, i;

	if (!b || !q)
		return RCODE_FORMERR;
	// One question; no answer or authority records; at most one (OPT) additional.
	if (get16(b, 4) != 1 || get16(b, 6) != 0 || get16(b, 8) != 0 ||
	    get16(b, 10) > 1)
		return RCODE_FORMERR;
	for (i = 0; i < MAX_LABELS; i++) {
		__u32 l;

		if (off >= len)
			return RCODE_FORMERR;
		l = get8(b, off);
		if (l == 0)
			break;
		// A compression pointer (0xc0) or an extended label type: no
		// question of ours needs either.
		if (l > 63)
			return RCODE_FORMERR;
		a2 = a1;
		a1 = a0;
		a0 = off;
		n++;
		off += 1 + l;
		// A name is at most 255 bytes, its root byte included.
		if (off - DNS_HDR > 254)
			return RCODE_FORMERR;
	}
	if (i == MAX_LABELS || off + 5 > len)
		return RCODE_FORMERR;
	q->labels = n;
	q->at[0] = a0;
	q->at[1] = a1;
	q->at[2] = a2;
	q->qtype = get16(b, off + 1);
	q->qclass = get16(b, off + 3);
	q->end = off + 5;
	q->opt = get16(b, 10);
	if (q->opt) {
		__u32 at = q->end;

		// The root name, type OPT, version 0, and its data to the end.
		if (at + 11 > len || get8(b, at) != 0 || get16(b, at + 1) != T_OPT ||
		    get8(b, at + 6) != 0 || at + 11 + get16(b, at + 9) != len)
			return RCODE_FORMERR;
	} else if (q->end != len) {
		return RCODE_FORMERR;
	}
	if (q->qclass != CLASS_IN)
		return RCODE_REFUSED;
	return 0;
}

// The zones of the tree (crates/lab/src/dns_tree/spec.rs: `Zone`).
enum zone {
	Z_SLD,  // d{j}.{test|example}.
	Z_ROOT, // .
	Z_TEST,
	Z_EXAMPLE,
	Z_SLOW, // slow.test.
};

// What a name is in its zone.
enum node_kind {
	N_NONE,  // no such name: NXDOMAIN
	N_EMPTY, // a name with no records
	N_LAME,  // under lame.test.: SERVFAIL
	N_APEX,  // SOA and NS (and at a second-level zone's, MX and TXT)
	N_NS,    // the zone's server: ns.{zone} (ns. for the root)
	N_WWW,   // A and AAAA (in slow.test., A alone)
	N_MAIL,
	N_ALIAS, // CNAME www
	N_CHAIN, // CNAME alias
	N_FAR,   // CNAME www of zone (j + 1) % N
	N_BIG,   // TXT too big for UDP: TC
	N_HOST,  // h{k}
};

struct node {
	__u64 j, k; // the second-level zone and the host number
	__u32 zone;
	__u32 kind;
	__u32 qtype; // the type asked for
	__u32 pad;
};

// The name in the second-level zone `nd->j` below the zone's own.
static __always_inline void sld_host(const struct dns_buf *b, __u32 host,
				     const struct dns_cfg *cfg, struct node *nd)
{
	__u64 k = 0;

	if (label_is(b, host, "www", 3))
		nd->kind = N_WWW;
	else if (label_is(b, host, "mail", 4))
		nd->kind = N_MAIL;
	else if (label_is(b, host, "ns", 2))
		nd->kind = N_NS;
	else if (label_is(b, host, "alias", 5))
		nd->kind = N_ALIAS;
	else if (label_is(b, host, "chain", 5))
		nd->kind = N_CHAIN;
	else if (label_is(b, host, "far", 3))
		nd->kind = N_FAR;
	else if (label_is(b, host, "big", 3))
		nd->kind = N_BIG;
	else if (dns_number_label(b, host, 'h', &k) && k < cfg->hosts) {
		nd->kind = N_HOST;
		nd->k = k;
	}
}

// Finds the question's name in the tree, as spec.rs's `Tree::node` does.
__attribute__((noinline)) int dns_find(const struct dns_buf *b,
				       const struct question *q,
				       const struct dns_cfg *cfg,
				       struct node *nd)
{
	__u32 tld, sld, test, example, n;
	__u64 j = 0;

	if (!b || !q || !cfg || !nd)
		return 0;
	n = q->labels;
	nd->kind = N_NONE;
	nd->zone = Z_ROOT;
	if (n == 0) {
		nd->kind = N_APEX;
		return 0;
	}
	tld = q->at[0];
	test = label_is(b, tld, "test", 4);
	example = label_is(b, tld, "example", 7);
	if (!test && !example) {
		// The root zone's own server, ns.
		if (n == 1 && label_is(b, tld, "ns", 2))
			nd->kind = N_NS;
		return 0;
	}
	nd->zone = test ? Z_TEST : Z_EXAMPLE;
	if (n == 1) {
		nd->kind = N_APEX;
		return 0;
	}
	sld = q->at[1];
	if (n == 2 && label_is(b, sld, "ns", 2)) {
		nd->kind = N_NS;
		return 0;
	}
	if (test && label_is(b, sld, "lame", 4)) {
		nd->kind = N_LAME;
		return 0;
	}
	if (test && label_is(b, sld, "slow", 4)) {
		nd->zone = Z_SLOW;
		if (n == 2)
			nd->kind = N_APEX;
		else if (n == 3 && label_is(b, q->at[2], "www", 3))
			nd->kind = N_WWW;
		else if (n == 3 && label_is(b, q->at[2], "ns", 2))
			nd->kind = N_NS;
		return 0;
	}
	if (!dns_number_label(b, sld, 'd', &j) || j >= cfg->zones ||
	    (j & 1) != example)
		return 0;
	nd->zone = Z_SLD;
	nd->j = j;
	if (n == 2)
		nd->kind = N_APEX;
	else if (n == 3)
		sld_host(b, q->at[2], cfg, nd);
	return 0;
}

// v(j, s) of the contract.
static __always_inline __u64 zone_value(const struct dns_cfg *cfg, __u64 j,
					__u64 salt)
{
	return mix64(mix64(cfg->key ^ j * GOLDEN) ^ salt);
}

static __always_inline __u32 addr4(__u64 x)
{
	return ADDR4_BASE + (__u32)(x & 0x1ffff);
}

// A constant label at `at`; returns the offset after it.
static __always_inline __u32 put_label(struct dns_buf *b, __u32 at,
				       const char *s, __u32 n)
{
	put8(b, at, n);
#pragma unroll
	for (__u32 i = 0; i < 10; i++)
		if (i < n)
			put8(b, at + 1 + i, s[i]);
	return at + 1 + n;
}

// The decimal digits of `v` at `at`; returns how many.
static __always_inline int dns_put_decimal(struct dns_buf *b, __u32 at,
					      __u64 v)
{
	__u32 digits = 1, i;
	__u64 rest = v;

	if (!b)
		return 0;
	for (i = 0; i < 20; i++) {
		rest /= 10;
		if (rest == 0)
			break;
		digits++;
	}
	for (i = 0; i < 20; i++) {
		if (i >= digits)
			break;
		put8(b, at + digits - 1 - i, '0' + v % 10);
		v /= 10;
	}
	return digits;
}

// Host labels of names that are written out.
enum host_label {
	H_NONE,
	H_WWW,
	H_MAIL,
	H_NS,
	H_ALIAS,
	H_HOSTMASTER,
};

// The name `{host.}{zone}` at `at`, lowercase and uncompressed, for the
// zone of `nd`; returns the offset after it.
__attribute__((noinline)) int dns_put_name(struct dns_buf *b, __u32 at,
					   __u32 host, const struct node *nd)
{
	__u32 digits;

	if (!b || !nd)
		return at;
	if (host == H_WWW)
		at = put_label(b, at, "www", 3);
	else if (host == H_MAIL)
		at = put_label(b, at, "mail", 4);
	else if (host == H_NS)
		at = put_label(b, at, "ns", 2);
	else if (host == H_ALIAS)
		at = put_label(b, at, "alias", 5);
	else if (host == H_HOSTMASTER)
		at = put_label(b, at, "hostmaster", 10);
	if (nd->zone == Z_SLD) {
		digits = dns_put_decimal(b, at + 2, nd->j);
		put8(b, at, 1 + digits);
		put8(b, at + 1, 'd');
		at += 2 + digits;
	} else if (nd->zone == Z_SLOW) {
		at = put_label(b, at, "slow", 4);
	}
	if (nd->zone == Z_EXAMPLE || (nd->zone == Z_SLD && (nd->j & 1)))
		at = put_label(b, at, "example", 7);
	else if (nd->zone != Z_ROOT)
		at = put_label(b, at, "test", 4);
	put8(b, at, 0);
	return at + 1;
}

// A record's owner (a compression pointer), type, class and TTL at `at`;
// returns where its data length goes.
static __always_inline __u32 put_rr(struct dns_buf *b, __u32 at, __u16 owner,
				    __u16 type)
{
	put16(b, at, 0xc000 | owner);
	put16(b, at + 2, type);
	put16(b, at + 4, CLASS_IN);
	put32(b, at + 6, DNS_TTL);
	return at + 10;
}

// The records of the type asked for at the node (at most one: no name of the
// tree has two of a type) at `at`, owned by `owner`; returns the offset after
// them (`at` when there are none).
__attribute__((noinline)) int dns_put_records(struct dns_buf *b, __u32 at,
					      __u32 owner, const struct node *nd,
					      const struct dns_cfg *cfg)
{
	__u32 rd, end, a = 0, qtype;
	__u64 j;

	if (!b || !nd || !cfg)
		return at;
	j = nd->j;
	qtype = nd->qtype;
	switch (nd->kind) {
	case N_WWW:
		if (nd->zone == Z_SLOW) {
			a = SLOW_WWW;
			break;
		}
		if (qtype == T_AAAA) {
			__u64 x = zone_value(cfg, j, 2);

			rd = put_rr(b, at, owner, T_AAAA);
			put16(b, rd, 16);
			put32(b, rd + 2, 0x20010002); // 2001:2::
			put32(b, rd + 6, 0);
			put32(b, rd + 10, 0);
			put32(b, rd + 14, x);
			return rd + 18;
		}
		a = addr4(zone_value(cfg, j, 1));
		break;
	case N_MAIL:
		a = addr4(zone_value(cfg, j, 3));
		break;
	case N_NS:
		if (nd->zone == Z_SLD)
			a = TREE_SERVERS + 10 + (j & 3);
		else if (nd->zone == Z_ROOT)
			a = TREE_SERVERS + 1;
		else if (nd->zone == Z_TEST)
			a = TREE_SERVERS + 2;
		else if (nd->zone == Z_EXAMPLE)
			a = TREE_SERVERS + 3;
		else
			a = TREE_SERVERS + 21;
		break;
	case N_HOST:
		a = addr4(mix64(zone_value(cfg, j, 4) ^ nd->k * GOLDEN));
		break;
	case N_APEX:
		if (qtype == T_MX && nd->zone == Z_SLD) {
			rd = put_rr(b, at, owner, T_MX);
			put16(b, rd + 2, 10);
			end = dns_put_name(b, rd + 4, H_MAIL, nd);
		} else if (qtype == T_NS) {
			rd = put_rr(b, at, owner, T_NS);
			end = dns_put_name(b, rd + 2, H_NS, nd);
		} else if (qtype == T_TXT && nd->zone == Z_SLD) {
			__u32 digits;

			rd = put_rr(b, at, owner, T_TXT);
			put_label(b, rd + 2, "sonde-", 6);
			digits = dns_put_decimal(b, rd + 9, j);
			put8(b, rd + 2, 6 + digits);
			end = rd + 9 + digits;
		} else if (qtype == T_SOA) {
			rd = put_rr(b, at, owner, T_SOA);
			end = dns_put_name(b, rd + 2, H_NS, nd);
			end = dns_put_name(b, end, H_HOSTMASTER, nd);
			put32(b, end, 1);
			put32(b, end + 4, 3600);
			put32(b, end + 8, 600);
			put32(b, end + 12, 86400);
			put32(b, end + 16, 300);
			end += 20;
		} else {
			return at;
		}
		put16(b, rd, end - rd - 2);
		return end;
	default:
		return at;
	}
	if (qtype != T_A)
		return at;
	rd = put_rr(b, at, owner, T_A);
	put16(b, rd, 4);
	put32(b, rd + 2, a);
	return rd + 6;
}

// The answer to the question `q` of the query in `b`, written over it:
// returns its length.
__attribute__((noinline)) int dns_answer(struct dns_buf *b,
					 const struct question *q,
					 const struct dns_cfg *cfg)
{
	struct node nd = {};
	__u32 at, owner = DNS_HDR, answers = 0, rcode = RCODE_NOERROR, tc = 0;
	__u32 hop;

	if (!b || !q || !cfg)
		return 0;
	dns_find(b, q, cfg, &nd);
	nd.qtype = q->qtype;
	at = q->end;
	if (nd.kind == N_NONE)
		rcode = RCODE_NXDOMAIN;
	else if (nd.kind == N_LAME)
		rcode = RCODE_SERVFAIL;
	else if (nd.kind == N_BIG && q->qtype == T_TXT)
		tc = 1;
	// The chain: chain -> alias -> www, far -> www of the next zone; each
	// CNAME's owner is the name the one before wrote (the first, the question).
	for (hop = 0; hop < 3 && rcode == RCODE_NOERROR; hop++) {
		__u32 rd, target = H_WWW, kind = N_WWW;
		__u64 j = nd.j;

		if (nd.kind == N_CHAIN) {
			target = H_ALIAS;
			kind = N_ALIAS;
		} else if (nd.kind == N_FAR) {
			j = (j + 1) % cfg->zones;
		} else if (nd.kind != N_ALIAS) {
			__u32 next = dns_put_records(b, at, owner, &nd, cfg);

			answers += next != at;
			at = next;
			break;
		}
		nd.kind = kind;
		nd.j = j;
		rd = put_rr(b, at, owner, T_CNAME);
		owner = rd + 2;
		at = dns_put_name(b, owner, target, &nd);
		put16(b, rd, at - owner);
		answers++;
		if (q->qtype == T_CNAME)
			break;
	}
	if (q->opt) {
		put8(b, at, 0);
		put16(b, at + 1, T_OPT);
		put16(b, at + 3, EDNS_PAYLOAD);
		put32(b, at + 5, 0);
		put16(b, at + 9, 0);
		at += 11;
	}
	put8(b, 2, 0x80 | (get8(b, 2) & 0x79) | (tc ? 0x02 : 0));
	put8(b, 3, 0x80 | (get8(b, 3) & 0x10) | rcode);
	put16(b, 6, answers);
	put16(b, 8, 0);
	put16(b, 10, q->opt ? 1 : 0);
	dns_count(DNS_ANSWERED);
	return at;
}

// A header alone with `rcode`: the ID, opcode, RD and CD kept.
static __always_inline __u32 header_only(struct dns_buf *b, __u32 rcode)
{
	put8(b, 2, 0x80 | (get8(b, 2) & 0x79));
	put8(b, 3, 0x80 | (get8(b, 3) & 0x10) | rcode);
	put16(b, 4, 0);
	put16(b, 6, 0);
	put16(b, 8, 0);
	put16(b, 10, 0);
	return DNS_HDR;
}

// The reply to the query of `len` bytes in `b` (of which `copied` were read):
// its length, or 0 to drop it (counted).
__attribute__((noinline)) int dns_reply(struct dns_buf *b, __u32 len,
					__u32 copied,
					const struct dns_cfg *cfg)
{
	struct question q = {};
	__u32 rcode;

	if (!b || !cfg)
		return 0;
	if (len < DNS_HDR) {
		dns_count(DNS_DROP_SHORT);
		return 0;
	}
	if (get8(b, 2) & 0x80) {
		dns_count(DNS_DROP_RESPONSE);
		return 0;
	}
	if (get8(b, 2) & 0x78) {
		dns_count(DNS_NOTIMP);
		return header_only(b, RCODE_NOTIMP);
	}
	rcode = copied == len ? dns_question(b, len, &q) : RCODE_FORMERR;
	if (rcode) {
		dns_count(rcode == RCODE_REFUSED ? DNS_REFUSED : DNS_FORMERR);
		return header_only(b, rcode);
	}
	return dns_answer(b, &q, cfg);
}

// The sum of the first `len` bytes of `b` as 16-bit words in memory order (a
// trailing odd byte padded with zero), as the checksums above sum.
__attribute__((noinline)) int dns_sum(const struct dns_buf *b, __u32 len)
{
	__u32 sum = 0, i;

	if (!b)
		return 0;
	for (i = 0; i < DNS_BUF; i += 2) {
		if (i + 2 > len)
			break;
		sum += get8(b, i) | (__u32)get8(b, i + 1) << 8;
	}
	if (len & 1)
		sum += get8(b, len - 1);
	return sum;
}

// A frame to the tree's addresses: to the kernel (XDP_PASS), answered
// (XDP_TX), dropped; or -1 when it is none of the tree's, for the rest of the
// program to see.
__attribute__((noinline)) int dns_tree_frame(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct eth_hdr *eth = data;
	struct ipv4_hdr *ip = data + ETH_LEN;
	struct udp_hdr *uh = data + ETH_LEN + IP4_LEN;
	__u32 zero = 0, daddr, tot, len, copied, reply_len, frame_len;
	struct dns_cfg *cfg = bpf_map_lookup_elem(&dns_cfg, &zero);
	struct dns_buf *b;
	__u8 mac[6];
	__u32 addr;
	__u16 port;
	__u64 sum;

	if (!cfg || !(cfg->flags & DNS_TREE_ON) || (void *)(uh + 1) > end ||
	    eth->proto != bpf_htons(ETH_P_IP))
		return -1;
	daddr = bpf_ntohl(ip->daddr);
	if ((daddr & cfg->servers_mask4) == cfg->servers_net4)
		return XDP_PASS;
	if ((daddr & cfg->answer_mask4) != cfg->answer_net4)
		return -1;
	if (!(cfg->flags & DNS_ANSWER) || ip->protocol != IPPROTO_UDP)
		return XDP_PASS;
	tot = bpf_ntohs(ip->tot_len);
	if (ip->ver_ihl != 0x45 || (ip->frag_off & bpf_htons(IPV4_MF_OFFSET)) ||
	    fold(sum_words(ip, IP4_LEN / 2)) != 0xffff || tot < IP4_LEN + UDP_LEN ||
	    data + ETH_LEN + tot > end || bpf_ntohs(uh->len) != tot - IP4_LEN) {
		dns_count(DNS_DROP_IP);
		return XDP_DROP;
	}
	if (uh->dest != bpf_htons(DNS_PORT))
		return XDP_PASS;
	b = bpf_map_lookup_elem(&dns_scratch, &zero);
	if (!b)
		return XDP_DROP;
	len = tot - IP4_LEN - UDP_LEN;
	if (len < DNS_HDR) {
		dns_count(DNS_DROP_SHORT);
		return XDP_DROP;
	}
	// A query longer than DNS_MAX is read as far as its header.
	copied = len <= DNS_MAX ? len : DNS_HDR;
	asm volatile("" : "+r"(copied));
	copied &= DNS_MASK;
	if (copied < DNS_HDR || bpf_xdp_load_bytes(ctx, DNS_AT, b->m, copied))
		return XDP_DROP;
	if (uh->check && copied == len) {
		sum = sum_words(&ip->saddr, 4) + bpf_htons(IPPROTO_UDP) + uh->len +
		      sum_words(uh, UDP_LEN / 2) + (__u32)dns_sum(b, len);
		if (fold(sum) != 0xffff) {
			dns_count(DNS_DROP_CHECKSUM);
			return XDP_DROP;
		}
	}
	reply_len = dns_reply(b, len, copied, cfg);
	if (reply_len < DNS_HDR || reply_len > DNS_BUF)
		return XDP_DROP;

	frame_len = end - data;
	if (bpf_xdp_adjust_tail(ctx, (int)(DNS_AT + reply_len) - (int)frame_len)) {
		dns_count(DNS_DROP_ROOM);
		return XDP_DROP;
	}
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	eth = data;
	ip = data + ETH_LEN;
	uh = data + ETH_LEN + IP4_LEN;
	if ((void *)(uh + 1) > end)
		return XDP_DROP;
	__builtin_memcpy(mac, eth->dst, 6);
	__builtin_memcpy(eth->dst, eth->src, 6);
	__builtin_memcpy(eth->src, mac, 6);
	addr = ip->saddr;
	ip->saddr = ip->daddr;
	ip->daddr = addr;
	ip->tos = 0;
	ip->tot_len = bpf_htons(IP4_LEN + UDP_LEN + reply_len);
	ip->id = 0;
	ip->frag_off = bpf_htons(IPV4_DF);
	ip->ttl = REPLY_TTL;
	ip->check = 0;
	ip->check = ~fold(sum_words(ip, IP4_LEN / 2));
	port = uh->source;
	uh->source = uh->dest;
	uh->dest = port;
	uh->len = bpf_htons(UDP_LEN + reply_len);
	uh->check = 0;
	sum = sum_words(&ip->saddr, 4) + bpf_htons(IPPROTO_UDP) + uh->len +
	      sum_words(uh, UDP_LEN / 2) + (__u32)dns_sum(b, reply_len);
	uh->check = ~fold(sum);
	// 0 means "no checksum": all ones says the same sum.
	if (uh->check == 0)
		uh->check = 0xffff;
	reply_len &= DNS_MASK;
	if (reply_len < DNS_HDR ||
	    bpf_xdp_store_bytes(ctx, DNS_AT, b->m, reply_len))
		return XDP_DROP;
	return XDP_TX;
}
