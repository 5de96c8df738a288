//! The seccomp policy's compiler: ranges of syscall numbers, each with one
//! verdict, to one classic BPF program (the policy itself, and why it says
//! what it says, are in the parent module).
//!
//! The policy compiles to one classic BPF program (`Filters::program`):
//!
//! 1. The architecture check: a foreign architecture kills the process.
//! 2. A binary search over the syscall number. The numbers `0..=u32::MAX`
//!    are cut into ranges of one verdict (`Verdict::Allow`, `EPERM`,
//!    `ENOSYS`, or "look at this call's arguments"): at most 11
//!    comparisons for any call on x86_64, where a linear chain
//!    (seccompiler's shape) compares up to every listed number. The tree
//!    is its branch nodes alone (96 on x86_64), each jumping straight to
//!    its verdict's shared return or to its call's argument block.
//! 3. One short block per call whose verdict depends on an argument
//!    ([`When`] other than `Always`), reached from the tree with the call
//!    already known: it loads the argument's low 32 bits and compares
//!    (`JEQ` per value, one `JSET` for a set of flags); a match is `EPERM`,
//!    anything else is allowed.
//! 4. The three shared returns: allow, `EPERM`, `ENOSYS`.
//!
//! Why not seccompiler: it compiles a linear chain with one action on a
//! match and one on a mismatch, so the policy's three outcomes took two
//! filters of 1,330 and 412 instructions on x86_64. Installing a filter
//! costs the kernel a conversion to eBPF and a JIT compilation (each
//! proportional to its length) and, to build its per-syscall action
//! cache, an emulation of the filter for every syscall number, with
//! interrupts off: together about 0.6 ms of CPU in every sandboxed run.
//! This program is 125 instructions on x86_64, one filter, and its
//! emulation stops after a dozen instructions. Its install costs the child
//! about 40 µs (measured in `docs/perf-log.md`: 60-68 µs when each range
//! had its own return and seccompiler compiled the argument rules into a
//! block that checked the architecture and the number again, 324
//! instructions). Calls it allows from the number alone are in the
//! kernel's action cache (Linux 5.11+) and never run the program; the
//! kernel caches only "allow", so refused calls run it, a dozen
//! instructions. The program's verdicts equal what the two seccompiler
//! filters gave together, for every number and argument the tests try
//! (`the_tree_says_what_the_two_filters_said`); seccompiler stays as that
//! reference, and for its types.
//!
//! The program is plain data: [`Filters::to_bytes`](super::Filters::to_bytes) gives it as the
//! `struct sock_filter` array in native byte order, ready for
//! `prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &sock_fprog)` from any
//! language (the zygote installs it from Python).

use std::collections::BTreeMap;

use seccompiler::{sock_filter, BpfProgram};

use crate::error::SandboxError;

/// Argument tests (each on the low 32 bits of one argument) that narrow an
/// `EPERM` verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Always.
    Always,
    /// When argument `arg` is none of `values`.
    ArgNotIn {
        /// Argument index, 0-based.
        arg: u8,
        /// The allowed values.
        values: &'static [u64],
    },
    /// When argument `arg` is one of `values`.
    ArgIn {
        /// Argument index, 0-based.
        arg: u8,
        /// The denied values.
        values: &'static [u64],
    },
    /// When argument `arg` has any of `bits` set.
    ArgHasAnyBit {
        /// Argument index, 0-based.
        arg: u8,
        /// Each bit that triggers the denial.
        bits: &'static [u64],
    },
    /// When argument `arg` is `value` and argument `then_arg` is one of
    /// `values` (a socket option at one level, say).
    ArgIsAndArgIn {
        /// Argument index, 0-based.
        arg: u8,
        /// The value it must have.
        value: u64,
        /// The second argument's index.
        then_arg: u8,
        /// The denied values of the second argument.
        values: &'static [u64],
    },
}

/// The `SOCK_*` type bits of `socket`'s second argument (`SOCK_TYPE_MASK`).
pub(super) const SOCKET_TYPE_MASK: u64 = 0xf;

