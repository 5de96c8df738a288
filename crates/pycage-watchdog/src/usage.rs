//! What a sample finds and what a budget allows: the run's scope, its
//! usage (CPU, memory, kernel memory, descriptors) and the check of a
//! usage against a budget.

use std::time::Duration;

use rustix::process::Pid;

use crate::limits::*;

use crate::procfs::max_run_pipes;
use crate::sockets::*;

/// Which processes make up a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// The run's PID namespace, given the host pid of its init process.
    PidNamespace {
        /// Host pid of PID 1 of the run's namespace.
        init: Pid,
        /// A zygote's child, born in the namespace: the program, outside
        /// the init's tree (the zygote is its parent), so walked from too.
        program: Option<Pid>,
        /// The run's network namespace, for its sockets' buffers.
        sockets: Option<SockDiag>,
    },
    /// `root` and its descendants (process isolation: `root` is the run's
    /// first process).
    Descendants {
        /// The run's first process.
        root: Pid,
    },
}

/// What a run holds in the kernel, outside every process's PSS (see the
/// module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Kernel {
    /// Bytes queued in the run's sockets (receive, send, forward-allocated,
    /// option and backlog memory).
    pub socket_bytes: u64,
    /// Distinct pipes the run's processes hold.
    pub pipes: u64,
    /// epoll registrations of the run's epoll descriptors.
    pub epoll_watches: u64,
    /// Blocks allocated to memfds the run's processes hold.
    pub memfd_bytes: u64,
    /// Descriptors the run's processes hold.
    pub descriptors: u64,
    /// Processes whose descriptors could not be read (counted at their
    /// `RLIMIT_NOFILE`, each descriptor a full pipe).
    pub hidden: u64,
}

impl Kernel {
    /// The bytes this counts as.
    pub fn bytes(&self) -> u64 {
        let page = rustix::param::page_size() as u64;
        self.socket_bytes
            .saturating_add(self.pipes.saturating_mul(PIPE_PAGES * page))
            .saturating_add(self.epoll_watches.saturating_mul(EPOLL_WATCH_BYTES))
            .saturating_add(self.memfd_bytes)
    }
}

/// One sample of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU time of every process of the run, live or reaped by the run.
    pub cpu: Duration,
    /// Proportional set size of every live process, plus what the run
    /// holds in the kernel ([`Kernel::bytes`]), in bytes.
    pub memory_bytes: u64,
    /// The kernel objects and memory in `memory_bytes`.
    pub kernel: Kernel,
    /// Live processes found.
    pub processes: usize,
    /// [`MAX_PROCESSES`] stopped the walk.
    pub truncated: bool,
}

/// The run-wide budgets a [`Usage`] is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Total CPU time.
    pub cpu: Duration,
    /// Total memory of the run's processes.
    pub memory_bytes: u64,
}

impl Budget {
    /// No budget (nothing is ever exceeded).
    pub const UNLIMITED: Budget = Budget { cpu: Duration::MAX, memory_bytes: u64::MAX };
}

/// A budget a sample went over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    /// The run used more CPU time than its budget: settle as `timeout`.
    Cpu {
        /// Used so far.
        used: Duration,
        /// The budget.
        budget: Duration,
    },
    /// The run's processes hold more memory than its budget: end the run,
    /// `worker-exit`.
    Memory {
        /// Held now.
        used: u64,
        /// The budget.
        budget: u64,
        /// Of `used`, what the run holds in the kernel.
        kernel: u64,
    },
    /// The run holds more kernel objects of one kind than a run may:
    /// end the run, `worker-exit`.
    Objects {
        /// Which objects ("descriptors", "epoll registrations", "pipes").
        what: &'static str,
        /// Held now (at least).
        used: u64,
        /// Most a run may hold.
        budget: u64,
        /// Processes whose descriptors could not be read, counted at
        /// their `RLIMIT_NOFILE`.
        hidden: u64,
    },
}

impl Exceeded {
    /// The run failure message, naming the budget.
    pub fn message(&self) -> String {
        match self {
            Exceeded::Cpu { used, budget } => format!(
                "the CPU budget of {} s was exceeded by the run's processes together ({:.1} s used)",
                budget.as_secs_f64(),
                used.as_secs_f64()
            ),
            Exceeded::Memory { used, budget, kernel } if *kernel >= 1 << 20 => format!(
                "the memory budget of {} MiB was exceeded by the run's processes together ({} MiB held, {} MiB of it in the kernel: buffers, memfds); the run was ended",
                budget >> 20,
                used >> 20,
                kernel >> 20
            ),
            Exceeded::Memory { used, budget, .. } => format!(
                "the memory budget of {} MiB was exceeded by the run's processes together ({} MiB held); the run was ended",
                budget >> 20,
                used >> 20
            ),
            Exceeded::Objects { what, used, budget, hidden: 0 } => format!(
                "the run's processes together held more than the {budget} {what} a run may hold ({used}); the run was ended"
            ),
            Exceeded::Objects { what, used, budget, hidden } => format!(
                "the run's processes together held more than the {budget} {what} a run may hold ({used}, counting {hidden} process(es) that hide their descriptors at their RLIMIT_NOFILE); the run was ended"
            ),
        }
    }
}

impl Usage {
    /// The first budget this sample exceeds: CPU, then the counts of
    /// kernel objects, then memory.
    pub fn check(&self, budget: &Budget) -> Option<Exceeded> {
        if self.cpu > budget.cpu {
            return Some(Exceeded::Cpu { used: self.cpu, budget: budget.cpu });
        }
        // Counts first: a run over one is over it whatever its memory.
        let k = &self.kernel;
        let objects = [
            ("descriptors", k.descriptors, MAX_RUN_DESCRIPTORS),
            ("epoll registrations", k.epoll_watches, MAX_RUN_EPOLL_WATCHES),
            ("pipes", k.pipes, max_run_pipes()),
        ];
        if let Some((what, used, budget)) = objects.into_iter().find(|(_, used, most)| used > most) {
            return Some(Exceeded::Objects { what, used, budget, hidden: k.hidden });
        }
        (self.memory_bytes > budget.memory_bytes).then(|| Exceeded::Memory {
            used: self.memory_bytes,
            budget: budget.memory_bytes,
            kernel: self.kernel.bytes(),
        })
    }
}
