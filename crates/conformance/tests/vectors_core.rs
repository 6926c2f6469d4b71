//! Every vector file in `vectors/` against the reference backend (floodgate-core), plus checks
//! that the runner itself notices a wrong answer, labels it, and rejects malformed vectors.

use floodgate_conformance::{
    differential, load_dir, run_dir, run_vector, vectors_dir, Backend, BackendFailure, CoreBackend,
    MemoryBackend, Reply, Report, Request, Vector,
};
use floodgate_core::{AlgorithmKind, Policy, Timestamp};

/// The labels of a report's failures, in order (`algorithm/backend/case#step`).
fn failure_labels(report: &Report) -> Vec<&str> {
    report.failures.iter().map(|f| f.label.as_str()).collect()
}

#[test]
fn every_vector_file_passes_on_the_core() {
    let report = run_dir(&mut CoreBackend::default(), &vectors_dir()).unwrap();
    assert!(report.is_ok(), "{report}");
    assert!(report.steps > 0, "no steps were run");
}

#[test]
fn every_vector_file_passes_on_the_memory_store() {
    let report = run_dir(&mut MemoryBackend::default(), &vectors_dir()).unwrap();
    assert!(report.is_ok(), "{report}");
    assert!(report.steps > 100, "only {} steps", report.steps);
}

#[test]
fn vector_files_are_named_after_their_algorithm_and_cases_are_unique() {
    let files = load_dir(&vectors_dir()).unwrap();
    for (path, vector) in &files {
        let stem = path.file_stem().unwrap().to_str().unwrap();
        assert_eq!(stem, vector.algorithm, "{}", path.display());
        let kind: AlgorithmKind = vector.algorithm.parse().unwrap();
        assert_eq!(kind.as_str(), stem);
        let mut names: Vec<&str> = vector.cases.iter().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "duplicate case names in {stem}");
    }
    for required in ["gcra", "token_bucket", "leaky_bucket"] {
        assert!(
            files.iter().any(|(_, v)| v.algorithm == required),
            "no vectors for {required}"
        );
    }
}

/// A backend that adds one to every `remaining`: the runner must flag each step it touches.
#[derive(Debug, Default)]
struct OffByOne(CoreBackend);

impl Backend for OffByOne {
    fn name(&self) -> &str {
        "off_by_one"
    }
    fn reset(&mut self) -> Result<(), BackendFailure> {
        self.0.reset()
    }
    fn check(
        &mut self,
        policy: &Policy,
        key: &str,
        now: Timestamp,
        cost: u64,
        peek: bool,
    ) -> Reply {
        match self.0.check(policy, key, now, cost, peek) {
            Reply::Answer(Ok(mut d)) => {
                d.remaining += 1;
                Reply::Answer(Ok(d))
            }
            other => other,
        }
    }
}

const TWO_STEPS: &str = r#"
algorithm = "gcra"
[[case]]
name = "burst_then_exact_retry"
quota = "2/s"
start_us = 1_700_000_000_000_000
# 2/s: T = 500,000 us, tau = 2 x T = 1,000,000 us.
[[case.step]]
at_us = 0
cost = 2
allowed = true
remaining = 0
reset_after_us = 1_000_000
# tat = 1,000,000 us ahead; + T = 1,500,000 > tau by 500,000.
[[case.step]]
at_us = 0
cost = 1
allowed = false
remaining = 0
reset_after_us = 1_000_000
retry_after_us = 500_000
"#;

#[test]
fn a_wrong_backend_is_reported_with_labels() {
    let vector = Vector::parse(TWO_STEPS).unwrap();
    assert!(run_vector(&mut CoreBackend::default(), &vector).is_ok());
    let report = run_vector(&mut OffByOne::default(), &vector);
    assert_eq!(
        failure_labels(&report),
        [
            "gcra/off_by_one/burst_then_exact_retry#1",
            "gcra/off_by_one/burst_then_exact_retry#2"
        ]
    );
    assert!(report.failures[0].message.contains("remaining=0"));
    assert!(report.failures[0].message.contains("remaining=1"));
}

