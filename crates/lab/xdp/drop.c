// SPDX-License-Identifier: GPL-2.0
//
// XDP sink for the lab side of the veth (nx0): drop every frame at the
// earliest hook, so pure-transmit measurements do not pay for the lab-side
// kernel stack. build.rs compiles it with `clang -O2 -g -target bpf -c`.
//
// The two definitions below are copied from <linux/bpf.h> so the build needs
// no kernel headers (with -target bpf, clang does not search the multiarch
// include directory that holds <asm/types.h>).

#define XDP_DROP 1
#define SEC(name) __attribute__((section(name), used))

struct xdp_md;

SEC("xdp")
int xdp_drop(struct xdp_md *ctx)
{
	(void)ctx;
	return XDP_DROP;
}

char _license[] SEC("license") = "GPL";