/// The whole program: the architecture check (a foreign one kills the
/// process), the syscall number loaded, then [`tree`].
pub(super) fn program(
    audit_arch: u32,
    ranges: &[(u32, Leaf)],
    tests: &BTreeMap<u32, Test>,
) -> Result<BpfProgram, SandboxError> {
    let mut program = vec![
        ins(BPF_LD_W_ABS, 0, 0, SECCOMP_DATA_ARCH),
        ins(BPF_JEQ_K, 1, 0, audit_arch),
        ins(BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),
        ins(BPF_LD_W_ABS, 0, 0, SECCOMP_DATA_NR),
    ];
    program.extend(tree(ranges, tests)?);
    if program.len() > BPF_MAXINSNS {
        return Err(too_long(program.len()));
    }
    Ok(program)
}

fn too_long(len: usize) -> SandboxError {
    SandboxError::Seccomp(seccompiler::BackendError::FilterTooLarge(len))
}

/// What the tree does with a range of syscall numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Leaf {
    Allow,
    Eperm,
    Enosys,
    /// Jump to the argument block of this syscall number.
    Arguments(u32),
}

/// What a syscall's argument block tests: a match is `EPERM`, anything
/// else is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Test {
    When(When),
    /// `Network::LoopbackTcp`'s `socket`: `EPERM` unless `AF_UNIX`, or
    /// `AF_INET` with `SOCK_STREAM` (any flags) and protocol 0 or
    /// `IPPROTO_TCP`.
    LoopbackTcpSocket,
}

pub(super) const BPF_LD_W_ABS: u16 = 0x20;
pub(super) const BPF_AND_K: u16 = 0x54;
pub(super) const BPF_JEQ_K: u16 = 0x15;
pub(super) const BPF_JGE_K: u16 = 0x35;
pub(super) const BPF_JSET_K: u16 = 0x45;
pub(super) const BPF_JA: u16 = 0x05;
pub(super) const BPF_RET_K: u16 = 0x06;
pub(super) const BPF_MAXINSNS: usize = 4096;
pub(super) const SECCOMP_DATA_NR: u32 = 0;
pub(super) const SECCOMP_DATA_ARCH: u32 = 4;
/// `seccomp_data.args[0]`; each argument is 8 bytes, its low 32 bits first
/// on the little-endian architectures the policy compiles for.
pub(super) const SECCOMP_DATA_ARGS: u32 = 16;
pub(super) const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
pub(super) const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
pub(super) const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
pub(super) const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
pub(super) const AUDIT_ARCH_AARCH64: u32 = 0xc000_00b7;

fn ins(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// Where a jump of the program after its header goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// The next instruction.
    Next,
    /// The tree's node at this index.
    Node(usize),
    /// The argument block of this syscall number.
    Block(u32),
    Allow,
    Eperm,
    Enosys,
}

impl Target {
    fn of(leaf: Leaf) -> Target {
        match leaf {
            Leaf::Allow => Target::Allow,
            Leaf::Eperm => Target::Eperm,
            Leaf::Enosys => Target::Enosys,
            Leaf::Arguments(nr) => Target::Block(nr),
        }
    }
}

/// An instruction whose jumps are not placed yet (`k` is a `JA`'s offset
/// once placed).
type Draft = (u16, Target, Target, u32);

