//! Kernel baselines: run the usemem workload inside a memory cgroup against
//! the kernel's zswap, zram or a swap file, restoring every setting after.

pub fn run_usemem(args: &crate::usemem::Args) -> anyhow::Result<()> {
    anyhow::bail!("usemem --backend {}: not built yet", args.backend.name())
}