#[test]
fn a_wrong_expectation_is_reported() {
    let vector =
        Vector::parse(&TWO_STEPS.replace("retry_after_us = 500_000", "retry_after_us = 499_999"))
            .unwrap();
    let report = run_vector(&mut CoreBackend::default(), &vector);
    assert_eq!(report.failures.len(), 1, "{report}");
    assert_eq!(
        report.failures[0].label,
        "gcra/core/burst_then_exact_retry#2"
    );
}

#[test]
fn malformed_vectors_are_rejected() {
    // Unknown field (a typo) is a parse error naming the line.
    let err = Vector::parse(&TWO_STEPS.replace(
        "reset_after_us = 1_000_000\nretry",
        "reset_afer_us = 1\nretry",
    ))
    .unwrap_err();
    assert!(err.to_string().contains("reset_afer_us"), "{err}");
    // retry_after_us on an admitted step, a bad quota, an unknown error name: reported per step/case.
    let vector = Vector::parse(
        r#"
        algorithm = "token_bucket"
        [[case]]
        name = "bad_step"
        quota = "1/s"
        [[case.step]]
        at_us = 0
        cost = 1
        allowed = true
        remaining = 0
        reset_after_us = 1_000_000
        retry_after_us = 1
        [[case.step]]
        at_us = 0
        cost = 9
        error = "too_big"
        [[case]]
        name = "bad_quota"
        quota = "0/s"
        "#,
    )
    .unwrap();
    let report = run_vector(&mut CoreBackend::default(), &vector);
    assert_eq!(
        failure_labels(&report),
        [
            "token_bucket/core/bad_step#1",
            "token_bucket/core/bad_step#2",
            "token_bucket/core/bad_quota"
        ],
        "{report}"
    );
}

#[test]
fn keys_are_independent_and_reset_clears_between_cases() {
    let vector = Vector::parse(
        r#"
        algorithm = "leaky_bucket"
        [[case]]
        name = "fill_a"
        quota = "1/h"
        [[case.step]]
        at_us = 0
        cost = 1
        key = "a"
        allowed = true
        remaining = 0
        reset_after_us = 3_600_000_000
        # key b is untouched by a
        [[case.step]]
        at_us = 0
        cost = 1
        key = "b"
        allowed = true
        remaining = 0
        reset_after_us = 3_600_000_000
        # a fresh case: key a is empty again
        [[case]]
        name = "again"
        quota = "1/h"
        [[case.step]]
        at_us = 0
        cost = 1
        key = "a"
        allowed = true
        remaining = 0
        reset_after_us = 3_600_000_000
        "#,
    )
    .unwrap();
    let report = run_vector(&mut CoreBackend::default(), &vector);
    assert!(report.is_ok(), "{report}");
    assert_eq!((report.cases, report.steps), (2, 3));
}

#[test]
fn differential_runs_compare_two_backends_request_by_request() {
    let policy = Policy::new(AlgorithmKind::TokenBucket, "2/s".parse().unwrap()).unwrap();
    // Two admissions, then a denial: the off-by-one backend differs on every decision; the
    // error (cost 3 > burst 2) is the same on both.
    let requests: Vec<Request> = [(0, 1), (0, 1), (10, 1), (10, 3)]
        .into_iter()
        .map(|(now_us, cost)| Request {
            key: "k".into(),
            now_us: 1_700_000_000_000_000 + now_us,
            cost,
            peek: false,
        })
        .collect();
    let same = differential(
        &mut CoreBackend::default(),
        &mut CoreBackend::default(),
        &policy,
        "random",
        &requests,
    );
    assert!(same.is_ok(), "{same}");
    assert_eq!(same.steps, 4);
    let report = differential(
        &mut CoreBackend::default(),
        &mut OffByOne::default(),
        &policy,
        "random",
        &requests,
    );
    assert_eq!(
        failure_labels(&report),
        [
            "token_bucket/core-vs-off_by_one/random#1",
            "token_bucket/core-vs-off_by_one/random#2",
            "token_bucket/core-vs-off_by_one/random#3"
        ],
        "{report}"
    );
}