/// The part of the program after its header, with the syscall number in
/// the accumulator: the binary search over `ranges` (sorted, each from its
/// number to the next's) as its branch nodes alone, then each argument
/// block of `tests`, then three shared returns (`Allow`, `EPERM`,
/// `ENOSYS`) that every leaf and block jumps to. Every jump goes forward,
/// as classic BPF requires; a conditional one that would span more than
/// 255 instructions fails the compilation.
fn tree(ranges: &[(u32, Leaf)], tests: &BTreeMap<u32, Test>) -> Result<Vec<sock_filter>, SandboxError> {
    /// Ranges to place, and the node branch (`true`: `jt`) that leads there.
    type Half<'a> = (&'a [(u32, Leaf)], Option<(usize, bool)>);
    let mut drafts: Vec<Draft> = Vec::new();
    // Preorder without recursion: a half's node takes the next index when
    // it leaves the stack, and the low half leaves before the high one, so
    // a node's low subtree follows it and its high one comes after that.
    let mut pending: Vec<Half> = vec![(ranges, None)];
    let mut root = Target::Enosys;
    while let Some((part, from)) = pending.pop() {
        let target = match part {
            [] => Target::Enosys,
            [(_, leaf)] => Target::of(*leaf),
            _ => {
                let (low, high) = part.split_at(part.len() / 2);
                let index = drafts.len();
                drafts.push((BPF_JGE_K, Target::Enosys, Target::Enosys, high[0].0));
                pending.push((high, Some((index, true))));
                pending.push((low, Some((index, false))));
                Target::Node(index)
            }
        };
        match from {
            Some((parent, true)) => drafts[parent].1 = target,
            Some((parent, false)) => drafts[parent].2 = target,
            None => root = target,
        }
    }
    if !matches!(root, Target::Node(_)) {
        // A single range: its verdict's jump, then the blocks and returns.
        drafts.push((BPF_JA, root, Target::Next, 0));
    }
    let mut blocks = BTreeMap::new();
    for (&nr, &test) in tests {
        blocks.insert(nr, drafts.len());
        argument_block(test, &mut drafts)?;
    }
    let exits = drafts.len();
    let at = |target: Target, pc: usize| match target {
        Target::Next => Some(pc + 1),
        Target::Node(index) => Some(index),
        Target::Block(nr) => blocks.get(&nr).copied(),
        Target::Allow => Some(exits),
        Target::Eperm => Some(exits + 1),
        Target::Enosys => Some(exits + 2),
    };
    let mut out = Vec::with_capacity(exits + 3);
    for (pc, &(code, jt, jf, k)) in drafts.iter().enumerate() {
        let offset = |target| at(target, pc).and_then(|to| to.checked_sub(pc + 1)).ok_or_else(|| too_long(exits));
        out.push(match code {
            BPF_JA => ins(code, 0, 0, u32::try_from(offset(jt)?).map_err(|_| too_long(exits))?),
            BPF_JEQ_K | BPF_JGE_K | BPF_JSET_K => {
                let short = |target| offset(target).and_then(|o| u8::try_from(o).map_err(|_| too_long(exits)));
                ins(code, short(jt)?, short(jf)?, k)
            }
            _ => ins(code, 0, 0, k),
        });
    }
    out.push(ins(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW));
    out.push(ins(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | libc::EPERM as u32));
    out.push(ins(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | libc::ENOSYS as u32));
    Ok(out)
}

/// `test`'s block: each argument compared on its low 32 bits, as the
/// kernel's `seccomp_data` gives it.
fn argument_block(test: Test, drafts: &mut Vec<Draft>) -> Result<(), SandboxError> {
    let word = |value: u64| {
        u32::try_from(value).map_err(|_| SandboxError::SeccompPolicy("a value wider than the 32 bits compared"))
    };
    let load = |arg: u8| -> Result<Draft, SandboxError> {
        if arg > 5 {
            return Err(SandboxError::SeccompPolicy("an argument past the sixth"));
        }
        Ok((BPF_LD_W_ABS, Target::Next, Target::Next, SECCOMP_DATA_ARGS + 8 * u32::from(arg)))
    };
    // One comparison per value, each match going to `hit`; the last
    // mismatch goes to `miss`.
    let any_of = |values: &[u64], hit: Target, miss: Target, drafts: &mut Vec<Draft>| {
        if values.is_empty() {
            drafts.push((BPF_JA, miss, Target::Next, 0));
        }
        for (i, &v) in values.iter().enumerate() {
            let last = i + 1 == values.len();
            drafts.push((BPF_JEQ_K, hit, if last { miss } else { Target::Next }, word(v)?));
        }
        Ok::<(), SandboxError>(())
    };
    match test {
        Test::When(When::Always) => drafts.push((BPF_JA, Target::Eperm, Target::Next, 0)),
        Test::When(When::ArgNotIn { arg, values }) => {
            drafts.push(load(arg)?);
            any_of(values, Target::Allow, Target::Eperm, drafts)?;
        }
        Test::When(When::ArgIn { arg, values }) => {
            drafts.push(load(arg)?);
            any_of(values, Target::Eperm, Target::Allow, drafts)?;
        }
        Test::When(When::ArgHasAnyBit { arg, bits }) => {
            drafts.push(load(arg)?);
            let mask = bits.iter().try_fold(0u32, |mask, &bit| word(bit).map(|b| mask | b))?;
            drafts.push((BPF_JSET_K, Target::Eperm, Target::Allow, mask));
        }
        Test::When(When::ArgIsAndArgIn { arg, value, then_arg, values }) => {
            drafts.push(load(arg)?);
            drafts.push((BPF_JEQ_K, Target::Next, Target::Allow, word(value)?));
            drafts.push(load(then_arg)?);
            any_of(values, Target::Eperm, Target::Allow, drafts)?;
        }
        Test::LoopbackTcpSocket => {
            drafts.push(load(0)?);
            drafts.push((BPF_JEQ_K, Target::Allow, Target::Next, word(libc::AF_UNIX as u64)?));
            drafts.push((BPF_JEQ_K, Target::Next, Target::Eperm, word(libc::AF_INET as u64)?));
            drafts.push(load(1)?);
            drafts.push((BPF_AND_K, Target::Next, Target::Next, word(SOCKET_TYPE_MASK)?));
            drafts.push((BPF_JEQ_K, Target::Next, Target::Eperm, word(libc::SOCK_STREAM as u64)?));
            drafts.push(load(2)?);
            drafts.push((BPF_JEQ_K, Target::Allow, Target::Next, 0));
            drafts.push((BPF_JEQ_K, Target::Allow, Target::Eperm, word(libc::IPPROTO_TCP as u64)?));
        }
    }
    Ok(())
}

