//! RS256 verification of an operator token: the full check versus a verified-token cache hit.
//! Run: `cargo bench --bench jwt`.

#![allow(clippy::expect_used)]

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use gshare::auth::keys::KeyRingDir;
use gshare::auth::tokens::{AUD_INTERNAL, TokenAuthority};
use gshare::clock::Clock;

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Clock::system();
    let (authority, _) =
        TokenAuthority::open(AUD_INTERNAL, KeyRingDir::new(dir.path().join("keys")), None, clock.clone())
            .expect("ring");
    let token = authority.mint("operator:clu_local", Duration::from_secs(3600)).expect("mint");
    let now = clock.now();
    let mut g = c.benchmark_group("rs256_verify");
    g.bench_function("uncached", |b| {
        b.iter(|| authority.verify_uncached(std::hint::black_box(&token), now).expect("valid"))
    });
    authority.verify(&token).expect("valid");
    g.bench_function("cache_hit", |b| b.iter(|| authority.verify(std::hint::black_box(&token)).expect("valid")));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
