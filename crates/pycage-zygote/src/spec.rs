//! What a child is set up with ([`ChildSpec`], [`JoinSpec`]) and the
//! `spawn` message the host writes for it: the join plan the zygote
//! already holds is named by number instead of sent again
//! ([`JoinRequest::plan`]). The supervisor thread alone encodes spawns,
//! and sends them in the order it encodes them.

use std::path::PathBuf;

use pycage_protocol::zygote::{JoinPlanBody, JoinRequest, SpawnRequest, ZygoteRequest};

/// What a child is set up with before it serves its run.
#[derive(Debug, Clone)]
pub struct ChildSpec {
    /// Its working directory (the run dir; inside the sandbox when joining).
    pub cwd: PathBuf,
    /// Environment variables set in the child on top of the zygote's.
    pub env: Vec<(String, String)>,
    /// `(name, soft, hard)`; names as in `pycage.zygote._RLIMITS`.
    pub rlimits: Vec<(&'static str, u64, u64)>,
    /// Sandbox isolation: the child joins a shell built by the host (its
    /// namespace, root and ruleset descriptors follow the two channel
    /// descriptors, in [`pycage_sandbox::Join`]'s field order) and applies
    /// the program's own steps.
    pub join: Option<JoinSpec>,
    /// Skip the child's warm-up ([`pycage_protocol::zygote::SpawnRequest::cold`]).
    pub cold: bool,
}

/// How a zygote's child joins a sandbox shell.
#[derive(Debug, Clone)]
pub struct JoinSpec {
    /// The ids to drop to and the program's confinement steps.
    pub plan: pycage_sandbox::JoinPlan,
    /// The environment every sandboxed child gets (`HOME`, `TMPDIR`, ...,
    /// as the sandbox shows paths): part of the plan the zygote keeps, and
    /// set by the zygote in itself ([`JoinPlanBody::env`]), not in each
    /// child. [`ChildSpec::env`] comes after it.
    pub env: Vec<(String, String)>,
    /// Host path prefixes and where the sandbox shows them: the child,
    /// forked from a zygote that runs on the host, rewrites `sys.path`,
    /// `sys.prefix` and friends with them.
    pub remaps: Vec<(String, String)>,
}

/// The join plan the zygote was sent last ([`JoinRequest::plan`]): a spawn
/// of the same plan names it by number. The zygote keeps one plan (a
/// runtime's children all join with the same one), so a spawn of another
/// plan sends that one whole, under a new number.
#[derive(Debug, Default)]
pub(crate) struct SentPlans {
    last: Option<(u64, JoinPlanBody)>,
    numbered: u64,
}

impl SentPlans {
    pub(crate) fn request(&mut self, join: &JoinSpec) -> JoinRequest {
        let host_ids = join.plan.host_ids;
        if let Some((plan, body)) = &self.last {
            if body.confine == join.plan.confine && body.remaps == join.remaps && body.env == join.env {
                return JoinRequest { host_ids, plan: *plan, body: None };
            }
        }
        self.numbered += 1;
        let body =
            JoinPlanBody { env: join.env.clone(), remaps: join.remaps.clone(), confine: join.plan.confine.clone() };
        self.last = Some((self.numbered, body.clone()));
        JoinRequest { host_ids, plan: self.numbered, body: Some(body) }
    }

    /// The zygote may not hold the last plan (a spawn that carried it was
    /// refused before the zygote kept it): send it whole next time.
    pub(crate) fn forget(&mut self) {
        self.last = None;
    }
}

pub(crate) fn encode_spawn(id: u64, spec: &ChildSpec, plans: &mut SentPlans) -> Vec<u8> {
    let join = spec.join.as_ref().map(|j| plans.request(j));
    ZygoteRequest::Spawn(SpawnRequest {
        id,
        cwd: spec.cwd.to_string_lossy().into_owned(),
        env: spec.env.clone(),
        rlimits: spec.rlimits.iter().map(|(n, soft, hard)| ((*n).to_owned(), *soft, *hard)).collect(),
        join,
        cold: spec.cold,
    })
    .encode()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pycage_protocol::zygote::{ConfineStep, Rlimit};

    fn join(uid: u32, nproc: u64) -> JoinSpec {
        JoinSpec {
            plan: pycage_sandbox::JoinPlan {
                host_ids: Some((uid, uid)),
                confine: vec![ConfineStep::Limit { resource: Rlimit::Nproc, value: nproc }, ConfineStep::NoNewPrivs],
            },
            remaps: vec![("/h".into(), "/s".into())],
            env: vec![("HOME".into(), "/work".into())],
        }
    }

    #[test]
    fn a_plan_is_sent_whole_once_then_named() {
        let mut plans = SentPlans::default();
        let first = plans.request(&join(1000, 64));
        assert_eq!((first.plan, first.host_ids), (1, Some((1000, 1000))));
        let body = first.body.expect("the first spawn carries the plan");
        assert_eq!(body.remaps, vec![("/h".to_owned(), "/s".to_owned())]);
        assert_eq!(body.confine, join(1000, 64).plan.confine);
        // Another run's ids, the same plan: named only.
        let second = plans.request(&join(1001, 64));
        assert_eq!((second.plan, second.host_ids, second.body), (1, Some((1001, 1001)), None));
        // Another plan: whole, under a new number; then named.
        let other = plans.request(&join(1001, 65));
        assert_eq!(other.plan, 2);
        assert!(other.body.is_some());
        assert_eq!(plans.request(&join(1002, 65)).body, None);
        let mut remapped = join(1002, 65);
        remapped.remaps.push(("/a".into(), "/b".into()));
        assert_eq!(plans.request(&remapped).plan, 3);
        remapped.env.push(("TMPDIR".into(), "/tmp".into()));
        let body = plans.request(&remapped).body.expect("another environment is another plan");
        assert_eq!(body.env, vec![("HOME".to_owned(), "/work".to_owned()), ("TMPDIR".to_owned(), "/tmp".to_owned())]);
        // Forgotten (a refused spawn may have carried it): sent whole again.
        plans.forget();
        let again = plans.request(&remapped);
        assert_eq!(again.plan, 5);
        assert!(again.body.is_some());
    }

    #[test]
    fn a_spawn_that_names_its_plan_is_small() {
        let mut plans = SentPlans::default();
        let mut spec = ChildSpec { cwd: "/work".into(), env: Vec::new(), rlimits: Vec::new(), join: None, cold: false };
        let mut big = join(7, 64);
        big.plan.confine.push(ConfineStep::Seccomp { filter: vec![0u8; 1000] });
        spec.join = Some(big);
        let whole = encode_spawn(1, &spec, &mut plans);
        let named = encode_spawn(2, &spec, &mut plans);
        assert!(whole.len() > 2000, "{}", whole.len());
        assert_eq!(
            String::from_utf8(named).unwrap(),
            r#"{"type":"spawn","id":2,"cwd":"/work","env":{},"rlimits":{},"join":{"hostIds":[7,7],"plan":1}}"#
        );
    }
}