#[cfg(test)]
pub(super) mod testing {
    use seccompiler::sock_filter;

    /// Runs a classic BPF program over a `seccomp_data`, the way the kernel
    /// does, for the instructions seccompiler and the tree emit.
    pub(crate) fn evaluate(prog: &[sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        trace(prog, arch, nr, args).0
    }

    /// [`evaluate`], and how many instructions ran and whether any read
    /// an argument (which keeps the call out of the kernel's action cache).
    pub(crate) fn trace(prog: &[sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> (u32, usize, bool) {
        let mut data = Vec::with_capacity(64);
        data.extend_from_slice(&nr.to_ne_bytes());
        data.extend_from_slice(&arch.to_ne_bytes());
        data.extend_from_slice(&0u64.to_ne_bytes());
        for a in args {
            data.extend_from_slice(&a.to_ne_bytes());
        }
        let (mut acc, mut pc, mut steps, mut read_args) = (0u32, 0usize, 0usize, false);
        loop {
            let ins = &prog[pc];
            pc += 1;
            steps += 1;
            match ins.code {
                0x20 => {
                    let k = ins.k as usize;
                    read_args |= k >= 16;
                    acc = u32::from_ne_bytes(data[k..k + 4].try_into().unwrap());
                }
                0x06 => return (ins.k, steps, read_args),
                0x05 => pc += ins.k as usize,
                0x15 | 0x25 | 0x35 | 0x45 => {
                    let taken = match ins.code {
                        0x15 => acc == ins.k,
                        0x25 => acc > ins.k,
                        0x35 => acc >= ins.k,
                        _ => acc & ins.k != 0,
                    };
                    pc += usize::from(if taken { ins.jt } else { ins.jf });
                }
                0x54 => acc &= ins.k,
                other => panic!("unexpected BPF opcode {other:#x}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{evaluate, trace};
    use super::*;

    /// The tree decides every number as its ranges say, within the
    /// search's depth plus its block, for trees of every shape; past the
    /// one-byte reach of a conditional jump it fails to compile.
    #[test]
    fn the_tree_decides_what_its_ranges_say() {
        const ODD: When = When::ArgHasAnyBit { arg: 0, bits: &[1] };
        let eperm = SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let enosys = SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        for count in [1usize, 2, 3, 4, 5, 7, 16, 17, 64, 100, 129, 200, 400] {
            let ranges: Vec<(u32, Leaf)> = (0..count)
                .map(|i| {
                    let start = i as u32 * 3;
                    let leaf = [Leaf::Allow, Leaf::Eperm, Leaf::Enosys, Leaf::Arguments(start)][(i * 7 + i / 3) % 4];
                    (start, leaf)
                })
                .collect();
            let tests: BTreeMap<u32, Test> = ranges
                .iter()
                .filter_map(|&(_, leaf)| match leaf {
                    Leaf::Arguments(nr) => Some((nr, Test::When(ODD))),
                    _ => None,
                })
                .collect();
            let body = match tree(&ranges, &tests) {
                Ok(body) => body,
                Err(SandboxError::Seccomp(seccompiler::BackendError::FilterTooLarge(_))) if count > 100 => continue,
                Err(e) => panic!("{count} ranges: {e}"),
            };
            assert!(count < 400, "400 ranges cannot fit one-byte jumps");
            let mut prog = vec![ins(BPF_LD_W_ABS, 0, 0, SECCOMP_DATA_NR)];
            prog.extend(body);
            let depth = usize::BITS - count.leading_zeros();
            for nr in (0..count as u32 * 3 + 4).chain([u32::MAX]) {
                let leaf = ranges[ranges.partition_point(|&(start, _)| start <= nr) - 1].1;
                for (arg, odd) in [(2u64, false), (3, true)] {
                    let want = match leaf {
                        Leaf::Allow => SECCOMP_RET_ALLOW,
                        Leaf::Eperm => eperm,
                        Leaf::Enosys => enosys,
                        Leaf::Arguments(_) if odd => eperm,
                        Leaf::Arguments(_) => SECCOMP_RET_ALLOW,
                    };
                    let (got, steps, _) = trace(&prog, 0, nr, [arg, 0, 0, 0, 0, 0]);
                    assert_eq!(got, want, "{count} ranges, nr {nr}, arg {arg}");
                    assert!(steps <= depth as usize + 4, "{count} ranges, nr {nr}: {steps} steps");
                }
            }
        }
    }

    /// Each kind of argument test, alone, against what it says.
    #[test]
    fn argument_blocks_test_the_low_32_bits() {
        let eperm = SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let run = |test: Test, args: [u64; 6]| {
            let tests = BTreeMap::from([(5, test)]);
            let mut prog = vec![ins(BPF_LD_W_ABS, 0, 0, SECCOMP_DATA_NR)];
            prog.extend(tree(&[(0, Leaf::Allow), (5, Leaf::Arguments(5)), (6, Leaf::Allow)], &tests).unwrap());
            evaluate(&prog, 0, 5, args) == eperm
        };
        let not_in = Test::When(When::ArgNotIn { arg: 1, values: &[4, 9] });
        assert!(!run(not_in, [0, 4, 0, 0, 0, 0]) && !run(not_in, [0, 9 | 1 << 32, 0, 0, 0, 0]));
        assert!(run(not_in, [4, 5, 4, 4, 4, 4]));
        let is_in = Test::When(When::ArgIn { arg: 5, values: &[4, 9] });
        assert!(run(is_in, [0, 0, 0, 0, 0, 9]) && !run(is_in, [9, 9, 9, 9, 9, 8]));
        let bits = Test::When(When::ArgHasAnyBit { arg: 0, bits: &[0x10, 0x4000_0000] });
        assert!(run(bits, [0x4000_0001, 0, 0, 0, 0, 0]) && !run(bits, [0x8000_000f, 0, 0, 0, 0, 0]));
        let pair = Test::When(When::ArgIsAndArgIn { arg: 1, value: 1, then_arg: 2, values: &[7, 8] });
        assert!(run(pair, [0, 1, 8, 0, 0, 0]) && !run(pair, [0, 2, 8, 0, 0, 0]) && !run(pair, [0, 1, 9, 0, 0, 0]));
        let empty_in = Test::When(When::ArgIn { arg: 0, values: &[] });
        let empty_not_in = Test::When(When::ArgNotIn { arg: 0, values: &[] });
        assert!(!run(empty_in, [0; 6]) && run(empty_not_in, [0; 6]));
        let wide = Test::When(When::ArgIn { arg: 0, values: &[1 << 32] });
        assert!(tree(&[(0, Leaf::Arguments(0)), (1, Leaf::Allow)], &BTreeMap::from([(0, wide)])).is_err());
        let seventh = Test::When(When::ArgIn { arg: 6, values: &[1] });
        assert!(tree(&[(0, Leaf::Arguments(0)), (1, Leaf::Allow)], &BTreeMap::from([(0, seventh)])).is_err());
    }
}
